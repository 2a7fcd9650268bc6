"""docs/guide/ runs as written: every code block of a guide is either run
here, in page order from the repository's root (shell blocks in bash, with
`.venv/bin/python` the tests' warm interpreter, tests/warm.py; Python
blocks in one), or marked, on the line before it, `<!-- not run here:
REASON -->`. docs/guide/porting.md is run whole by test_porting.py."""

import pathlib
import re
import shlex
import subprocess

import pytest

from conftest import REPO
from conftest import USER_ENV
import warm

GUIDES = REPO / 'docs' / 'guide'
RUN_ELSEWHERE = {'porting.md': 'tests/commands/test_porting.py'}
_BLOCK = re.compile(
  r'(?:<!-- not run here: (?P<why>[^\n]*?) -->\n)?```(?P<language>\w+)\n'
  r'(?P<code>.*?)```',
  re.S,
)


def _blocks(page: pathlib.Path):
  """(language, code, the reason it is not run or None) of each block."""
  return [
    (m['language'], m['code'], m['why'])
    for m in _BLOCK.finditer(page.read_text(encoding='utf-8'))
  ]


def _pages():
  return sorted(p for p in GUIDES.glob('*.md') if p.name not in RUN_ELSEWHERE)


@pytest.mark.fast
def test_every_block_is_run_or_says_why_not():
  runnable = 0
  for page in _pages():
    for language, code, why in _blocks(page):
      assert language in ('sh', 'python'), (page.name, language, code[:60])
      assert why is None or why.strip(), (page.name, code[:60])
      runnable += why is None
  assert runnable >= 5  # The cheap examples, at least.
  for name in RUN_ELSEWHERE:
    assert all(why is None for _, _, why in _blocks(GUIDES / name)), name


@pytest.mark.slow
@pytest.mark.parametrize(
  'page',
  [p.name for p in _pages() if any(w is None for *_, w in _blocks(p))],
)
def test_the_guide_runs_as_written(page, tmp_path):
  python = shlex.join(warm.command())
  ran = 0
  for i, (language, code, why) in enumerate(_blocks(GUIDES / page), 1):
    if why is not None:
      continue
    if language == 'python':
      command = [*warm.command(), '-c', code]
    else:
      command = ['bash', '-euo', 'pipefail', '-c']
      command.append(code.replace('.venv/bin/python', python))
    result = subprocess.run(
      command,
      cwd=REPO,
      env=dict(USER_ENV, TMPDIR=str(tmp_path)),
      capture_output=True,
      text=True,
      timeout=600,
    )
    assert result.returncode == 0, (
      f'{page} block {i}',
      result.stdout[-2000:],
      result.stderr[-3000:],
    )
    ran += 1
  assert ran
