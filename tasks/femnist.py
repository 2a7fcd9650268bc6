"""FEMNIST (LEAF, by writer), FedProx's FEMNIST variant, and TFF's EMNIST.

Data under `<data_dir>/femnist/`, the first found of:
- `femnist_union.npz` (../shared/data/femnist): a PARTIAL LEAF FEMNIST sample,
  396 of LEAF's 3,550 writers (54,026 train / 6,201 test images) merged from
  four LEAF runs (niid_05, keep_0, each writer's samples split 90/10);
- `train/` and `test/` folders of LEAF JSON (LEAF's `data/femnist/data/`
  output), read with `tasks.leaf.read_leaf_split`.
Pixels are LEAF's k/255 (1.0 = white paper), kept as the uint8 k, which the
models scale (`image_models.scale_pixels`): x [28, 28, 1] for the CNN,
[784] for MLR; labels LEAF's 0-9 digits, 10-35 A-Z, 36-61 a-z.

- `femnist`: one client per writer, LEAF's own train/test split; model: the
  FedAvg CNN (`image_models.mnist_cnn`) with 62 outputs, 1,690,046
  parameters (LEAF's reference CNN is the same with a 2,048-unit FC layer).
- `femnist_fedprox`: FedProx's variant (Li et al. 2020 §5.1/Table 1 and the
  authors' `data/nist/data/my_sample.py`): the lowercase letters a-j
  (relabelled 0-9) of all writers, train and test, pooled per class and
  shuffled; 200 devices, device u takes classes (u+j) mod 10 for j < 5 (the
  paper's 5 classes; their script's CLASS_PER_USER is 3); device sizes
  n_u = lognormal(4, 1) + 5 as in their script, int(n_u / 5) per class. The
  partial data holds only ~3,250 a-j images against the ~19,000 this asks for
  (FedProx Table 1: 18,345), so when a class is short every (device, class)
  slot gets 2 images and the rest of the class is shared in proportion to
  int(n_u / 5) - 2 (floored). Each device is shuffled and split 90/10
  train/test (int(0.9 n) train; `train_fraction` changes it). Model: MLR
  784 → 10.
- `emnist`: TFF's federated EMNIST-62 (3,400 writers) from `emnist_all.sqlite`
  (the file TFF 0.87's `emnist.load_data` caches, extracted from
  emnist_all.sqlite.lzma) in `<data_dir>/tff/` or `<data_dir>/`; never
  downloaded here. Model: the FedAvg CNN with 62 outputs.
"""

import collections
import functools
import os

import numpy as np

import tasks
from tasks import base
from tasks import image_models
from tasks import leaf
from tasks import tff_sqlite
from tasks import validate

NPZ = 'femnist_union.npz'
NPZ_KEYS = (
  'train_x',
  'train_y',
  'train_writer',
  'test_x',
  'test_y',
  'test_writer',
  'writers',
)
LEAF_SOURCE = (
  'LEAF (github.com/TalwalkarLab/leaf: cd data/femnist && '
  './preprocess.sh -s niid --sf 0.05 -k 0 -t sample), whose '
  'data/femnist/data/{train,test} folders go here'
)
NUM_CLASSES = 62
FEDPROX_DEVICES = 200
FEDPROX_CLASSES_PER_DEVICE = 5
FEDPROX_TRAIN_FRACTION = 0.9
LOWER_A = 36  # LEAF label of 'a'; a-j are 36-45.
EMNIST_FILE = 'emnist_all.sqlite'
EMNIST_URL = (
  'https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma'
)


def _npz_agrees(arrays):
  """The npz's arrays describe the same writers and samples."""
  writers = arrays['writers']
  if (writers == '').any():
    return ('writers',), f'item {int(np.argmax(writers == ""))} is empty'
  if len(np.unique(writers)) != len(writers):
    names, counts = np.unique(writers, return_counts=True)
    return ('writers',), f'lists {str(names[counts > 1][0])!r} twice'
  for split in ('train', 'test'):
    x, y, owner = (arrays[f'{split}_{k}'] for k in ('x', 'y', 'writer'))
    if not len(x) == len(y) == len(owner):
      return (
        f'{split}_x, {split}_y and {split}_writer have {len(x)}, '
        f'{len(y)} and {len(owner)} rows (expected the same)'
      )
    if owner.max() >= len(writers):
      i = int(np.argmax(owner >= len(writers)))
      return (
        (f'{split}_writer',),
        f'item {i} is {owner[i]}, but there are {len(writers)} writers',
      )
    empty = np.bincount(owner, minlength=len(writers)) == 0
    if empty.any():
      return f'writer {str(writers[np.argmax(empty)])!r} has no {split} samples'
  return None


