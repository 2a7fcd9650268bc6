"""Federated tasks: client data plus the papers' models. No algorithms here.

Each dataset module (`tasks/<module>.py`) exposes `TASKS = {name: loader}`
with `loader(data_dir, seed, **options) -> FederatedTask`; the Synthetic
family is generated and needs no files. Modules load on first use.
"""

import importlib
import inspect
import os
import re

# synthetic_A_B (FedProx's Synthetic(α, β)), synthetic_iid, and
# synthetic_A_B_Nclass: each device's labels restricted to N of the 10
# classes (FedISGD §3.4 runs Synthetic_1_1 with 5 classes per device).
SYNTHETIC_NAME = re.compile(
    r'^synthetic_(?:iid|(\d+(?:\.\d+)?)_(\d+(?:\.\d+)?)(?:_(\d+)class)?)$')
SYNTHETIC_TASKS = ('synthetic_0_0', 'synthetic_0.5_0.5', 'synthetic_1_1',
                   'synthetic_1_1_5class', 'synthetic_iid')
DATASET_MODULES = ('mnist', 'femnist', 'cifar10', 'shakespeare', 'sent140')


class DataError(Exception):
  """A dataset is missing, malformed or truncated (message says which)."""


def _dataset_tasks():
  """{task name: loader} over the dataset modules present."""
  loaders = {}
  for module in DATASET_MODULES:
    try:
      loaders.update(importlib.import_module(f'tasks.{module}').TASKS)
    except ModuleNotFoundError as e:
      if e.name != f'tasks.{module}':
        raise
  return loaders


def task_names():
  return SYNTHETIC_TASKS + tuple(sorted(_dataset_tasks()))


def is_known(name: str) -> bool:
  """Any synthetic_A_B (FedProx's family) or a dataset module's task."""
  return SYNTHETIC_NAME.match(name) is not None or name in _dataset_tasks()


def default_data_dir() -> str:
  """$TFF_DATA_DIR, else ~/.tff: where dataset tasks look for their files."""
  return os.environ.get('TFF_DATA_DIR') or os.path.expanduser('~/.tff')


def load_task(name: str, seed: int = 0, data_dir: str | None = None,
              train_fraction: float | None = None, **options):
  """The task `name` as a `tasks.base.FederatedTask`.

  `seed` seeds generated data and random partitions. Synthetic tasks read
  LEAF JSON from `data_dir` only when it is given (else they generate);
  dataset tasks read their files under `data_dir` (default
  `default_data_dir()`). `train_fraction` sets the per-device train share
  of the tasks that split each device's data themselves (synthetic,
  mnist_powerlaw, femnist_fedprox, sent140 from a CSV or sample);
  `options` go to the dataset's loader (e.g. `embeddings=PATH`).
  """
  if SYNTHETIC_NAME.match(name):
    from tasks import synthetic  # pylint: disable=g-import-not-at-top
    if options:
      raise DataError(f'{name} takes no options {sorted(options)}')
    return synthetic.load(name, seed=seed, data_dir=data_dir,
                          train_fraction=train_fraction)
  loaders = _dataset_tasks()
  if name not in loaders:
    raise ValueError(f'unknown task {name!r}; known: '
                     f'{", ".join(task_names())}')
  accepted = inspect.signature(loaders[name]).parameters
  if train_fraction is not None:
    if 'train_fraction' not in accepted:
      raise DataError(f'--train_fraction: {name} has a fixed train/test '
                      'split')
    options['train_fraction'] = train_fraction
  for option in options:
    if option not in accepted and not any(
        p.kind == p.VAR_KEYWORD for p in accepted.values()):
      raise DataError(f'{name} takes no option {option!r}')
  return loaders[name](data_dir or default_data_dir(), seed, **options)


def __getattr__(name):
  if name in ('FederatedTask', 'client_arrays', 'client_data_from_arrays'):
    return getattr(importlib.import_module('tasks.base'), name)
  raise AttributeError(f'module tasks has no attribute {name!r}')
