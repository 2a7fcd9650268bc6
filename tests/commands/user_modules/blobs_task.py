"""A task of a user's own, from this file alone (docs/TASKS.md, "Adding a
task"): each of 8 clients holds points of two Gaussian blobs, one per
class, at a client-specific offset; multinomial logistic regression.

  python -m tff_algos --import=tests/commands/user_modules/blobs_task.py \\
      --task=blobs ...
"""

import collections

import numpy as np

import tasks

NUM_CLIENTS, FEATURES = 8, 4


def _client(rng, n):
  y = rng.integers(0, 2, n).astype(np.int32)
  centre = rng.normal(0, 1, FEATURES)
  x = centre + 2.0 * (2 * y[:, None] - 1) + rng.normal(0, 1, (n, FEATURES))
  return collections.OrderedDict(x=x.astype(np.float32), y=y)


def load(data_dir, seed):
  """The task's data, a function of `seed` (no files: data_dir unused)."""
  del data_dir
  rng = np.random.default_rng(seed)
  train, test = collections.OrderedDict(), collections.OrderedDict()
  for k in range(NUM_CLIENTS):
    train[f'client_{k}'] = _client(rng, int(rng.integers(20, 60)))
    test[f'client_{k}'] = _client(rng, 10)
  from tasks import models

  return tasks.from_arrays(
    'blobs',
    train,
    test,
    models.multinomial_logistic_regression(FEATURES, 2),
    description=f'two Gaussian blobs on {NUM_CLIENTS} clients, MLR',
  )


tasks.register(
  'blobs',
  load,
  'two Gaussian blobs per client, 2 classes, MLR '
  "(a user's task, tests/commands/user_modules)",
)
