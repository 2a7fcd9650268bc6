"""The fast set of `make check` (the `fast` marker, pytest.ini): every test
file has tests in it or says why not, and --reach-every-module
(tests/conftest.py) fails a set of tests that leaves a module unrun."""

import ast
import subprocess

import pytest

from conftest import NOT_RUN_BY_THE_FAST_SET
from conftest import REPO
import warm


def _marks_fast(tree):
  """Whether the module's code names pytest.mark.fast (a decorator, a
  pytest.param's marks or a module-level pytestmark)."""
  return any(
    isinstance(node, ast.Attribute)
    and node.attr == 'fast'
    and ast.unparse(node.value) == 'pytest.mark'
    for node in ast.walk(tree)
  )


def _reason_not_in_fast_set(tree):
  """The module's NOT_IN_FAST_SET string, or None."""
  for node in tree.body:
    if (
      isinstance(node, ast.Assign)
      and [ast.unparse(t) for t in node.targets] == ['NOT_IN_FAST_SET']
      and isinstance(node.value, ast.Constant)
      and isinstance(node.value.value, str)
      and node.value.value.strip()
    ):
      return node.value.value
  return None


def _without_fast_tests(folder):
  """The test files under `folder` with no fast test and no reason."""
  return [
    str(path.relative_to(folder))
    for path in sorted(folder.rglob('test_*.py'))
    for tree in [ast.parse(path.read_text(), str(path))]
    if not _marks_fast(tree) and _reason_not_in_fast_set(tree) is None
  ]


@pytest.mark.fast
def test_every_test_file_has_fast_tests_or_says_why_not():
  assert _without_fast_tests(REPO / 'tests') == []


@pytest.mark.fast
def test_the_check_sees_a_file_without_fast_tests(tmp_path):
  files = {
    'test_marked.py': '@pytest.mark.fast\ndef test_a(): pass\n',
    'test_param.py': (
      "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.fast)"
      '])\ndef test_a(x): pass\n'
    ),
    'test_module.py': 'pytestmark = pytest.mark.fast\n',
    'test_reason.py': "NOT_IN_FAST_SET = 'subprocesses only'\n",
    'test_slow.py': '@pytest.mark.slow\ndef test_a(): pass\n',
    'test_empty_reason.py': "NOT_IN_FAST_SET = ''\n",
    'test_comment.py': '# pytest.mark.fast\ndef test_a(): pass\n',
  }
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  assert _without_fast_tests(tmp_path) == [
    'test_comment.py',
    'test_empty_reason.py',
    'test_slow.py',
  ]


@pytest.mark.fast
def test_the_modules_the_fast_set_leaves_out_exist_and_say_why():
  for module, reason in NOT_RUN_BY_THE_FAST_SET.items():
    assert (REPO / module).is_file() and reason.strip(), module


@pytest.mark.slow
@pytest.mark.parametrize('jobs', ['0', '1'])  # In process; one xdist worker.
def test_reach_every_module_fails_naming_the_modules_no_test_ran(jobs):
  """One test of the DP settings, which calls no algorithm and reads no
  data: the modules it leaves unrun are named, the one it ran is not."""
  result = subprocess.run(
    warm.command(
      '-m',
      'pytest',
      '-q',
      '-p',
      'no:cacheprovider',
      f'-n{jobs}',
      '--reach-every-module',
      'tests/privacy/test_flags.py',
      '-k',
      'test_the_defaults',
    ),
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  out = result.stdout
  assert result.returncode == 1, (out[-3000:], result.stderr[-3000:])
  assert '1 passed' in out
  missed = out.split('of the modules never ran')[1].splitlines()
  missed = {line.strip() for line in missed if line.startswith('  ')}
  assert {'tasks/mnist.py', 'tff_algos/algorithms/fedprox.py'} <= missed
  assert 'tff_algos/simulation/config.py' not in missed  # It ran.
  assert 'tff_algos/__main__.py' not in missed  # Exempt.
