"""The package's layers: who may import what (issue 12)."""

import ast
import subprocess
import sys

import pytest

from conftest import REPO

RUNTIME = REPO / 'tff_algos' / 'runtime'
# Every Python file of the project: the package, tasks, the command line,
# the benchmarks and the tests.
SOURCES = sorted(p for p in REPO.rglob('*.py')
                 if '.venv' not in p.parts and 'build' not in p.parts)


def _imported_modules(path):
  tree = ast.parse(path.read_text(), str(path))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module


def test_only_the_runtime_layer_imports_tff_internals():
  assert len(SOURCES) > 40
  offenders = [
      f'{path.relative_to(REPO)}: {module}' for path in SOURCES
      if RUNTIME not in path.parents
      for module in _imported_modules(path)
      if module.startswith('tensorflow_federated.python')]
  assert not offenders, offenders


def test_the_check_above_sees_an_internal_import(tmp_path):
  bad = tmp_path / 'bad.py'
  bad.write_text('if True:\n  from tensorflow_federated.python.core '
                 'import framework\n')
  assert 'tensorflow_federated.python.core' in list(_imported_modules(bad))


@pytest.mark.parametrize('modules', [
    # The registry, settings, command-line flags and everything the help
    # and validation of run_experiment.py need.
    'tff_algos, tff_algos.algorithms, tff_algos.cli, '
    'tff_algos.simulation.config, tff_algos.runtime, run_experiment',
    # Analysis: results, sweeps, plots.
    'tff_algos.analysis.results, tff_algos.analysis.sweep, '
    'tff_algos.analysis.plot, tff_algos.plot',
])
def test_modules_that_promise_no_tensorflow_import_none(modules):
  _python(f'import sys; import {modules}; '
          'loaded = [m for m in sys.modules if m.split(".")[0] in '
          '("tensorflow", "tensorflow_federated", "keras")]; '
          'assert not loaded, loaded')


def test_remote_workers_code_loads_only_when_workers_are_used():
  _python('import sys; import run_experiment; '
          'from tff_algos import runtime; runtime.start(); '
          'assert "tff_algos.runtime.remote" not in sys.modules; '
          'runtime.stop()')


def _python(code):
  """Runs `code` in a fresh interpreter at the repository's root."""
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
