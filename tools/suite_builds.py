"""What the test suite spends building learning processes, and how much of
it a cache of built processes shared by every test and command could save
at most.

  python3 tools/suite_builds.py [VERSION] [--top=15] [--json=PATH]

Clones VERSION (default HEAD; its committed tree) beside this repository
(`suite_time.clone_beside`, so that its tests find ../shared); it uses
this repository's .venv. In the clone only, `learning.build_process` (the
core every algorithm's builder calls) is wrapped to append, for each
build, its CPU-seconds (`time.process_time`, which excludes the wrapper's
own fingerprinting) and the fingerprint of the process's `initialize` and
`next` (`runtime.fingerprint.sha256`: their content, independent of
TensorFlow's process-wide function names) to a file per process. Each
build is traced under `tracing.deterministic`, as a run's is, so that two
builds of the same code fingerprint alike also where a test calls a
builder itself (else the initializers' seeds differ); the clone's tests
then see the same initial weights from every such build. Then it
runs `make test`'s pytest command there and sums the records of every
process: the test processes, the commands and notebooks they start.

A build whose fingerprint an earlier build (in any process) already had
is what such a cache could have served; the sum of those builds' CPU is
the most it could save. Of those, the builds whose own process had built
the same before are what a cache within each process could serve. The
figures cover the tests that ran: the report's first line is pytest's.
"""

import argparse
import collections
import glob
import json
import os
import shutil
import subprocess
import tempfile

import suite_time  # This folder is on a script's path.

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Appended to the clone's tff_algos/learning/composition.py.
_RECORDER = """

def _recorded(build):
  import functools
  import json
  import os
  import time

  @functools.wraps(build)
  def recorded(*args, **kwargs):
    from tff_algos.runtime import fingerprint
    from tff_algos.runtime import tracing

    start = time.process_time()
    with tracing.deterministic():
      process = build(*args, **kwargs)
    cpu = time.process_time() - start
    try:
      content = fingerprint.sha256(process.initialize, process.next)
    except Exception as e:  # Counted as a process of its own.
      content = f'{type(e).__name__} at {time.time()}'
    record = dict(
      cpu=cpu,
      at=time.time(),
      pid=os.getpid(),
      fingerprint=content,
      test=os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0],
    )
    with open(os.path.join(RECORDS, f'{os.getpid()}.jsonl'), 'a') as f:
      f.write(json.dumps(record) + '\\n')
    return process

  return recorded


build_process = _recorded(build_process)
"""


def _run_in_clone(commit, records):
  """pytest's last line, after `make test`'s pytest command ran in a clone
  of `commit` whose builds append to `records`."""
  with suite_time.clone_beside(_ROOT, commit, 'suite_builds') as clone:
    os.symlink(os.path.join(_ROOT, '.venv'), os.path.join(clone, '.venv'))
    composition = os.path.join(clone, 'tff_algos', 'learning', 'composition.py')
    with open(composition, 'a') as f:
      f.write(f'\nRECORDS = {records!r}\n{_RECORDER}')
    result = subprocess.run(
      [os.path.join(clone, '.venv', 'bin', 'python'), '-m', 'pytest', '-q']
      + ['-n', 'auto', '--dist', 'loadfile', '-p', 'no:cacheprovider', 'tests'],
      cwd=clone,
      text=True,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
    )
  lines = result.stdout.strip().splitlines() or ['(no output)']
  return lines[-1]


def _read(records):
  builds = []
  for path in glob.glob(os.path.join(records, '*.jsonl')):
    with open(path) as f:
      builds.extend(json.loads(line) for line in f)
  return sorted(builds, key=lambda b: b['at'])


def summarize(builds):
  """Totals, and the builds a shared cache could have served: each one
  whose fingerprint an earlier build had, and of those, the ones whose
  process built it before (a cache in the process would do)."""
  first_in, by_file = {}, collections.defaultdict(lambda: [0, 0.0, 0.0])
  repeats, in_process = [], []
  for build in builds:
    where = build['test'].split('::')[0] or '(commands and notebooks)'
    by_file[where][0] += 1
    by_file[where][1] += build['cpu']
    pids = first_in.setdefault(build['fingerprint'], set())
    if pids:
      repeats.append(build)
      by_file[where][2] += build['cpu']
      if build['pid'] in pids:
        in_process.append(build)
    pids.add(build['pid'])
  return dict(
    builds=len(builds),
    distinct=len(first_in),
    cpu_seconds=sum(b['cpu'] for b in builds),
    repeated_builds=len(repeats),
    repeated_cpu_seconds=sum(b['cpu'] for b in repeats),
    repeated_in_process_cpu_seconds=sum(b['cpu'] for b in in_process),
    by_file={
      k: dict(builds=n, cpu_seconds=s, repeated_cpu_seconds=r)
      for k, (n, s, r) in by_file.items()
    },
  )


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('version', nargs='?', default='HEAD')
  parser.add_argument('--top', type=int, default=15)
  parser.add_argument('--json', help='also write the figures here')
  args = parser.parse_args()
  commit = suite_time.commit_of(_ROOT, args.version)
  records = tempfile.mkdtemp(prefix='suite_builds_records_')
  try:
    pytest_line = _run_in_clone(commit, records)
    figures = dict(
      commit=commit, pytest=pytest_line, **summarize(_read(records))
    )
  finally:
    shutil.rmtree(records, ignore_errors=True)
  print(f'{commit[:7]}: {pytest_line}')
  print(
    f'{figures["builds"]} builds of {figures["distinct"]} distinct processes: '
    f'{figures["cpu_seconds"]:.1f} CPU-s; {figures["repeated_builds"]} '
    'repeat a process built before, '
    f'{figures["repeated_cpu_seconds"]:.1f} CPU-s (the most a shared cache '
    f'could save; {figures["repeated_in_process_cpu_seconds"]:.1f} of them '
    'in the process that built it before)'
  )
  print('CPU-s of builds, of repeats, builds, where:')
  ranked = sorted(
    figures['by_file'].items(), key=lambda kv: -kv[1]['cpu_seconds']
  )
  for where, row in ranked[: args.top]:
    print(
      f'{row["cpu_seconds"]:8.1f} {row["repeated_cpu_seconds"]:8.1f} '
      f'{row["builds"]:5d}  {where}'
    )
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(figures, f, indent=2)


if __name__ == '__main__':
  main()
