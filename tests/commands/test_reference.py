"""docs/reference/ is what tools/reference.py generates from the code now:
a page that differs (a flag, column, algorithm or task changed without
regenerating it) fails, naming the command that rewrites it."""

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO
import tasks
from tff_algos import cli
from tff_algos.algorithms import registry
from tff_algos.simulation import columns


@pytest.fixture(autouse=True)
def _the_packages_algorithms_only(monkeypatch):
  """The pages document the package's own algorithms: a user's module
  another test of this process registered (tests/commands/user_modules)
  is left out, as it is from a fresh `tools/reference.py`."""
  monkeypatch.setattr(
    registry,
    '_ALGORITHMS',
    {
      name: entry
      for name, entry in registry._ALGORITHMS.items()
      if entry.build.__module__.startswith('tff_algos.')
    },
  )


def _reference():
  spec = importlib.util.spec_from_file_location(
    'reference', REPO / 'tools' / 'reference.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.fast
def test_every_reference_page_is_up_to_date():
  reference = _reference()
  for name, page in reference.PAGES.items():
    path = REPO / 'docs' / 'reference' / name
    assert path.exists(), f'{path} missing: run {_COMMAND}'
    assert path.read_text(encoding='utf-8') == page(), (
      f'docs/reference/{name} is out of date: run {_COMMAND}'
    )


@pytest.mark.fast
def test_the_pages_hold_every_flag_algorithm_column_and_task():
  reference = _reference()
  flags = reference.flags_page()
  for group in cli._groups().values():
    for flag in group:
      assert f'| `--{flag.name}` |' in flags, flag.name
  algorithms = reference.algorithms_page()
  for name in registry.names():
    assert f'## {name}: ' in algorithms, name
  metrics = reference.metrics_page()
  for column in (*columns.DESCRIPTIONS, 'epsilon', 'client_test_accuracy_p10'):
    assert f'| `{column}` |' in metrics, column
  assert '| `fedisgd` | `vlg` |' in metrics  # A callback's column.
  task_page = reference.tasks_page()
  for name in tasks.CATALOG:
    assert f'| `{name}` |' in task_page, name
  mu = next(line for line in flags.splitlines() if '| `--mu` |' in line)
  assert 'fedprox' in mu and 'fedavg' not in mu.split('|')[5], mu


def test_generating_the_reference_imports_no_tensorflow(tmp_path):
  code = (
    'import sys, runpy; sys.argv = ["reference.py", "--check"]\n'
    'try:\n'
    f'  runpy.run_path({str(REPO / "tools" / "reference.py")!r}, '
    'run_name="__main__")\n'
    'finally:\n'
    '  print("tensorflow" in sys.modules)\n'
  )
  result = subprocess.run(
    [sys.executable, '-c', code],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == 'False'


_COMMAND = '.venv/bin/python tools/reference.py --write'