def _npz_schema():
  fields = {'writers': validate.Array('U', (None,))}
  for split in ('train', 'test'):
    fields[f'{split}_x'] = validate.Array('iu', (None, 28, 28), lo=0, hi=255)
    fields[f'{split}_y'] = validate.Array(
      'iu', (None,), lo=0, hi=NUM_CLASSES - 1
    )
    fields[f'{split}_writer'] = validate.Array('iu', (None,), lo=0)
  return validate.Record(fields, rules=[_npz_agrees])


NPZ_SCHEMA = _npz_schema()


def _read_npz(path):
  """{writer: (train x uint8 n×28×28, y), (test x, y)} from the union npz,
  checked against NPZ_SCHEMA."""
  arrays, key = {}, None
  try:
    with open(path, 'rb') as f:
      z = np.load(f, allow_pickle=False)
      if not isinstance(z, np.lib.npyio.NpzFile):
        raise validate.fail(path, 'a single .npy array, not an npz archive')
      with z:
        for key in NPZ_KEYS:
          if key in z.files:
            arrays[key] = z[key]
  except tasks.DataError:
    raise
  except Exception as e:  # zip, zlib or format errors.
    failed = f' (array {key})' if key else ''
    raise validate.fail(
      path, f'not a readable npz file{failed} ({type(e).__name__}: {e})'
    ) from None
  arrays = validate.check(arrays, NPZ_SCHEMA, path)
  writers = [str(w) for w in arrays['writers']]
  result = collections.OrderedDict((w, []) for w in writers)
  for split in ('train', 'test'):
    x, y, owner = (arrays[f'{split}_{k}'] for k in ('x', 'y', 'writer'))
    x = x.astype(np.uint8, copy=False)
    order = np.argsort(owner, kind='stable')
    bounds = np.searchsorted(owner[order], np.arange(len(writers) + 1))
    for i, w in enumerate(writers):
      idx = order[bounds[i] : bounds[i + 1]]
      result[w].append((x[idx], y[idx].astype(np.int32)))
  return result


def _read_leaf(folder):
  """The same from LEAF JSON folders: x rows of 784 values in [0, 1], y
  LEAF's 0..61 (checked while reading)."""
  x, y = validate.Numbers(784, lo=0, hi=1), validate.Labels(NUM_CLASSES)
  train, test = leaf.read_leaf_pair(folder, x, y)
  return collections.OrderedDict(
    (
      writer,
      [
        (
          np.round(split[writer][0].reshape(-1, 28, 28) * 255).astype(np.uint8),
          split[writer][1],
        )
        for split in (train, test)
      ],
    )
    for writer in train
  )


def load_writers(data_dir):
  """({writer: [(train x uint8, y), (test x, y)]}, source description)."""
  folder = os.path.join(data_dir, 'femnist')
  npz = os.path.join(folder, NPZ)
  if os.path.isfile(npz):
    return _read_npz(npz), (f'{NPZ}: PARTIAL LEAF sample, not full FEMNIST')
  if os.path.isdir(os.path.join(folder, 'train')) or os.path.isdir(
    os.path.join(folder, 'test')
  ):
    return _read_leaf(folder), f'LEAF JSON in {folder}'
  raise tasks.DataError(
    f'FEMNIST needs {NPZ} (arrays {", ".join(NPZ_KEYS)}) or LEAF JSON '
    f'folders train/ and test/ in {folder}; get LEAF FEMNIST from '
    f'{LEAF_SOURCE}'
  )


def _pixels(x, flat):
  return x.reshape(-1, 784) if flat else x.reshape(-1, 28, 28, 1)


def load_femnist(data_dir, seed, name='femnist'):
  del seed  # LEAF's own split, no randomness.
  writers, source = load_writers(data_dir)
  splits = [collections.OrderedDict(), collections.OrderedDict()]
  for writer, pair in writers.items():  # Each has both (checked on reading).
    for split, (x, y) in zip(splits, pair):
      split[writer] = collections.OrderedDict(x=_pixels(x, False), y=y)
  n_train = sum(len(d['y']) for d in splits[0].values())
  n_test = sum(len(d['y']) for d in splits[1].values())
  return image_models.Splits(
    name=name,
    train=splits[0],
    test=splits[1],
    model_fn=image_models.mnist_cnn(NUM_CLASSES, pixels=True),
    description=(
      f'FEMNIST by writer ({source}): {len(writers)} writers, '
      f'{n_train} train / {n_test} test images, 62 classes; '
      'FedAvg CNN with 62 outputs'
    ),
  )


