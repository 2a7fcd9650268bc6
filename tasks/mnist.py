"""MNIST tasks: FedAvg's IID and pathological non-IID splits, FedProx's MNIST.

Data: the four IDX files under `<data_dir>/mnist/` (gzip-compressed, official
names). Images stay uint8 pixels (0-255), which the models scale to [0, 1]
(`image_models.scale_pixels`): flattened [784] for the MLR and 2NN models,
[28, 28, 1] for the CNN. Labels are int32.

FedAvg (McMahan et al. 2017, §3):
- `mnist_iid*`: the 60,000 training images shuffled and split into 100
  clients × 600.
- `mnist_pathological*`: the training images sorted by label, cut into 200
  shards of 300, 2 random shards per client (100 clients, ≤ 2 labels each).
  FedAvg evaluates on the whole 10,000-image test set; here the test set is
  shuffled and split IID into 100 × 100 under the same client ids, so the
  pooled test accuracy equals FedAvg's (per-client test accuracy means
  nothing here).
The suffix picks the model (`_2nn`, `_cnn`); the bare names use the CNN.

FedProx (Li et al. 2020, Table 1; authors' `data/mnist/generate_niid.py`):
- `mnist_powerlaw`: all 70,000 images (train then test, grouped by label in
  file order, as their 'MNIST original' input), 1,000 devices, device u holds
  digits u mod 10 and (u+1) mod 10: first 5 images of each, then for each
  digit the remaining images are shared among its 200 (device, slot) pairs in
  proportion to lognormal(0, 2) draws (floored, so a few hundred images are
  left unused, as in their script). Each device's samples are shuffled and
  split 90% train / 10% test (int(0.9 n) train; `train_fraction` changes
  it: FedISGD §3.2 uses 80/20). Model: MLR.
  Differences from their script: inputs are pixels scaled to [0, 1], not
  per-pixel standardized; randomness comes from `seed` (their script set none).
"""

import collections
import functools
import gzip
import os
import zlib

import numpy as np

import tasks
from tasks import base
from tasks import image_models
from tasks import validate

FILES = collections.OrderedDict(
  train_x='train-images-idx3-ubyte.gz',
  train_y='train-labels-idx1-ubyte.gz',
  test_x='t10k-images-idx3-ubyte.gz',
  test_y='t10k-labels-idx1-ubyte.gz',
)
SOURCE = (
  'the official MNIST files (http://yann.lecun.com/exdb/mnist/, or a '
  'mirror such as https://ossci-datasets.s3.amazonaws.com/mnist/)'
)
IMAGE_MAGIC, LABEL_MAGIC = 0x00000803, 0x00000801

FEDAVG_CLIENTS = 100
SHARDS_PER_CLIENT = 2
FEDPROX_DEVICES = 1000
FEDPROX_TRAIN_FRACTION = 0.9


LABELS = validate.Array('u', (None,), lo=0, hi=9, what='labels 0..9')


