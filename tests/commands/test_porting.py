"""docs/guide/porting.md runs as written: every code block in page
order, each Python block in a fresh namespace of one process (so each
imports what it uses), each shell block in a shell, from the repository's
root; and nothing is left running afterwards."""

import re
import sys

import pytest

from conftest import REPO
from conftest import USER_ENV
import helpers

PAGE = REPO / 'docs' / 'guide' / 'porting.md'
_RUN_PAGE = r"""
import re, subprocess, sys
page = open(sys.argv[1]).read()
for i, (language, code) in enumerate(
    re.findall(r'```(python|sh)\n(.*?)```', page, re.S), 1):
  print(f'--- block {i} ({language})', flush=True)
  if language == 'python':
    exec(compile(code, f'PORTING.md block {i}', 'exec'),
         {'__name__': '__main__'})
  else:
    subprocess.run(['bash', '-euc', code], check=True)
"""


@pytest.mark.fast
def test_the_page_has_the_worked_examples():
  blocks = re.findall(r'```(python|sh)\n(.*?)```', PAGE.read_text(), re.S)
  python = [code for language, code in blocks if language == 'python']
  assert len(python) == 4 and all('import ' in code for code in python)
  assert all('runtime.stop()' in code for code in python)
  for example in (
    'secure_sum_then_finalize',
    'train_model',
    'deserialize_computation',
  ):
    assert any(example in code for code in python), example
  assert any(
    'tff_algos.export' in code for language, code in blocks if language == 'sh'
  )


@pytest.mark.slow
def test_every_block_of_the_page_runs_and_leaves_nothing_running(tmp_path):
  result, left = helpers.run_and_reap(
    [sys.executable, '-c', _RUN_PAGE, str(PAGE)],
    tmp_path,
    cwd=REPO,
    env=dict(USER_ENV, TMPDIR=str(tmp_path)),
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
  assert not left, left  # No orphaned TFF worker, nothing else.
  out = result.stdout
  assert out.count('--- block') == 5
  assert "'mu': 1.0" in out and 'round 3: local training loss' in out
  assert 'in the clear: <>' in out  # Only secure sums leave a client.
  assert 'checkpoints: ' + str([f'program_state_{r}' for r in range(5)]) in out
  assert (
    'hyper-parameters:' in out and "'tensorflow_federated': '0.87.0'" in out
  )
