"""Writes one of our tasks' client data as the .npz the numpy reference
reads (`numpy_fedavg.py arrays --npz=PATH`): the same clients, samples and
train/test split as our runs of that task, data seed and train fraction.

  .venv/bin/python tools/crosscheck/export_task.py TASK PATH \
      [--data_seed=0] [--train_fraction=F] [--data_dir=../shared/data]

e.g. synthetic_1_1 (FedProx Figure 1) or mnist_powerlaw with
--train_fraction=0.8 (FedISGD Table 4). Only the data comes from our code
(tasks/); the training the reference does is its own.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..'))

import tasks


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('task', help='e.g. synthetic_1_1, mnist_powerlaw')
  parser.add_argument('path')
  parser.add_argument('--data_seed', type=int, default=0)
  parser.add_argument('--train_fraction', type=float, default=None)
  parser.add_argument('--data_dir', default=None)
  args = parser.parse_args(argv)
  options = (
    {}
    if args.train_fraction is None
    else dict(train_fraction=args.train_fraction)
  )
  task = tasks.load_task(
    args.task, seed=args.data_seed, data_dir=args.data_dir, **options
  )
  arrays = {}
  for k, (tr, te) in enumerate(
    zip(tasks.client_arrays(task.train), tasks.client_arrays(task.test))
  ):
    arrays.update(
      {
        f'train_x_{k}': tr['x'].reshape(len(tr['y']), -1),
        f'train_y_{k}': tr['y'],
        f'test_x_{k}': te['x'].reshape(len(te['y']), -1),
        f'test_y_{k}': te['y'],
      }
    )
  np.savez_compressed(args.path, **arrays)
  sizes = [len(arrays[f'train_y_{k}']) for k in range(len(arrays) // 4)]
  print(
    f'{args.path}: {task.name}, {len(sizes)} clients, {sum(sizes)} '
    f'training samples (n_k {min(sizes)}..{max(sizes)})'
  )


if __name__ == '__main__':
  main()
