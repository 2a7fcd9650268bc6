"""Writes one of our generated Synthetic datasets as the .npz the numpy
reference reads (`numpy_fedavg.py synthetic --npz=PATH`): the same devices,
samples and train/test split as our runs of that task and data seed.

  .venv/bin/python docs/crosscheck/export_synthetic.py synthetic_1_1 PATH \
      [--data_seed=0]

Only the data comes from our code (tasks/synthetic.py, the FedProx
authors' generator); the training the reference does is its own.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..'))

from tasks import synthetic  # pylint: disable=g-import-not-at-top


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('task', help='e.g. synthetic_1_1')
  parser.add_argument('path')
  parser.add_argument('--data_seed', type=int, default=0)
  args = parser.parse_args(argv)
  alpha, beta, iid, classes = synthetic.parse_name(args.task)
  train, test = synthetic.split_devices(
      *synthetic.generate(alpha, beta, iid, args.data_seed,
                          classes_per_device=classes), args.data_seed)
  arrays = {}
  for k, (tr, te) in enumerate(zip(train.values(), test.values())):
    arrays.update({f'train_x_{k}': tr['x'], f'train_y_{k}': tr['y'],
                   f'test_x_{k}': te['x'], f'test_y_{k}': te['y']})
  np.savez_compressed(args.path, **arrays)
  sizes = [len(t['y']) for t in train.values()]
  print(f'{args.path}: {len(sizes)} devices, {sum(sizes)} training samples '
        f'(n_k {min(sizes)}..{max(sizes)})')


if __name__ == '__main__':
  main()
