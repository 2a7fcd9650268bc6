"""What checking a client data store costs when a run opens it.

  .venv/bin/python benchmarks/client_store.py [--tasks=mnist_iid_cnn,shakespeare]
      [--data_dir=../shared/data] [--repeat=5]

For each task, writes its store into a new folder, then opens it
`--repeat` times as a run does (`ClientStore.of`: serialize every client's
arrays, hash them for the folder's name, read the folder back and hash
it), and times, in the same process and the same turns, the part that
only the check does (`client_store._digest_of`: reading and hashing the
stored files). Prints the medians, in seconds, and the check's share of
opening the store.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tasks  # noqa: E402
from tff_algos.simulation import client_store  # noqa: E402


def _seconds(fn, *args, **kwargs):
  start = time.perf_counter()
  fn(*args, **kwargs)
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--tasks', default='mnist_iid_cnn,shakespeare')
  parser.add_argument('--data_dir', default='../shared/data')
  parser.add_argument('--repeat', type=int, default=5)
  args = parser.parse_args()
  print('task | store MB | files | open (s) | of which the check (s) | share')
  for name in args.tasks.split(','):
    task = tasks.load_task(name, data_dir=args.data_dir)
    arrays = tasks.client_arrays(task.train)
    root = tempfile.mkdtemp()
    store = client_store.ClientStore.of(arrays, root=root)
    names = sorted(store.files, key=lambda n: tuple(map(int, n.split('.'))))
    size = sum(os.path.getsize(os.path.join(store.folder, n)) for n in names)
    opened, checked = [], []
    for _ in range(args.repeat):
      opened.append(_seconds(client_store.ClientStore.of, arrays, root=root))
      checked.append(_seconds(client_store._digest_of, store.folder, names))
    o, c = statistics.median(opened), statistics.median(checked)
    print(
      f'{name} | {size / 1e6:.1f} | {len(names)} | {o:.3f} | {c:.3f} | '
      f'{c / o:.0%}'
    )


if __name__ == '__main__':
  main()
