"""Federated tasks: client data plus the papers' models. No algorithms here.

`CATALOG` names every built-in task with a one-line description and the
module that loads it (no TensorFlow: `--help` lists it). Each dataset
module (`tasks/<module>.py`) exposes `TASKS = {name: loader}` with
`loader(data_dir, seed, **options) -> FederatedTask`, loaded on first use;
the Synthetic family is generated and needs no files.

A task of your own (docs/TASKS.md, "Adding a task"): a module that calls
`tasks.register(name, loader, description)`, where `loader(data_dir, seed,
**options)` returns a `FederatedTask` (for example `tasks.from_arrays(...)`
over your clients' arrays, with a model_fn), made known to every command
with `--import=your.module` (or `--import=path/to/file.py`).
"""

import glob
import importlib
import inspect
import os
import re

# synthetic_A_B (FedProx's Synthetic(α, β)), synthetic_iid, and
# synthetic_A_B_Nclass: each device's labels restricted to N of the 10
# classes (FedISGD §3.4 runs Synthetic_1_1 with 5 classes per device).
SYNTHETIC_NAME = re.compile(
  r'^synthetic_(?:iid|(\d+(?:\.\d+)?)_(\d+(?:\.\d+)?)(?:_(\d+)class)?)$'
)
SYNTHETIC_TASKS = (
  'synthetic_0_0',
  'synthetic_0.5_0.5',
  'synthetic_1_1',
  'synthetic_1_1_5class',
  'synthetic_iid',
)

# name → (module, one line). synthetic_A_B stands for the whole family.
CATALOG = {
  'synthetic_A_B': (
    'synthetic',
    'FedProx Synthetic(α,β), any α, β: 30 '
    'devices, x in R^60, 10 classes, MLR (generated)',
  ),
  'synthetic_A_B_Nclass': (
    'synthetic',
    'the same with N of the 10 classes '
    'per device (FedISGD: synthetic_1_1_5class)',
  ),
  'synthetic_iid': (
    'synthetic',
    'FedProx Synthetic-IID: one W, b for all devices (generated)',
  ),
  'mnist_iid_2nn': ('mnist', 'FedAvg MNIST IID, 100 clients x 600, 2NN'),
  'mnist_iid_cnn': ('mnist', 'FedAvg MNIST IID, 100 clients x 600, CNN'),
  'mnist_iid': ('mnist', 'mnist_iid_cnn'),
  'mnist_pathological_2nn': (
    'mnist',
    'FedAvg MNIST pathological non-IID (2 label shards per client), 2NN',
  ),
  'mnist_pathological_cnn': ('mnist', 'the same with the CNN'),
  'mnist_pathological': ('mnist', 'mnist_pathological_cnn'),
  'mnist_powerlaw': (
    'mnist',
    'FedProx MNIST: 1,000 devices, 2 digits each, power-law sizes, MLR',
  ),
  'femnist': (
    'femnist',
    'FEMNIST by writer (the shared copy is a partial '
    'sample), CNN with 62 outputs',
  ),
  'femnist_fedprox': (
    'femnist',
    'FedProx FEMNIST: letters a-j, 200 devices, 5 classes each, MLR',
  ),
  'emnist': ('femnist', 'TFF federated EMNIST-62 (emnist_all.sqlite), CNN'),
  'cifar10': (
    'cifar10',
    'FedAvg CIFAR-10: 100 IID clients x 500, TF-tutorial CNN',
  ),
  'shakespeare': (
    'shakespeare',
    'TFF federated Shakespeare: 715 roles, char-LSTM',
  ),
  'shakespeare_roles': (
    'shakespeare',
    'LEAF-style per-role split of the '
    'complete works (FedAvg non-IID), char-LSTM',
  ),
  'shakespeare_roles_iid': (
    'shakespeare',
    'the same lines shuffled over as many clients (FedAvg IID)',
  ),
  'shakespeare_roles_lstm100': (
    'shakespeare',
    "the per-role split with FedProx's char-LSTM of 100 units (App. C.1)",
  ),
  'sent140': (
    'sent140',
    'Sent140 tweets by user (the shared copy is a '
    'partial sample), 2-layer LSTM',
  ),
}
DATASET_TASKS = tuple(
  name for name, (module, _) in CATALOG.items() if module != 'synthetic'
)
_REGISTERED = {}  # name → (loader, description): tasks of users' modules


class DataError(Exception):
  """A dataset is missing, malformed or truncated (message says which)."""


