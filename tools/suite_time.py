"""The test suite's time: `make test` on a fresh clone of each version, one
after the other, and each one's time as a multiple of the first's, taken
in one run on one machine.

  python3 tools/suite_time.py 0feded5 HEAD [--cold] [--repeat=N]
                                   [--json=PATH]

A version is anything `git rev-parse` takes; its committed tree is what
runs (uncommitted changes are not). Each clone goes beside this repository,
so its tests find ../shared as CI's do, and is removed afterwards. --cold
gives each `make test` empty pip and uv caches of its own (new temporary
folders; yours are left alone): everything is downloaded, as on a new
machine. Set-up is the whole time minus the time pytest reports.

--repeat=N runs the versions in turn N times (A B A B ...), so that what
else the machine does over an hour weighs on each alike: each run is a
multiple of the first version's run of the same turn, and a last table
gives each version's median over the turns and its multiple of the first's.
"""

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# pytest's last line: "2597 passed, 14 skipped in 1449.62s (0:24:09)".
_SUMMARY = re.compile(r'(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s')


def fail(message, code):
  """One line on stderr, named by the script that runs, and exit `code`."""
  print(f'{os.path.basename(sys.argv[0])}: error: {message}', file=sys.stderr)
  sys.exit(code)


def commit_of(repo, version):
  """The full commit id of `version` in `repo`; exit 2 if none."""
  result = subprocess.run(
    [
      'git',
      '-C',
      repo,
      'rev-parse',
      '--verify',
      '--quiet',
      f'{version}^{{commit}}',
    ],
    capture_output=True,
    text=True,
  )
  if result.returncode:
    fail(f'{version!r} is not a commit of {repo}', 2)
  return result.stdout.strip()


def _children_cpu_seconds():
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def clone_beside(repo, commit, prefix):
  """A clone of `repo` at `commit` in a new folder beside it (so that its
  tests find ../shared), removed afterwards."""
  clone = tempfile.mkdtemp(
    prefix=f'{prefix}_{commit[:7]}_', dir=os.path.dirname(repo)
  )
  try:
    for step in (['clone', '-q', repo, clone], ['checkout', '-q', commit]):
      done = subprocess.run(
        ['git', '-C', clone, *step], capture_output=True, text=True
      )
      if done.returncode:
        fail(f'git {step[0]}: {done.stderr.strip()}', 1)
    yield clone
  finally:
    shutil.rmtree(clone, ignore_errors=True)


def _make_test(repo, commit, cold):
  """Clones `commit` beside `repo`, runs `make test` there; its figures."""
  caches = tempfile.mkdtemp(prefix='suite_time_caches_') if cold else None
  # A top-level make, as a user's: nothing of a make this runs under
  # (its -j, -n or level) reaches the one measured.
  env = {
    k: v
    for k, v in os.environ.items()
    if k not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')
  }
  if cold:
    env.update(
      PIP_CACHE_DIR=os.path.join(caches, 'pip'),
      UV_CACHE_DIR=os.path.join(caches, 'uv'),
    )
  try:
    with clone_beside(repo, commit, 'suite_time') as clone:
      cpu, start = _children_cpu_seconds(), time.monotonic()
      result = subprocess.run(
        ['make', 'test'],
        cwd=clone,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
      )
      whole = time.monotonic() - start
      cpu = _children_cpu_seconds() - cpu
  finally:
    if caches:
      shutil.rmtree(caches, ignore_errors=True)
  lines = result.stdout.strip().splitlines() or ['(no output)']
  summary = next((m for m in map(_SUMMARY.search, reversed(lines)) if m), None)
  if result.returncode or not summary:
    fd, log = tempfile.mkstemp(
      prefix=f'suite_time_{commit[:7]}_', suffix='.log'
    )
    with os.fdopen(fd, 'w') as f:
      f.write(result.stdout)
    fail(
      f'make test of {commit[:7]} exited {result.returncode} (its '
      f'output: {log}): {lines[-1]}',
      1,
    )
  passed, skipped, pytest_seconds = summary.groups()
  return dict(
    commit=commit,
    passed=int(passed),
    skipped=int(skipped or 0),
    pytest_seconds=float(pytest_seconds),
    whole_seconds=whole,
    setup_seconds=whole - float(pytest_seconds),
    cpu_seconds=cpu,
  )


