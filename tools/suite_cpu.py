"""Where the test suite's CPU goes: each test's CPU-seconds with everything
it starts (commands, warm-python children, TFF workers), by file and by
test.

  .venv/bin/python tools/suite_cpu.py [--top=30] [--json=PATH] \
      [-- PYTEST_ARGS ...]

Runs pytest (by default `make test`'s `-q -n auto --dist loadfile tests`)
with this file as a plugin. Around each test, the plugin reads the CPU of
its test process's whole tree from /proc: each live descendant's own time
and the time of the children it has reaped (a process that ends moves its
time to its parent's reaped total, so nothing is lost or counted twice).
A test's figure is its tree's growth while it ran, its fixtures' set-up and
tear-down included. pytest's own `--durations` and `getrusage` see only
the test process and its reaped children: a warm command's child, reaped
by the zygote that lives until the end, and a TFF worker that outlives its
test go to whichever test ends them, or to none.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
_OUT = 'TFF_ALGOS_SUITE_CPU_DIR'  # Where each test process writes its own.
_TICKS = os.sysconf('SC_CLK_TCK')


def tree_cpu(root):
  """CPU-seconds of process `root` and its live descendants, each with the
  time of the children it reaped."""
  children, own = collections.defaultdict(list), {}
  for name in os.listdir('/proc'):
    if not name.isdigit():
      continue
    try:
      with open(f'/proc/{name}/stat') as f:
        stat = f.read()
    except OSError:  # Ended meanwhile: its time is in its parent's now.
      continue
    # Fields after the command's name, which may hold spaces and ')'.
    fields = stat[stat.rindex(')') + 2 :].split()
    pid = int(name)
    children[int(fields[1])].append(pid)
    own[pid] = sum(int(x) for x in fields[11:15])  # utime..cstime.
  total, stack = 0, [root]
  while stack:
    pid = stack.pop()
    total += own.get(pid, 0)
    stack.extend(children.get(pid, ()))
  return total / _TICKS


# ------------------------------------------------------------ the plugin
_TESTS = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del nextitem
  start_cpu, start = tree_cpu(os.getpid()), time.perf_counter()
  yield
  _TESTS[item.nodeid] = (
    tree_cpu(os.getpid()) - start_cpu,
    time.perf_counter() - start,
  )


def pytest_sessionfinish(session):
  del session
  directory = os.environ.get(_OUT)
  if directory:
    name = os.environ.get('PYTEST_XDIST_WORKER', 'main')
    with open(os.path.join(directory, f'{name}.json'), 'w') as f:
      json.dump(dict(tests=_TESTS, tree=tree_cpu(os.getpid())), f)


# ------------------------------------------------------------ the report
def run_suite(pytest_args, directory):
  """pytest's exit code; each test process's figures land in `directory`."""
  env = dict(
    os.environ,
    **{_OUT: directory},
    PYTHONPATH=os.pathsep.join(
      p for p in (HERE, os.environ.get('PYTHONPATH')) if p
    ),
  )
  python = os.path.join(ROOT, '.venv', 'bin', 'python')
  command = [python, '-m', 'pytest', '-p', 'suite_cpu', *pytest_args]
  return subprocess.run(command, cwd=ROOT, env=env).returncode


def collect(directory):
  """({test: (CPU-s, s)}, CPU-s of the whole pytest tree)."""
  tests, whole = {}, 0.0
  for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name)) as f:
      figures = json.load(f)
    tests.update({k: tuple(v) for k, v in figures['tests'].items()})
    if name == 'main.json':  # The tree with every worker in it.
      whole = figures['tree']
  return tests, whole


def report(tests, whole, top):
  by_file = collections.defaultdict(lambda: [0.0, 0.0, 0])
  for nodeid, (cpu, seconds) in tests.items():
    figures = by_file[nodeid.split('::')[0]]
    figures[0] += cpu
    figures[1] += seconds
    figures[2] += 1
  in_tests = sum(cpu for cpu, _ in tests.values())
  print(
    f'{len(tests)} tests: {in_tests:.1f} CPU-s in tests, {whole:.1f} CPU-s '
    'in the whole pytest tree (collection and start-up included)'
  )
  print(f'\nby file (top {top}): CPU-s, s, tests')
  ranked = sorted(by_file.items(), key=lambda kv: -kv[1][0])
  for path, (cpu, seconds, count) in ranked[:top]:
    print(f'{cpu:8.1f} {seconds:8.1f} {count:5d}  {path}')
  print(f'\nby test (top {top}): CPU-s, s')
  ranked = sorted(tests.items(), key=lambda kv: -kv[1][0])
  for nodeid, (cpu, seconds) in ranked[:top]:
    print(f'{cpu:8.1f} {seconds:8.1f}  {nodeid}')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--top', type=int, default=30)
  parser.add_argument('--json', help='also write every test figure here')
  parser.add_argument('pytest_args', nargs='*')
  args = parser.parse_args()
  if args.top < 1:
    parser.error('--top must be at least 1')
  pytest_args = args.pytest_args or [
    '-q',
    '-n',
    'auto',
    '--dist',
    'loadfile',
    'tests',
  ]
  with tempfile.TemporaryDirectory(prefix='suite_cpu_') as directory:
    code = run_suite(pytest_args, directory)
    tests, whole = collect(directory)
  report(tests, whole, args.top)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(dict(tests=tests, whole_tree_cpu_seconds=whole), f, indent=1)
  sys.exit(code)


if __name__ == '__main__':
  main()