def fedprox_split(
  labels, num_devices, rng, classes_per_device=FEDPROX_CLASSES_PER_DEVICE
):
  """Indices per device into a pool of a-j images labelled 0-9."""
  sizes = rng.lognormal(4, 1, num_devices) + 5
  want = np.maximum((sizes / classes_per_device).astype(int), 2)
  devices = [[] for _ in range(num_devices)]
  for c in range(10):
    pool = rng.permutation(np.flatnonzero(labels == c))
    slots = [
      (u, j)
      for u in range(num_devices)
      for j in range(classes_per_device)
      if (u + j) % 10 == c
    ]
    if not slots:
      continue
    wanted = np.array([want[u] for u, _ in slots])
    if wanted.sum() <= len(pool):
      counts = wanted
    else:
      floor = min(2, len(pool) // len(slots))
      if floor == 0:
        raise tasks.DataError(
          f'class {chr(ord("a") + c)}: {len(pool)} images for '
          f'{len(slots)} device slots'
        )
      extra = wanted - floor
      spare = len(pool) - floor * len(slots)
      counts = floor + (extra * spare / max(extra.sum(), 1)).astype(int)
    start = 0
    for (u, _), count in zip(slots, counts):
      devices[u].append(pool[start : start + count])
      start += count
  return [np.concatenate(d) if d else np.zeros(0, int) for d in devices]


def load_fedprox(
  data_dir,
  seed,
  name='femnist_fedprox',
  num_devices=FEDPROX_DEVICES,
  train_fraction=FEDPROX_TRAIN_FRACTION,
):
  writers, source = load_writers(data_dir)
  xs, ys = [], []
  for pair in writers.values():
    for x, y in pair:
      keep = (y >= LOWER_A) & (y < LOWER_A + 10)
      xs.append(x[keep])
      ys.append(y[keep] - LOWER_A)
  x, y = _pixels(np.concatenate(xs), True), np.concatenate(ys).astype(np.int32)
  rng = np.random.default_rng(seed)
  devices = fedprox_split(y, num_devices, rng)
  train, test = base.split_devices(
    x, y, devices, train_fraction, rng, lambda u: f'f_{u:05d}'
  )
  total = sum(len(d) for d in devices)
  return image_models.Splits(
    name=name,
    train=train,
    test=test,
    model_fn=image_models.mlr(784, 10, pixels=True),
    description=(
      f'FedProx FEMNIST (a-j, 5 classes per device) from '
      f'{source}: {num_devices} devices, {total} of {len(y)} '
      f'a-j images (FedProx Table 1: 200 devices, 18,345 '
      f'samples), {train_fraction:g} train, seed {seed}; MLR'
    ),
  )


def emnist_path(data_dir):
  for candidate in (
    os.path.join(data_dir, 'tff', EMNIST_FILE),
    os.path.join(data_dir, EMNIST_FILE),
  ):
    if os.path.isfile(candidate):
      return candidate
  raise tasks.DataError(
    f"EMNIST needs TFF's {EMNIST_FILE} in {os.path.join(data_dir, 'tff')} "
    f'or {data_dir}: download {EMNIST_URL} and unpack it with '
    f'`unxz`/`lzma -d` (this loader never downloads)'
  )


EMNIST_SPLITS = ('all_train', 'all_test')
EMNIST_FEATURES = {  # As TFF's emnist.load_data parses them.
  'pixels': tff_sqlite.Feature('float', (28, 28), 0.0, 1.0),
  'label': tff_sqlite.Feature('int', (), 0, NUM_CLASSES - 1),
}


@functools.lru_cache(maxsize=2)
def _check_emnist(fingerprint):
  """Every example of the file checked once per process (`tff_sqlite`)."""
  return tff_sqlite.read(
    fingerprint[0], EMNIST_SPLITS, EMNIST_FEATURES, keep=False
  )


def load_emnist(data_dir, seed, name='emnist'):
  del seed
  import tensorflow as tf
  import tensorflow_federated as tff

  path = emnist_path(data_dir)
  _check_emnist(base.file_fingerprint(path))
  try:
    train, test = tff.simulation.datasets.emnist.load_data(
      only_digits=False, cache_dir=os.path.dirname(path)
    )
  except Exception as e:  # sqlite or format errors.
    raise validate.fail(
      path, f'TFF cannot open it ({type(e).__name__}: {e})'
    ) from None

  def to_xy(dataset):
    return dataset.map(
      lambda e: collections.OrderedDict(
        x=tf.reshape(e['pixels'], [28, 28, 1]), y=e['label']
      )
    )

  return base.FederatedTask(
    name=name,
    train=train.preprocess(to_xy),
    test=test.preprocess(to_xy),
    model_fn=image_models.mnist_cnn(NUM_CLASSES),
    description=(
      f'TFF federated EMNIST-62 from {path}: '
      f'{len(train.client_ids)} writers; FedAvg CNN with 62 '
      'outputs'
    ),
  )


SPLITS = collections.OrderedDict(  # Array-backed tasks only.
  femnist=load_femnist, femnist_fedprox=load_fedprox
)
TASKS = image_models.tasks_from_splits(SPLITS)
TASKS['emnist'] = load_emnist
