"""tools/suite_cpu.py: a process tree's CPU counts the time of
children that have not ended yet and of grandchildren their parents
reaped, and each test of a small suite gets the CPU of what it started."""

import importlib.util
import json
import os
import resource
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

SCRIPT = REPO / 'tools' / 'suite_cpu.py'
# Burns about 0.5 CPU-seconds.
BURN = (
  'import time\n'
  'end = time.process_time() + 0.5\n'
  'while time.process_time() < end: pass'
)


def _module():
  spec = importlib.util.spec_from_file_location('suite_cpu', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _reaped_children_cpu():
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


@pytest.mark.fast
def test_a_live_childs_reaped_grandchild_counts_before_the_child_ends():
  """What getrusage misses: the child lives on after its grandchild's work."""
  tree_cpu = _module().tree_cpu
  parent = (
    'import subprocess, sys\n'
    f'subprocess.run([sys.executable, "-c", {BURN!r}])\n'
    'print("burnt", flush=True)\n'
    'sys.stdin.read()'
  )
  before, reaped_before = tree_cpu(os.getpid()), _reaped_children_cpu()
  child = subprocess.Popen(
    [sys.executable, '-c', parent],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    assert child.stdout.readline() == 'burnt\n'
    assert tree_cpu(os.getpid()) - before >= 0.45
    assert _reaped_children_cpu() - reaped_before < 0.05
  finally:
    child.stdin.close()
    child.wait()
  assert tree_cpu(os.getpid()) - before >= 0.45  # Moved to this one's reaped.


def test_each_test_gets_the_cpu_of_what_it_started(tmp_path):
  suite = tmp_path / 'suite'
  suite.mkdir()
  (suite / 'test_small.py').write_text(
    textwrap.dedent(
      f"""
      import subprocess, sys

      def test_starts_a_burning_process():
        subprocess.run([sys.executable, '-c', {BURN!r}], check=True)

      def test_does_nothing():
        pass

      def test_fails():
        assert False
      """
    )
  )
  out = tmp_path / 'figures.json'
  result = subprocess.run(
    [
      sys.executable,
      str(SCRIPT),
      '--top=3',
      f'--json={out}',
      '--',
      '-q',
      '-p',
      'no:xdist',
      '-p',
      'no:cacheprovider',
      str(suite),
    ],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 1, result.stderr[-2000:]  # pytest's: a failure.
  tests = json.loads(out.read_text())['tests']
  by_name = {nodeid.split('::')[1]: cpu for nodeid, (cpu, _) in tests.items()}
  assert set(by_name) == {
    'test_starts_a_burning_process',
    'test_does_nothing',
    'test_fails',
  }
  assert by_name['test_starts_a_burning_process'] >= 0.45
  assert by_name['test_does_nothing'] < 0.2
  assert 'by file' in result.stdout and 'test_small.py' in result.stdout