def read_idx(path, magic):
  """uint8 array from a gzip IDX file, checked: the magic number (data
  type uint8 and rank: 3 for images, 1 for labels), 28×28 images, at least
  one item, and exactly the bytes the header announces; DataError naming
  the file otherwise."""
  try:
    with gzip.open(path, 'rb') as f:
      raw = f.read()
  except (OSError, EOFError, zlib.error) as e:
    raise validate.fail(
      path, f'not a readable gzip file ({e}); truncated or corrupt?'
    ) from None
  ndim = 3 if magic == IMAGE_MAGIC else 1
  header = 4 * (1 + ndim)
  if len(raw) < header:
    raise validate.fail(
      path,
      f'{len(raw)} bytes, shorter than the '
      f'{header}-byte IDX header (truncated?)',
    )
  fields = np.frombuffer(raw, '>u4', count=1 + ndim)
  if int(fields[0]) != magic:
    what = 'images' if ndim == 3 else 'labels'
    raise validate.fail(
      path,
      f'IDX magic {int(fields[0]):#010x}, expected '
      f'{magic:#010x} (uint8 {what})',
    )
  dims = [int(d) for d in fields[1:]]
  if ndim == 3 and dims[1:] != [28, 28]:
    raise validate.fail(path, f'images are {dims[1]}×{dims[2]}, expected 28×28')
  if not dims[0]:
    raise validate.fail(path, 'the header announces no items')
  expected = int(np.prod(dims))
  if len(raw) - header != expected:
    raise validate.fail(
      path,
      f'{len(raw) - header} data bytes, the header '
      f'announces {expected} (truncated or corrupt file)',
    )
  return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def load_arrays(data_dir):
  """(train_x, train_y, test_x, test_y): uint8 images N×28×28, labels."""
  folder = os.path.join(data_dir, 'mnist')
  paths = {k: os.path.join(folder, name) for k, name in FILES.items()}
  missing = [p for p in paths.values() if not os.path.isfile(p)]
  if missing:
    raise tasks.DataError(
      f'MNIST needs the four files {", ".join(FILES.values())} in '
      f'{folder} (missing: {", ".join(os.path.basename(p) for p in missing)}'
      f'); get them from {SOURCE}'
    )
  arrays = {
    k: read_idx(paths[k], IMAGE_MAGIC if k.endswith('x') else LABEL_MAGIC)
    for k in FILES
  }
  for split in ('train', 'test'):
    x, y = arrays[f'{split}_x'], arrays[f'{split}_y']
    validate.check(y, LABELS, paths[f'{split}_y'])
    if len(x) != len(y):
      raise validate.fail(
        paths[f'{split}_y'],
        f'{len(y)} labels, but {paths[f"{split}_x"]} has {len(x)} images',
      )
  return tuple(arrays[k] for k in FILES)


def _client_id(i):
  return f'c_{i:04d}'


def _pack(x, y, indices_by_client, model):
  """{client: OrderedDict(x, y)}: the images as `_shape` makes them; every
  client's arrays are views of one array in client order
  (`base.packed_clients`)."""
  return base.packed_clients(
    collections.OrderedDict(
      x=(x, lambda rows: _shape(rows, model)),
      y=(y, lambda rows: rows.astype(np.int32)),
    ),
    indices_by_client,
    _client_id,
  )


def iid_split(n, num_clients, rng):
  """Random equal split of range(n) (n divisible by num_clients)."""
  return np.split(rng.permutation(n), num_clients)


def pathological_split(labels, num_clients, shards_per_client, rng):
  """FedAvg: sort by label, equal shards, `shards_per_client` random each."""
  order = np.argsort(labels, kind='stable')
  shards = np.split(order, num_clients * shards_per_client)
  shard_ids = rng.permutation(len(shards)).reshape(num_clients, -1)
  return [np.concatenate([shards[s] for s in ids]) for ids in shard_ids]


