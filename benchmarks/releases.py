"""What a run's rows cost to release to metrics.csv and TensorBoard.

  .venv/bin/python benchmarks/releases.py [--rounds=3,20,200] [--repeat=3] \
      [--checkout=DIR ...]

For each --checkout (default: this one; give two to compare versions), in
a process of its own, alternating: the CPU-seconds a run's release managers
(`RunDir.release_manager`: metrics.csv and TensorBoard) take to release
rounds 0..N of rows shaped like `make run`'s (16 numbers; round 0 lacks
one, as a run's round 0 lacks its training metrics), in a new run folder
each time. Prints each checkout's median per N, and the ratio to the first.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = 16

_MEASURE = r"""
import asyncio, collections, json, sys, tempfile, time
import tensorflow  # Imported before the clock starts.
from tff_algos.simulation import run_dir
rounds, columns = int(sys.argv[1]), int(sys.argv[2])
Row = collections.namedtuple('Row', [f'c{i}' for i in range(columns)])
manager = run_dir.RunDir(tempfile.mkdtemp()).release_manager()
start = time.process_time()
for key in range(rounds + 1):
  values = [float(key + i) for i in range(columns)]
  if key == 0:
    values[0] = None
  asyncio.run(manager.release(Row(*values), key))
print(json.dumps(time.process_time() - start))
"""


def measure(checkout, rounds):
  """CPU-seconds of one run's releases of rounds 0..`rounds`."""
  out = subprocess.run(
    [
      os.path.join(checkout, '.venv', 'bin', 'python'),
      '-c',
      _MEASURE,
      str(rounds),
      str(COLUMNS),
    ],
    cwd=tempfile.gettempdir(),
    env=dict(os.environ, PYTHONPATH=checkout, TF_CPP_MIN_LOG_LEVEL='3'),
    capture_output=True,
    text=True,
    check=True,
  )
  return json.loads(out.stdout.splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', default='3,20,200')
  parser.add_argument('--repeat', type=int, default=3)
  parser.add_argument('--checkout', action='append')
  args = parser.parse_args()
  checkouts = [
    os.path.abspath(c) for c in args.checkout or [os.path.dirname(HERE)]
  ]
  seconds = collections.defaultdict(list)
  for rounds in map(int, args.rounds.split(',')):
    for _ in range(args.repeat):
      for checkout in checkouts:
        seconds[checkout, rounds].append(measure(checkout, rounds))
    first = statistics.median(seconds[checkouts[0], rounds])
    for checkout in checkouts:
      median = statistics.median(seconds[checkout, rounds])
      runs = ', '.join(f'{s:.3f}' for s in seconds[checkout, rounds])
      print(
        f'{rounds} rounds, {checkout}: {median:.3f} CPU-s '
        f'({runs}); {first / median:.2f}x the first'
      )
      sys.stdout.flush()


if __name__ == '__main__':
  main()
