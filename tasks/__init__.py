"""Federated tasks: client data plus the papers' models. No algorithms here.

Task names are checked without importing TensorFlow; data and models load on
first use.
"""

import importlib
import re

TASK_NAMES = ('synthetic_0_0', 'synthetic_0.5_0.5', 'synthetic_1_1',
              'synthetic_iid')
SYNTHETIC_NAME = re.compile(
    r'^synthetic_(?:iid|(\d+(?:\.\d+)?)_(\d+(?:\.\d+)?))$')


class DataError(Exception):
  """A dataset is missing, malformed or truncated (message says which)."""


def is_known(name: str) -> bool:
  """Any synthetic_A_B (FedProx's family) or a name in TASK_NAMES."""
  return name in TASK_NAMES or SYNTHETIC_NAME.match(name) is not None


def load_task(name: str, seed: int = 0, data_dir: str | None = None,
              train_fraction: float | None = None):
  """The task `name` as a `tasks.base.FederatedTask`.

  `seed` seeds generated data; `train_fraction` sets the per-client
  train/test split where the task generates one.
  """
  if SYNTHETIC_NAME.match(name):
    from tasks import synthetic  # pylint: disable=g-import-not-at-top
    return synthetic.load(name, seed=seed, data_dir=data_dir,
                          train_fraction=train_fraction)
  raise ValueError(f'unknown task {name!r}; known: {", ".join(TASK_NAMES)}')


def __getattr__(name):
  if name in ('FederatedTask', 'client_arrays', 'client_data_from_arrays'):
    return getattr(importlib.import_module('tasks.base'), name)
  raise AttributeError(f'module tasks has no attribute {name!r}')