def powerlaw_split(labels, num_devices, rng, first=5):
  """FedProx's generate_niid.py: indices for each device (see module doc)."""
  num_classes = 10
  by_label = [np.flatnonzero(labels == c) for c in range(num_classes)]
  groups = num_devices // num_classes
  taken = np.zeros(num_classes, np.int64)
  devices = [[] for _ in range(num_devices)]
  for u in range(num_devices):
    for j in range(2):
      c = (u + j) % num_classes
      devices[u].append(by_label[c][taken[c] : taken[c] + first])
      taken[c] += first
  props = rng.lognormal(0, 2.0, (num_classes, groups, 2))
  remaining = np.array(
    [len(v) - num_devices * 2 * first // num_classes for v in by_label],
    np.float64,
  )
  props = remaining[:, None, None] * props / props.sum((1, 2), keepdims=True)
  for u in range(num_devices):
    for j in range(2):
      c = (u + j) % num_classes
      count = int(props[c, u // num_classes, j])
      if taken[c] + count < len(by_label[c]):  # As their script.
        devices[u].append(by_label[c][taken[c] : taken[c] + count])
        taken[c] += count
  return [np.concatenate(d) for d in devices]


def _shape(x, model):
  return x.reshape(-1, 28, 28, 1) if model == 'cnn' else x.reshape(-1, 784)


def _model_fn(model):
  return dict(
    mlr=image_models.mlr(784, 10, pixels=True),
    nn2=image_models.mnist_2nn(pixels=True),
    cnn=image_models.mnist_cnn(10, pixels=True),
  )[model]


def fedavg_task(name, data_dir, seed, split, model):
  train_x, train_y, test_x, test_y = load_arrays(data_dir)
  rng = np.random.default_rng(seed)
  if len(train_y) % (FEDAVG_CLIENTS * SHARDS_PER_CLIENT) or (
    len(test_y) % FEDAVG_CLIENTS
  ):
    raise tasks.DataError(
      f'{data_dir}/mnist: {len(train_y)} train / {len(test_y)} test images '
      f'cannot be split evenly over {FEDAVG_CLIENTS} clients'
    )
  if split == 'iid':
    train_idx = iid_split(len(train_y), FEDAVG_CLIENTS, rng)
  else:
    train_idx = pathological_split(
      train_y, FEDAVG_CLIENTS, SHARDS_PER_CLIENT, rng
    )
  test_idx = iid_split(len(test_y), FEDAVG_CLIENTS, rng)
  per = len(train_y) // FEDAVG_CLIENTS
  label = (
    'IID'
    if split == 'iid'
    else f'pathological non-IID: sorted by label, {2 * FEDAVG_CLIENTS} '
    f'shards of {per // 2}, 2 per client'
  )
  return image_models.Splits(
    name=name,
    train=_pack(train_x, train_y, train_idx, model),
    test=_pack(test_x, test_y, test_idx, model),
    model_fn=_model_fn(model),
    description=(
      f'FedAvg MNIST {label}: {FEDAVG_CLIENTS} clients × {per} '
      f'train images (seed {seed}); the {len(test_y)} test '
      f'images split IID {len(test_y) // FEDAVG_CLIENTS} per '
      f'client; model {model.replace("nn2", "2NN").upper()}'
    ),
  )


def powerlaw_task(name, data_dir, seed, train_fraction=FEDPROX_TRAIN_FRACTION):
  train_x, train_y, test_x, test_y = load_arrays(data_dir)
  x = _shape(np.concatenate([train_x, test_x]), 'mlr')
  y = np.concatenate([train_y, test_y]).astype(np.int32)
  rng = np.random.default_rng(seed)
  devices = powerlaw_split(y, FEDPROX_DEVICES, rng)
  train, test = base.split_devices(
    x, y, devices, train_fraction, rng, _client_id
  )
  total = sum(len(d) for d in devices)
  return image_models.Splits(
    name=name,
    train=train,
    test=test,
    model_fn=_model_fn('mlr'),
    description=(
      f'FedProx MNIST: {FEDPROX_DEVICES} devices, 2 digits each, '
      f'power-law sizes, {total} of 70,000 images used (seed '
      f'{seed}; FedProx Table 1: 69,035), each device split '
      f'{train_fraction:g} train; MLR'
    ),
  )


def _fedavg_loader(split, model):
  def load(data_dir, seed):
    name = f'mnist_{split}' + (
      '' if model is None else f'_{model.replace("nn2", "2nn")}'
    )
    return fedavg_task(name, data_dir, seed, split, model or 'cnn')

  return load


SPLITS = collections.OrderedDict()  # name → loader(data_dir, seed) → Splits
for _split in ('iid', 'pathological'):
  for _model in (None, 'nn2', 'cnn'):
    SPLITS[
      f'mnist_{_split}'
      + ('' if _model is None else f'_{_model.replace("nn2", "2nn")}')
    ] = _fedavg_loader(_split, _model)
SPLITS['mnist_powerlaw'] = functools.partial(powerlaw_task, 'mnist_powerlaw')
TASKS = image_models.tasks_from_splits(SPLITS)