def register(name: str, loader, description: str = '') -> None:
  """Makes `name` a task: `loader(data_dir, seed, **options)` returns its
  `FederatedTask` (data_dir None unless --data_dir is given; `seed` is the
  data seed). A later registration of the same name replaces it; a
  built-in task's name is refused."""
  if SYNTHETIC_NAME.match(name) or name in DATASET_TASKS:
    raise ValueError(f'{name!r} is a built-in task; choose another name')
  _REGISTERED[name] = (loader, description)


def unregister(name: str) -> None:
  _REGISTERED.pop(name, None)


def registered() -> dict:
  """{name: description} of the tasks registered by users' modules."""
  return {name: text for name, (_, text) in _REGISTERED.items()}


def from_arrays(name, train, test, model_fn, description=''):
  """A `FederatedTask` from {client id: OrderedDict(x=..., y=...)} dicts of
  numpy arrays (train and test; test may hold other clients or the same)
  and a model_fn (a no-argument function returning a
  `tff.learning.models.VariableModel` whose input_spec matches the
  arrays)."""
  from tasks import base

  return base.FederatedTask(
    name=name,
    train=base.client_data_from_arrays(train),
    test=base.client_data_from_arrays(test),
    model_fn=model_fn,
    description=description,
  )


def task_names():
  return (
    SYNTHETIC_TASKS + tuple(sorted(DATASET_TASKS)) + tuple(sorted(_REGISTERED))
  )


def is_known(name: str) -> bool:
  """Any synthetic_A_B (FedProx's family), a dataset module's task or a
  registered one."""
  return (
    SYNTHETIC_NAME.match(name) is not None
    or name in DATASET_TASKS
    or name in _REGISTERED
  )


def _loader(name):
  if name in _REGISTERED:
    return _REGISTERED[name][0]
  module = importlib.import_module(f'tasks.{CATALOG[name][0]}')
  return module.TASKS[name]


def default_data_dir() -> str:
  """$TFF_DATA_DIR, else ~/.tff: where dataset tasks look for their files."""
  return os.environ.get('TFF_DATA_DIR') or os.path.expanduser('~/.tff')


def load_task(
  name: str,
  seed: int = 0,
  data_dir: str | None = None,
  train_fraction: float | None = None,
  partition: str | None = None,
  **options,
):
  """The task `name` as a `tasks.base.FederatedTask`.

  `seed` seeds generated data and random partitions. Synthetic tasks read
  LEAF JSON from `data_dir` only when it is given (else they generate);
  dataset tasks read their files under `data_dir` (default
  `default_data_dir()`). `train_fraction` sets the per-device train share
  of the tasks that split each device's data themselves (synthetic,
  mnist_powerlaw, femnist_fedprox, sent140 from a CSV or sample);
  `partition` (e.g. 'dirichlet:0.5', `tasks.partitions`) repartitions the
  training data; `options` go to the dataset's loader (e.g.
  `embeddings=PATH`).
  """
  task = _load(name, seed, data_dir, train_fraction, options)
  if partition is not None:
    from tasks import partitions

    task = partitions.apply(task, partition, seed)
  return task


def _load(name, seed, data_dir, train_fraction, options):
  if SYNTHETIC_NAME.match(name):
    from tasks import synthetic

    if options:
      raise DataError(f'{name} takes no options {sorted(options)}')
    if data_dir and not glob.glob(os.path.join(data_dir, 'train', '*.json')):
      raise DataError(
        f'--data_dir={data_dir}: {name} is generated, so leave --data_dir '
        'out (it reads a --data_dir only for the same task as LEAF JSON '
        f'files in train/ and test/, and {os.path.join(data_dir, "train")}'
        ' has none)'
      )
    return synthetic.load(
      name, seed=seed, data_dir=data_dir, train_fraction=train_fraction
    )
  if not is_known(name):
    raise ValueError(f'unknown task {name!r}; known: {", ".join(task_names())}')
  loader = _loader(name)
  accepted = inspect.signature(loader).parameters
  if train_fraction is not None:
    if 'train_fraction' not in accepted:
      raise DataError(f'--train_fraction: {name} has a fixed train/test split')
    options['train_fraction'] = train_fraction
  for option in options:
    if option not in accepted and not any(
      p.kind == p.VAR_KEYWORD for p in accepted.values()
    ):
      raise DataError(f'{name} takes no option {option!r}')
  if name in _REGISTERED:
    return loader(data_dir, seed, **options)
  return loader(data_dir or default_data_dir(), seed, **options)


def __getattr__(name):
  if name in ('FederatedTask', 'client_arrays', 'client_data_from_arrays'):
    from tasks import base

    return getattr(base, name)
  raise AttributeError(f'module tasks has no attribute {name!r}')
