"""docs/PORTING.md's worked example runs, and the page quotes it (issue 12)."""

import re
import subprocess
import sys

import pytest

from conftest import REPO
from conftest import USER_ENV

EXAMPLE = REPO / 'docs' / 'porting_example.py'


def test_every_code_block_of_the_porting_guide_is_in_the_example():
  guide = (REPO / 'docs' / 'PORTING.md').read_text()
  blocks = re.findall(r'```python\n(.*?)```', guide, re.S)
  assert len(blocks) >= 5
  example = EXAMPLE.read_text()
  missing = [b for b in blocks if b not in example]
  assert not missing, missing


@pytest.mark.slow
def test_the_porting_example_runs():
  result = subprocess.run([sys.executable, str(EXAMPLE)], cwd=REPO,
                          env=USER_ENV, capture_output=True, text=True,
                          timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "'mu': 1.0" in result.stdout
  assert '17 computations' in result.stdout