def _turn(repo, commits, cold):
  """`make test` of each commit, one after the other, with progress."""
  runs = []
  for commit in commits:
    print(
      f'make test of {commit[:7]} on a fresh clone ...',
      file=sys.stderr,
      flush=True,
    )
    run = _make_test(repo, commit, cold)
    runs.append(run)
    print(
      f'{commit[:7]}: {run["passed"]:,} passed, {run["skipped"]:,} '
      f'skipped; pytest {run["pytest_seconds"]:,.1f} s, in all '
      f'{_minutes(run["whole_seconds"])}',
      file=sys.stderr,
      flush=True,
    )
  return runs


def _times(value, reference):
  return f'{value / reference:.2f}×' if reference else '—'


def _minutes(seconds):
  return f'{int(seconds // 60)} min {seconds % 60:.0f} s'


_MEASURES = ('whole_seconds', 'pytest_seconds', 'cpu_seconds')


def _row(label, run, reference):
  multiples = ', '.join(_times(run[k], reference[k]) for k in _MEASURES)
  return (
    f'| {label} | {run["passed"]:,} | {run["skipped"]:,} '
    f'| {run["setup_seconds"]:,.1f} s | {run["pytest_seconds"]:,.1f} s '
    f'| {_minutes(run["whole_seconds"])} | {run["cpu_seconds"]:,.0f} '
    f'| {multiples} |'
  )


def _header(first):
  return [
    f'| {first} | passed | skipped | set-up | pytest | whole `make test` '
    '| CPU-s | × first (whole, pytest, CPU-s) |',
    '|---|' + '---:|' * 7,
  ]


def _table(turns):
  """One row per run; each a multiple of the first run of its turn."""
  rows = _header('version' if len(turns) == 1 else 'turn: version')
  for number, turn in enumerate(turns, 1):
    for run in turn:
      label = run['commit'][:7]
      rows.append(
        _row(label if len(turns) == 1 else f'{number}: {label}', run, turn[0])
      )
  return '\n'.join(rows)


def _medians(turns):
  """Each version's median over the turns, a multiple of the first's."""
  medians = [
    dict(
      commit=runs[0]['commit'],
      passed=runs[0]['passed'],
      skipped=runs[0]['skipped'],
      **{
        k: statistics.median(r[k] for r in runs)
        for k in (*_MEASURES, 'setup_seconds')
      },
    )
    for runs in zip(*turns)
  ]
  rows = _header(f'median of {len(turns)}')
  rows += [_row(m['commit'][:7], m, medians[0]) for m in medians]
  return '\n'.join(rows)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    'versions', nargs='+', help='the first is the reference of the multiples'
  )
  parser.add_argument(
    '--cold',
    action='store_true',
    help='empty pip and uv caches for each make test',
  )
  parser.add_argument(
    '--repeat',
    type=int,
    default=1,
    help='run the versions in turn this many times',
  )
  parser.add_argument('--repo', default=_ROOT)
  parser.add_argument('--json', help='also write the figures here')
  args = parser.parse_args()
  if args.json and not os.path.isdir(os.path.dirname(args.json) or '.'):
    fail(f'--json: no folder {os.path.dirname(args.json)}', 2)
  if args.repeat < 1:
    fail(f'--repeat must be at least 1, not {args.repeat}', 2)
  args.repo = os.path.abspath(args.repo)  # git clone runs in the clone.
  commits = [commit_of(args.repo, v) for v in args.versions]
  turns = [_turn(args.repo, commits, args.cold) for _ in range(args.repeat)]
  load = os.getloadavg()[0]
  print(_table(turns))
  if args.repeat > 1:
    print()
    print(_medians(turns))
  print(
    f'(nproc {os.cpu_count()}, 1-minute load at the end {load:.2f}, '
    f'caches {"empty" if args.cold else "as they were"})'
  )
  if args.json:
    runs = [run for turn in turns for run in turn]
    with open(args.json, 'w') as f:
      json.dump(
        dict(runs=runs, repeat=args.repeat, cold=args.cold), f, indent=1
      )


if __name__ == '__main__':
  main()
