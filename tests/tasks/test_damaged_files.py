"""A generated corpus of damaged dataset files, for every reader in tasks/.

Each reader below writes a small VALID dataset in its own format (tiny data
made here: nothing is read from ../shared/data), and the corpus derives
damaged variants of one of its files, by class:

- truncate: the file cut at several offsets (for gzip files also the
  decompressed content cut and compressed again);
- flip: one byte XORed at several seeded offsets (for gzip files also in
  the decompressed content);
- structure: the right format with the wrong structure. For JSON, pickle and
  npz content these are GENERATED from the valid content: every place in it
  (a list's first item standing for all, a map's first entry for all) gets
  the wrong type, a list for a map or a map for a list, an extra level of
  nesting, an empty collection, and every key is deleted once; numpy arrays
  get the wrong dtype, rank or length. Binary and text formats add their
  own cases (wrong magic, wrong member names, missing tables, ...);
- values: numbers finite in float64 but not in float32, nan and ±inf,
  labels out of range or of the wrong type, text that is not UTF-8.

The promise checked for every case: loading gives exactly one
`tasks.DataError` (no chained exception, no warning printed) whose one-line
message names the damaged file, and nothing else — or, where the damage
cannot be told apart from valid data (a flipped pixel, a CSV cut at a line
end; `EITHER` cases), a load whose every array passes the reader's
invariants (dtype, shape, finite float32 values in range, labels in range,
no empty client). Never another exception type, never bad data loaded.

`python tests/tasks/test_damaged_files.py` prints the corpus table.
"""

import collections
import copy
import csv
import gzip
import io
import json
import os
import pickle
import sqlite3
import sys
import tarfile
import warnings

import numpy as np
import pytest

import tasks

ERROR = 'error'  # Must be refused with one DataError.
EITHER = 'either'  # A DataError, or a load that passes the invariants.
CLASSES = ('truncate', 'flip', 'structure', 'values')

Case = collections.namedtuple('Case', 'reader cls name data expect')


# ------------------------------------------------------------------ helpers
def _gzip(payload):
  return gzip.compress(payload, compresslevel=1, mtime=0)


def _json_bytes(content, markers=None):
  """JSON text of `content`; string values equal to a key of `markers` are
  replaced (with their quotes) by the raw bytes it maps to."""
  text = json.dumps(content).encode()
  for marker, raw in (markers or {}).items():
    assert json.dumps(marker).encode() in text, marker
    text = text.replace(json.dumps(marker).encode(), raw, 1)
  return text


def _offsets(length):
  """Several cut points: the ends, and inside at fixed fractions."""
  points = {
    0,
    1,
    2,
    length // 10,
    length // 3,
    length // 2,
    2 * length // 3,
    9 * length // 10,
    length - 2,
    length - 1,
  }
  return sorted(p for p in points if 0 <= p < length)


def _flips(data, seed, count=8):
  """(offset, mask) pairs: the first and last byte, then seeded ones."""
  rng = np.random.default_rng(seed)
  offsets = [0, len(data) - 1] + sorted(
    int(o) for o in rng.choice(len(data), min(count, len(data)), replace=False)
  )
  return [(o, int(rng.integers(1, 256))) for o in offsets]


def _short(raw):
  return raw if len(raw) < 20 else f'a {len(raw)}-digit integer'


def _flip(data, offset, mask):
  data = bytearray(data)
  data[offset] ^= mask
  return bytes(data)


# ---------------------------- generated wrong structure (JSON, pickle, npz)
def _skeleton(value):
  if isinstance(value, dict):
    return (
      'dict',
      tuple(sorted((str(k), _skeleton(v)) for k, v in value.items())),
    )
  if isinstance(value, list):
    return ('list', _skeleton(value[0]) if value else None)
  if isinstance(value, np.ndarray):
    return ('array', value.dtype.str, value.ndim)
  return type(value).__name__


def _is_map(value):
  """A dict whose entries all look alike (users → data), not a record."""
  return len(value) > 1 and len({_skeleton(v) for v in value.values()}) == 1


def _places(value, path=()):
  """(path, value) for every place: a list's first item stands for all, as
  does a map's first entry."""
  yield path, value
  if isinstance(value, dict):
    for key in list(value)[:1] if _is_map(value) else list(value):
      yield from _places(value[key], path + (key,))
  elif isinstance(value, list) and value:
    yield from _places(value[0], path + (0,))


def _wrong(value):
  """(label, replacement) of the wrong structure for one place."""
  if isinstance(value, dict):
    return [
      ('empty map', {}),
      ('list for map', list(value.values())),
      ('extra nesting', [value]),
      ('number for map', 5),
      ('null', None),
    ]
  if isinstance(value, list):
    return [
      ('empty list', []),
      ('map for list', {str(i): v for i, v in enumerate(value)}),
      ('extra nesting', [value]),
      ('number for list', 5),
      ('string for list', 'x'),
      ('null', None),
    ]
  if isinstance(value, np.ndarray):
    kind = (
      [('number array', np.arange(value.size).reshape(value.shape))]
      if value.dtype.kind in 'US'
      else [
        ('float array', value.astype(np.float64) + 0.5),
        ('string array', value.astype(str)),
      ]
    )
    return kind + [
      ('object array', value.astype(object)),
      ('extra dimension', value[..., None]),
      (
        'one dimension fewer' if value.ndim > 1 else 'extra rank',
        value.reshape(-1) if value.ndim > 1 else value[None],
      ),
      ('empty array', value[:0]),
      ('one row short', value[:-1]),
      ('scalar array', np.asarray(value.ravel()[0])),
    ]
  if isinstance(value, str):
    return [
      ('number for string', 5),
      ('null', None),
      ('list for string', [value]),
    ]
  return [
    ('string for number', str(value)),
    ('null', None),
    ('bool for number', True),
    ('list for number', [value]),
    ('map for number', {'v': value}),
  ]


def _render(path):
  return '$' + ''.join(f'[{k!r}]' for k in path)


def _path_copy(content, path):
  """`content` with the containers along `path` copied (the rest shared:
  a mutation at the end of `path` leaves `content` as it was)."""
  root = copy.copy(content)
  parent = root
  for key in path[:-1]:
    parent[key] = copy.copy(parent[key])
    parent = parent[key]
  return root, parent


def _replaced(content, path, new):
  if not path:
    return new
  root, parent = _path_copy(content, path)
  parent[path[-1]] = new
  return root


def _deleted(content, path):
  root, parent = _path_copy(content, path)
  del parent[path[-1]]
  return root


def generated_structure(content, encode, skip_root=False):
  """(name, bytes) for every place of `content` × every wrong structure,
  and every key deleted."""
  cases = []
  for path, value in _places(content):
    if skip_root and not path:
      continue
    for label, new in _wrong(value):
      cases.append(
        (f'{_render(path)}: {label}', encode(_replaced(content, path, new)))
      )
    if path and not isinstance(path[-1], int):
      cases.append(
        (f'{_render(path)}: missing', encode(_deleted(content, path)))
      )
  return cases


# --------------------------------------------------------- the invariants
def _client_arrays(result):
  """{split: {client: OrderedDict(x, y)}} of a loader's result."""
  if isinstance(result, dict):
    return result
  if hasattr(result, '_fields'):  # image_models.Splits
    return {'train': result.train, 'test': result.test}
  return {split: getattr(result, split).arrays for split in ('train', 'test')}


def check_arrays(result, x_dtype, x_shape, x_range, num_classes, y_shape=()):
  """The invariants of a valid load (independent of the loaders' checks)."""
  splits = _client_arrays(result)
  assert splits['train'], 'no clients'
  for split, clients in splits.items():
    for client, arrays in clients.items():
      x, y = arrays['x'], arrays['y']
      where = f'{split} {client!r}'
      assert len(y) > 0, f'{where}: no examples'
      assert x.dtype == x_dtype and x.shape == (len(y), *x_shape), (
        where,
        x.dtype,
        x.shape,
      )
      assert y.dtype == np.int32 and y.shape == (len(y), *y_shape), (
        where,
        y.dtype,
        y.shape,
      )
      if x.dtype.kind == 'f':
        assert np.isfinite(x).all(), f'{where}: x not finite'
      if x_range is not None:
        assert x.min() >= x_range[0] and x.max() <= x_range[1], (
          where,
          x.min(),
          x.max(),
        )
      assert y.min() >= 0 and y.max() < num_classes, (where, y.min(), y.max())


# ------------------------------------------------------------------ readers
class Reader:
  """A reader of one format: a valid dataset, its loader, its invariants."""

  name = ''
  target = ''  # The file the corpus damages (relative to the root).
  compressed = False  # gzip: the content is damaged too.
  seed = 0

  def files(self):
    """{relative path: bytes} of the valid dataset (target included)."""
    raise NotImplementedError

  def load(self, root):
    raise NotImplementedError

  def check(self, result):
    raise NotImplementedError

  def structure(self):
    return []

  def values(self):
    return []

  def truncation_expect(self, data, offset):
    del offset, data
    return ERROR

  # ---- derived
  def valid_files(self):
    if '_files' not in self.__dict__:
      self._files = self.files()
    return self._files

  def valid(self):
    return self.valid_files()[self.target]

  def write(self, root, data):
    for relative, content in self.valid_files().items():
      path = root / relative
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(data if relative == self.target else content)
    return root / self.target

  def cases(self):
    raw = self.valid()
    out = []
    for o in _offsets(len(raw)):
      out.append(
        Case(
          self,
          'truncate',
          f'cut at {o} of {len(raw)}',
          raw[:o],
          self.truncation_expect(raw, o),
        )
      )
    if self.compressed:
      payload = gzip.decompress(raw)
      for o in _offsets(len(payload)):
        out.append(
          Case(
            self,
            'truncate',
            f'content cut at {o} of {len(payload)}',
            _gzip(payload[:o]),
            self.truncation_expect(payload, o),
          )
        )
    for o, mask in _flips(raw, self.seed):
      out.append(
        Case(
          self, 'flip', f'byte {o} ^ {mask:#04x}', _flip(raw, o, mask), EITHER
        )
      )
    if self.compressed:
      payload = gzip.decompress(raw)
      for o, mask in _flips(payload, self.seed + 1):
        out.append(
          Case(
            self,
            'flip',
            f'content byte {o} ^ {mask:#04x}',
            _gzip(_flip(payload, o, mask)),
            EITHER,
          )
        )
    for cls, made in (
      ('structure', self.structure()),
      ('values', self.values()),
    ):
      for item in made:
        name, data = item[:2]
        expect = item[2] if len(item) > 2 else ERROR
        out.append(Case(self, cls, name, data, expect))
    return out


def _text_truncation(data, offset):
  """A cut that removes only whole lines (or white space) may be valid."""
  if not data[offset:].strip() or data[:offset].endswith(b'\n'):
    return EITHER
  return ERROR


# ---- MNIST (IDX in gzip)
def _idx(array, magic):
  return (
    np.array([magic, *array.shape], '>u4').tobytes()
    + array.astype(np.uint8).tobytes()
  )


class MnistImages(Reader):
  name = 'mnist_idx_images'
  target = 'mnist/t10k-images-idx3-ubyte.gz'
  compressed = True
  seed = 1
  images, labels = 0x803, 0x801

  def arrays(self):
    rng = np.random.default_rng(0)
    return {
      split: (rng.integers(0, 256, (n, 28, 28), np.uint8), np.arange(n) % 10)
      for split, n in (('train', 200), ('t10k', 100))
    }

  def files(self):
    out = {}
    for split, (x, y) in self.arrays().items():
      out[f'mnist/{split}-images-idx3-ubyte.gz'] = _gzip(_idx(x, self.images))
      out[f'mnist/{split}-labels-idx1-ubyte.gz'] = _gzip(_idx(y, self.labels))
    return out

  def load(self, root):
    from tasks import mnist

    return mnist.SPLITS['mnist_iid_2nn'](str(root), 0)

  def check(self, result):
    check_arrays(result, np.uint8, (784,), None, 10)

  def structure(self):
    x, _ = self.arrays()['t10k']
    wrong = [
      ('label magic', _idx(x, self.labels)),
      ('float32 type code', _idx(x, 0x0D03)),
      ('rank 4', _idx(x[..., None], 0x804)),
      ('rank 2', _idx(x.reshape(100, 784), 0x802)),
      ('28x27 images', _idx(x[:, :, :27], self.images)),
      ('99 images (labels 100)', _idx(x[:99], self.images)),
      ('no images', _idx(x[:0], self.images)),
      ('trailing bytes', _idx(x, self.images) + b'\0' * 784),
      ('header count larger than the data', _idx(x, self.images)[:-784]),
      ('empty content', b''),
    ]
    out = [(name, _gzip(payload)) for name, payload in wrong]
    out += [
      ('uncompressed IDX', _idx(x, self.images)),
      ('gzip of gzip', _gzip(_gzip(_idx(x, self.images)))),
      ('two gzip members', _gzip(_idx(x, self.images)) * 2),
      ('html page', b'<html><body>404 Not Found</body></html>'),
    ]
    return out


class MnistLabels(MnistImages):
  name = 'mnist_idx_labels'
  target = 'mnist/train-labels-idx1-ubyte.gz'
  seed = 2

  def structure(self):
    _, y = self.arrays()['train']
    wrong = [
      ('image magic', _idx(y, self.images)),
      ('rank 2', _idx(y[:, None], 0x802)),
      ('199 labels (images 200)', _idx(y[:-1], self.labels)),
      ('no labels', _idx(y[:0], self.labels)),
      ('empty content', b''),
    ]
    return [(name, _gzip(payload)) for name, payload in wrong]

  def values(self):
    _, y = self.arrays()['train']
    out = []
    for bad in (10, 255):
      z = y.copy()
      z[7] = bad
      out.append((f'label {bad}', _gzip(_idx(z, self.labels))))
    return out


# ---- CIFAR-10 (JPEG tar, pickle batches, the decoded cache)
CIFAR_CLASSES = (
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


def _cifar_images(n, seed):
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 256, (n, 8, 8, 3)).repeat(4, 1).repeat(4, 2)
  return x.astype(np.uint8), np.arange(n) % 10


def _jpeg(image, fmt='JPEG'):
  from PIL import Image

  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format=fmt)
  return buf.getvalue()


def _tar(members):
  """An uncompressed tar of (name, bytes or a TarInfo type) members."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as tar:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.mtime = 0
      if data not in (
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.FIFOTYPE,
      ):
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
      else:
        info.type = data
        if data in (tarfile.SYMTYPE, tarfile.LNKTYPE):
          info.linkname = 'cat/0000.jpg'
        tar.addfile(info)
  return buf.getvalue()


def _cifar_members(x, y):
  counters = collections.Counter()
  members = []
  for image, label in zip(x, y):
    members.append(
      (f'{CIFAR_CLASSES[label]}/{counters[label]:04d}.jpg', _jpeg(image))
    )
    counters[label] += 1
  return members


class CifarTar(Reader):
  name = 'cifar10_jpeg_tar'
  target = 'cifar10/train.tar'
  seed = 3

  def members(self):
    return _cifar_members(*_cifar_images(20, 0))

  def files(self):
    return {
      'cifar10/train.tar': _tar(self.members()),
      'cifar10/test.tar': _tar(_cifar_members(*_cifar_images(20, 1))),
    }

  def load(self, root):
    from tasks import cifar10

    return cifar10.splits(str(root), 0, num_clients=2)

  def check(self, result):
    check_arrays(result, np.uint8, (32, 32, 3), None, 10)

  def truncation_expect(self, data, offset):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
      last = tar.getmembers()[-1]
    end = last.offset_data + -(-last.size // 512) * 512
    return (
      EITHER if offset >= end and not data[offset:].strip(b'\0') else (ERROR)
    )

  def structure(self):
    members = self.members()
    x, _ = _cifar_images(2, 5)
    gray = _jpeg(x[0].mean(axis=2).astype(np.uint8))
    big = _jpeg(np.kron(x[0], np.ones((2, 2, 1), np.uint8)))
    return [
      ('no members', _tar([])),
      ('directories only', _tar([(c, tarfile.DIRTYPE) for c in CIFAR_CLASSES])),
      (
        'member outside a class folder',
        _tar(members + [('0001.jpg', members[0][1])]),
      ),
      (
        'unknown class folder',
        _tar(members + [('kangaroo/0000.jpg', members[0][1])]),
      ),
      (
        'member one folder deeper',
        _tar(members + [('cat/extra/0000.jpg', members[0][1])]),
      ),
      (
        'member not an image',
        _tar(members[:-1] + [(members[-1][0], b'not a jpeg at all')]),
      ),
      ('empty member', _tar(members[:-1] + [(members[-1][0], b'')])),
      ('64x64 image', _tar(members[:-1] + [(members[-1][0], big)])),
      ('symlink member', _tar(members + [('cat/0009.jpg', tarfile.SYMTYPE)])),
      ('hard link member', _tar(members + [('cat/0009.jpg', tarfile.LNKTYPE)])),
      ('fifo member', _tar(members + [('cat/0009.jpg', tarfile.FIFOTYPE)])),
      ('classes of unequal size', _tar(members[:-1])),
      ('gzip-compressed tar', _gzip(_tar(members))),
      (
        'grayscale JPEG (converted)',
        _tar(members[:-1] + [(members[-1][0], gray)]),
        EITHER,
      ),
      (
        'PNG member of the right size',
        _tar(members[:-1] + [(members[-1][0], _jpeg(x[1], 'PNG'))]),
        EITHER,
      ),
    ]

  def values(self):
    members = self.members()
    return [
      (
        'class folder name not UTF-8',
        _tar(members[:-1] + [('c\udcfft/0009.jpg', members[-1][1])]),
      )
    ]


def _cifar_batch(x, y):
  return {
    b'batch_label': b'training batch 3 of 5',
    b'labels': [int(v) for v in y],
    b'data': x.transpose(0, 3, 1, 2).reshape(len(y), -1),
    b'filenames': [f'{i}.png'.encode() for i in range(len(y))],
  }


class CifarPickle(Reader):
  name = 'cifar10_pickle'
  target = 'cifar10/cifar-10-batches-py/data_batch_3'
  seed = 4

  def batch(self):
    x, y = _cifar_images(20, 0)
    return _cifar_batch(x[8:12], y[8:12])

  def files(self):
    x, y = _cifar_images(20, 0)
    xt, yt = _cifar_images(20, 1)
    out = {}
    for i in range(5):
      part = slice(4 * i, 4 * i + 4)
      out[f'cifar10/cifar-10-batches-py/data_batch_{i + 1}'] = pickle.dumps(
        _cifar_batch(x[part], y[part])
      )
    out['cifar10/cifar-10-batches-py/test_batch'] = pickle.dumps(
      _cifar_batch(xt, yt)
    )
    return out

  def load(self, root):
    from tasks import cifar10

    return cifar10.splits(str(root), 0, num_clients=2)

  def check(self, result):
    check_arrays(result, np.uint8, (32, 32, 3), None, 10)

  def structure(self):
    batch = {k: v for k, v in self.batch().items() if k in (b'data', b'labels')}
    out = generated_structure(batch, pickle.dumps)
    out += [
      ('str keys', pickle.dumps({k.decode(): v for k, v in batch.items()})),
      ('a list of images', pickle.dumps([batch[b'data']])),
      ('an array', pickle.dumps(batch[b'data'])),
      (
        'pickle of an unknown class',
        b'\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00\x8c\x08'
        b'notamod\x94\x8c\x05Thing\x94\x93\x94.',
      ),
      ('not a pickle', b'data_batch_3 is missing\n'),
    ]
    return out

  def values(self):
    batch = self.batch()
    out = []
    for label, data in (
      ('pixel 300', batch[b'data'].astype(np.int64) + 299),
      ('pixel -1', batch[b'data'].astype(np.int64) - 256),
      ('float pixels 1e300', np.full(batch[b'data'].shape, 1e300)),
      ('float pixels nan', np.full(batch[b'data'].shape, np.nan)),
      ('float pixels inf', np.full(batch[b'data'].shape, np.inf)),
    ):
      out.append((label, pickle.dumps({**batch, b'data': data})))
    for bad in (10, -1, 1.5, True, 10**30, 1e300, float('nan')):
      labels = list(batch[b'labels'])
      labels[1] = bad
      out.append((f'label {bad!r}', pickle.dumps({**batch, b'labels': labels})))
    return out


class CifarCache(CifarTar):
  """The decoded-array cache: damaged, it is decoded again (no error)."""

  name = 'cifar10_cache'
  target = 'cache/cifar10_jpeg_KEY.npz'
  seed = 5

  def cache_bytes(self):
    x, y = [], []
    for members in (self.members(), _cifar_members(*_cifar_images(20, 1))):
      from PIL import Image

      x.append(
        np.stack(
          [
            np.asarray(Image.open(io.BytesIO(d)).convert('RGB'))
            for _, d in sorted(members)
          ]
        )
      )
      y.append(
        np.asarray(
          [CIFAR_CLASSES.index(n.split('/')[0]) for n, _ in sorted(members)],
          np.int32,
        )
      )
    return dict(train_x=x[0], train_y=y[0], test_x=x[1], test_y=y[1])

  def files(self):
    out = super().files()
    buf = io.BytesIO()
    np.savez(buf, **self.cache_bytes())
    out[self.target] = buf.getvalue()
    return out

  def write(self, root, data):
    from tasks import cifar10

    for relative, content in self.valid_files().items():
      if relative != self.target:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content)
    # The cache file goes where the loader looks for this data's cache.
    os.environ['TFF_ALGOS_CACHE'] = str(root / 'cache')
    cifar10.load_arrays(str(root))  # Writes the genuine cache ...
    (cache,) = os.listdir(root / 'cache')
    (root / 'cache' / cache).write_bytes(data)  # ... then damages it.
    return root / 'cache' / cache

  def load(self, root):
    from tasks import cifar10

    arrays = cifar10.load_arrays(str(root))
    fresh = cifar10.load_arrays(str(root), use_cache=False)
    for a, b in zip(arrays[:4], fresh[:4]):
      np.testing.assert_array_equal(a, b)  # The damage was not used.
    return cifar10.splits(str(root), 0, num_clients=2)

  def truncation_expect(self, data, offset):
    return EITHER

  def structure(self):
    arrays = self.cache_bytes()

    def encode(content):
      buf = io.BytesIO()
      np.savez(buf, **content)
      return buf.getvalue()

    return [
      (name, data, EITHER)
      for name, data in generated_structure(arrays, encode, skip_root=True)
    ]

  def values(self):
    return []

  def cases(self):
    # Every damaged cache must be recovered from: expect a valid load.
    return [c._replace(expect=EITHER) for c in super().cases()]


# ---- LEAF JSON (synthetic, FEMNIST, Sent140)
class Leaf(Reader):
  """One LEAF JSON file of a LEAF train/ + test/ dataset."""

  seed = 6
  folder = ''
  num_classes = 10

  def sample(self, rng, user, i):
    raise NotImplementedError

  def content(self, split):
    rng = np.random.default_rng(1 if split == 'train' else 2)
    users = ['f_00000', 'f_00001']
    counts = [3, 2] if split == 'train' else [1, 2]
    data = {}
    for user, n in zip(users, counts):
      pairs = [self.sample(rng, user, i) for i in range(n)]
      data[user] = dict(x=[p[0] for p in pairs], y=[p[1] for p in pairs])
    return dict(users=users, num_samples=counts, user_data=data)

  def files(self):
    return {
      f'{self.folder}/{split}/all_data_{split}.json': _json_bytes(
        self.content(split)
      )
      for split in ('train', 'test')
    }

  @property
  def target(self):
    return f'{self.folder}/train/all_data_train.json'

  def structure(self):
    content = self.content('train')
    out = generated_structure(content, _json_bytes)
    two = copy.deepcopy(content)
    two['users'][1] = two['users'][0]
    extra = copy.deepcopy(content)
    extra['user_data']['f_99999'] = extra['user_data']['f_00000']
    counts = copy.deepcopy(content)
    counts['num_samples'][0] += 1
    short = copy.deepcopy(content)
    short['user_data']['f_00000']['y'].pop()
    short['num_samples'][0] -= 1
    out += [
      ('a user listed twice', _json_bytes(two)),
      ('user_data of an unlisted user', _json_bytes(extra)),
      ('num_samples disagrees', _json_bytes(counts)),
      ('fewer y than x', _json_bytes(short)),
      ('deep nesting', b'[' * 100_000 + b']' * 100_000),
      ('empty file', b''),
      ('a JSON string', b'"users"'),
      ('UTF-16 text', json.dumps(content).encode('utf-16')),
      ('trailing garbage', _json_bytes(content) + b'}'),
    ]
    return out

  def label_values(self):
    return [
      f'{self.num_classes}',
      '-1',
      '1.5',
      '1e300',
      'true',
      '"1"',
      'null',
      'NaN',
      '1e400',
      str(10**400),
    ]

  def values(self):
    content = self.content('train')
    out = []
    for raw in self.label_values():
      bad = copy.deepcopy(content)
      bad['user_data']['f_00001']['y'][0] = 'MARK'
      out.append(
        (f'label {_short(raw)}', _json_bytes(bad, {'MARK': raw.encode()}))
      )
    bad = copy.deepcopy(content)
    bad['users'][1] = 'MARK'
    bad['user_data']['MARK'] = bad['user_data'].pop('f_00001')
    raw = _json_bytes(bad).replace(b'"MARK"', b'"f_\xff\xfe1"')
    out.append(('user name not UTF-8', raw))
    return out


class LeafNumeric(Leaf):
  """LEAF files whose x rows are numbers (synthetic, FEMNIST)."""

  x_values = (
    '1e300',
    '-1e300',
    '3.5e38',
    '1e400',
    '-1e400',
    'NaN',
    'Infinity',
    '-Infinity',
    str(10**400),
    'true',
    '"0.5"',
    'null',
    '[0.5]',
  )

  def values(self):
    out = super().values()
    for raw in self.x_values:
      bad = copy.deepcopy(self.content('train'))
      bad['user_data']['f_00001']['x'][1][3] = 'MARK'
      out.append(
        (f'x value {_short(raw)}', _json_bytes(bad, {'MARK': raw.encode()}))
      )
    return out


class LeafSynthetic(LeafNumeric):
  name = 'leaf_json_synthetic'
  folder = 'synthetic'

  def sample(self, rng, user, i):
    return rng.normal(size=60).round(6).tolist(), int(rng.integers(10))

  def load(self, root):
    return tasks.load_task('synthetic_1_1', data_dir=str(root / 'synthetic'))

  def check(self, result):
    check_arrays(result, np.float32, (60,), None, 10)


class LeafFemnist(LeafNumeric):
  name = 'leaf_json_femnist'
  folder = 'femnist'
  num_classes = 62
  x_values = LeafNumeric.x_values + ('1.5', '-0.1')

  def sample(self, rng, user, i):
    return (rng.integers(0, 256, 784) / 255).round(6).tolist(), int(
      rng.integers(62)
    )

  def load(self, root):
    from tasks import femnist

    return femnist.SPLITS['femnist'](str(root), 0)

  def check(self, result):
    check_arrays(result, np.uint8, (28, 28, 1), None, 62)


TWEETS = (
  'I love this, so good!',
  'so sad today',
  'good good morning',
  'Worst day. Sad!',
  'love it',
  'meh',
)


class LeafSent140(Leaf):
  name = 'leaf_json_sent140'
  folder = 'sent140'
  num_classes = 2

  def sample(self, rng, user, i):
    return (
      [
        str(1000 + i),
        'Mon Apr 06 22:19:45 PDT 2009',
        'NO_QUERY',
        user,
        TWEETS[int(rng.integers(len(TWEETS)))],
        'training',
      ],
      int(rng.integers(2)),
    )

  def load(self, root):
    from tasks import sent140

    return sent140.load(str(root), source='leaf')

  def check(self, result):
    check_arrays(result, np.int32, (25,), (0, 10_000), 2)

  def values(self):
    out = super().values()
    content = self.content('train')
    for label, raw in (
      ('tweet a number', b'5'),
      ('tweet null', b'null'),
      ('tweet not UTF-8', b'"caf\xe9"'),
      ('tweet a list', b'["a"]'),
    ):
      bad = copy.deepcopy(content)
      bad['user_data']['f_00001']['x'][0][4] = 'MARK'
      out.append((label, _json_bytes(bad, {'MARK': raw})))
    bad = copy.deepcopy(content)
    bad['user_data']['f_00001']['x'][0] = bad['user_data']['f_00001']['x'][0][
      :4
    ]
    out.append(('tweet with 4 fields', _json_bytes(bad)))
    return out


class LeafSent140Sample(LeafSent140):
  """The single LEAF file (`leaf_test_sample.json`) Sent140 re-splits."""

  name = 'leaf_json_sent140_sample'
  target = 'sent140/leaf_test_sample.json'

  def content(self, split='train'):
    del split
    return super().content('train')

  def files(self):
    return {self.target: _json_bytes(self.content())}

  def load(self, root):
    from tasks import sent140

    return sent140.load(str(root))


# ---- FEMNIST npz
class FemnistNpz(Reader):
  name = 'femnist_npz'
  target = 'femnist/femnist_union.npz'
  seed = 7

  def arrays(self):
    rng = np.random.default_rng(0)
    z = collections.defaultdict(list)
    for i in range(3):
      for split, n in (('train', 8), ('test', 2)):
        z[f'{split}_x'].append(rng.integers(0, 256, (n, 28, 28)))
        z[f'{split}_y'].append(rng.integers(0, 62, n))
        z[f'{split}_writer'].append(np.full(n, i))
    out = {k: np.concatenate(v) for k, v in z.items()}
    for split in ('train', 'test'):
      out[f'{split}_x'] = out[f'{split}_x'].astype(np.uint8)
      out[f'{split}_y'] = out[f'{split}_y'].astype(np.uint8)
      out[f'{split}_writer'] = out[f'{split}_writer'].astype(np.int32)
    out['writers'] = np.array(['f0001_01', 'f0002_02', 'f0003_03'])
    return out

  @staticmethod
  def encode(arrays):
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()

  def files(self):
    return {self.target: self.encode(self.arrays())}

  def load(self, root):
    from tasks import femnist

    return femnist.SPLITS['femnist'](str(root), 0)

  def check(self, result):
    check_arrays(result, np.uint8, (28, 28, 1), None, 62)

  def structure(self):
    arrays = self.arrays()
    out = generated_structure(arrays, self.encode, skip_root=True)
    buf = io.BytesIO()
    np.save(buf, arrays['train_x'])
    bytes_writers = dict(arrays, writers=arrays['writers'].astype('S'))
    dup = dict(arrays, writers=np.array(['f0001_01', 'f0001_01', 'x']))
    out += [
      ('a .npy, not an npz', buf.getvalue()),
      ('writer names as bytes', self.encode(bytes_writers)),
      ('a writer twice', self.encode(dup)),
      (
        'a writer without test data',
        self.encode(
          dict(arrays, test_writer=np.zeros_like(arrays['test_writer']))
        ),
      ),
      ('not a zip', b'PK\x03\x04 but then nothing'),
    ]
    return out

  def values(self):
    arrays = self.arrays()
    out = []
    for key, label, new in (
      ('train_x', 'pixel 300', arrays['train_x'].astype(np.int16) + 299),
      ('train_x', 'pixel -1', arrays['train_x'].astype(np.int16) - 256),
      (
        'train_x',
        'float pixels 1e300',
        np.full(arrays['train_x'].shape, 1e300),
      ),
      ('train_x', 'float pixels nan', np.full(arrays['train_x'].shape, np.nan)),
      ('train_x', 'float pixels in [0, 1]', arrays['train_x'] / 255.0),
      ('train_y', 'label 62', arrays['train_y'] * 0 + 62),
      ('train_y', 'label 255', arrays['train_y'] * 0 + 255),
      ('train_y', 'label -1', arrays['train_y'].astype(np.int8) * 0 - 1),
      ('train_y', 'float labels', arrays['train_y'] + 0.5),
      ('train_writer', 'writer -1', arrays['train_writer'] * 0 - 1),
      ('train_writer', 'writer 3', arrays['train_writer'] * 0 + 3),
      ('writers', 'empty writer name', np.array(['f0001_01', '', 'x'])),
    ):
      out.append((f'{key}: {label}', self.encode(dict(arrays, **{key: new}))))
    return out


# ---- TFF SQLite (Shakespeare snippets, EMNIST pixels)
def _example(**features):
  import tensorflow as tf

  made = {}
  for key, value in features.items():
    if (
      isinstance(value, (bytes, list))
      and value
      and isinstance(value[0] if isinstance(value, list) else value, bytes)
    ):
      made[key] = tf.train.Feature(
        bytes_list=tf.train.BytesList(
          value=value if isinstance(value, list) else [value]
        )
      )
    elif isinstance(value, np.ndarray) and value.dtype.kind == 'f':
      made[key] = tf.train.Feature(
        float_list=tf.train.FloatList(value=value.ravel().tolist())
      )
    else:
      made[key] = tf.train.Feature(
        int64_list=tf.train.Int64List(value=np.ravel(value).tolist())
      )
  return tf.train.Example(
    features=tf.train.Features(feature=made)
  ).SerializeToString()


def _sqlite(rows, metadata, schema=None, then=()):
  """Bytes of a TFF-schema sqlite with `rows` (split, client, proto) and
  `metadata` (client, split, count); `then`: SQL run afterwards."""
  db = sqlite3.connect(':memory:')
  for statement in schema or (
    'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT '
    'NOT NULL, serialized_example_proto BLOB NOT NULL)',
    'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name '
    'TEXT NOT NULL, num_examples INTEGER NOT NULL)',
  ):
    db.execute(statement)
  db.executemany('INSERT INTO examples VALUES (?, ?, ?)', rows)
  db.executemany('INSERT INTO client_metadata VALUES (?, ?, ?)', metadata)
  for statement in then:
    db.execute(statement)
  db.commit()
  data = db.serialize()
  db.close()
  return data


_LOOSE = (
  'CREATE TABLE examples (split_name, client_id, serialized_example_proto)',
  'CREATE TABLE client_metadata (client_id, split_name, num_examples)',
)


class Sqlite(Reader):
  """A TFF SqlClientData file."""

  splits = ('train', 'test')
  clients = ('c0', 'c1')

  def example(self, i):
    raise NotImplementedError

  def wrong_examples(self):
    """(label, proto bytes) of examples with the wrong features."""
    raise NotImplementedError

  def rows(self):
    rows, metadata, i = [], [], 0
    for split in self.splits:
      for client in self.clients:
        n = 3 if split == self.splits[0] else 2
        for _ in range(n):
          rows.append((split, client, self.example(i)))
          i += 1
        metadata.append((client, split, n))
    return rows, metadata

  def files(self):
    return {self.target: _sqlite(*self.rows())}

  def structure(self):
    rows, meta = self.rows()
    first = rows[0]
    out = [
      ('no examples table', _sqlite(rows, meta, then=['DROP TABLE examples'])),
      (
        'no client_metadata table',
        _sqlite(rows, meta, then=['DROP TABLE client_metadata']),
      ),
      (
        'proto column renamed',
        _sqlite(
          rows,
          meta,
          then=[
            'ALTER TABLE examples RENAME COLUMN serialized_example_proto '
            'TO proto'
          ],
        ),
      ),
      (
        'num_examples column renamed',
        _sqlite(
          rows,
          meta,
          then=['ALTER TABLE client_metadata RENAME COLUMN num_examples TO n'],
        ),
      ),
      ('no examples', _sqlite([], meta)),
      ('no clients', _sqlite(rows, [])),
      ('empty database', _sqlite([], [])),
      ('an example missing', _sqlite(rows[1:], meta)),
      ('an example too many', _sqlite(rows + [first], meta)),
      (
        'num_examples a word',
        _sqlite(
          rows,
          [
            (c, s, 'many') if i == 0 else (c, s, n)
            for i, (c, s, n) in enumerate(meta)
          ],
          _LOOSE,
        ),
      ),
      (
        'num_examples not whole',
        _sqlite(
          rows,
          [
            (c, s, n + 0.5) if i == 0 else (c, s, n)
            for i, (c, s, n) in enumerate(meta)
          ],
          _LOOSE,
        ),
      ),
      (
        'num_examples -1',
        _sqlite(
          rows,
          [
            (c, s, -1) if i == 0 else (c, s, n)
            for i, (c, s, n) in enumerate(meta)
          ],
        ),
      ),
      (
        'num_examples NULL',
        _sqlite(
          rows,
          [
            (c, s, None) if i == 0 else (c, s, n)
            for i, (c, s, n) in enumerate(meta)
          ],
          _LOOSE,
        ),
      ),
      (
        'client_id NULL',
        _sqlite(
          [
            (s, None, p) if i == 0 else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
          _LOOSE,
        ),
      ),
      (
        'client_id an integer',
        _sqlite(
          [(s, 5, p) if c == first[1] else (s, c, p) for s, c, p in rows],
          [(5, s, n) if c == first[1] else (c, s, n) for c, s, n in meta],
          _LOOSE,
        ),
      ),
      (
        'unknown split name',
        _sqlite(
          [
            ('validation', c, p) if i == 0 else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
        ),
      ),
      (
        'proto NULL',
        _sqlite(
          [
            (s, c, None) if i == 0 else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
          _LOOSE,
        ),
      ),
      (
        'proto text',
        _sqlite(
          [
            (s, c, 'hello') if i == 0 else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
        ),
      ),
      (
        'proto not a tf.train.Example',
        _sqlite(
          [
            (s, c, b'\xff\xfe garbage') if i == 0 else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
        ),
      ),
      (
        'a client with no examples',
        _sqlite(rows, meta + [('c9', self.splits[0], 0)]),
      ),
      ('not a database', b'SQLite format 3\0' + b'\0' * 84 + b'x' * 900),
    ]
    for label, proto in self.wrong_examples():
      out.append(
        (
          f'example {label}',
          _sqlite(
            [
              (s, c, proto) if i == 0 else (s, c, p)
              for i, (s, c, p) in enumerate(rows)
            ],
            meta,
          ),
        )
      )
    return out

  def values(self):
    rows, meta = self.rows()
    first = self.clients[0]
    return [
      (
        'client_id not UTF-8',
        _sqlite(
          rows,
          meta,
          then=[
            f"UPDATE {table} SET client_id = CAST(X'63ff' AS TEXT) "
            f"WHERE client_id = '{first}'"
            for table in ('examples', 'client_metadata')
          ],
        ),
      )
    ]


class ShakespeareSqlite(Sqlite):
  name = 'tff_sqlite_shakespeare'
  target = 'tff/shakespeare.sqlite'
  seed = 8
  clients = ('PLAY_A_KING', 'PLAY_B_FOOL')

  def example(self, i):
    return _example(
      snippets=[f'Now is the winter {i} of our discontent'.encode()]
    )

  def wrong_examples(self):
    return [
      ('without snippets', _example(text=[b'hello'])),
      ('snippets as numbers', _example(snippets=np.array([1, 2]))),
      ('two snippets', _example(snippets=[b'a', b'b'])),
      ('no snippet', _example(snippets=np.zeros(0, np.int64))),
    ]

  def load(self, root):
    from tasks import shakespeare

    return shakespeare.load_shakespeare(str(root))

  def check(self, result):
    check_arrays(result, np.int32, (80,), (0, 89), 90, y_shape=(80,))

  def structure(self):
    rows, meta = self.rows()
    only_train = [
      r for r in rows if not (r[0] == 'test' and r[1] == self.clients[1])
    ]
    return super().structure() + [
      (
        'a client without test data',
        _sqlite(
          only_train,
          [m for m in meta if not (m[1] == 'test' and m[0] == self.clients[1])],
        ),
      )
    ]

  def values(self):
    rows, meta = self.rows()
    return super().values() + [
      (
        'snippet not UTF-8 (bytes are tokens)',
        _sqlite(
          [
            (s, c, _example(snippets=[b'caf\xe9 \xff']))
            if i == 0
            else (s, c, p)
            for i, (s, c, p) in enumerate(rows)
          ],
          meta,
        ),
        EITHER,
      ),
      (
        "client_id with a quote (TFF's query breaks)",
        _sqlite(
          [(s, "O'NEIL" if c == self.clients[0] else c, p) for s, c, p in rows],
          [("O'NEIL" if c == self.clients[0] else c, s, n) for c, s, n in meta],
        ),
      ),
    ]


class EmnistSqlite(Sqlite):
  name = 'tff_sqlite_emnist'
  target = 'tff/emnist_all.sqlite'
  seed = 9
  splits = ('all_train', 'all_test')
  clients = ('f0000_14', 'f0001_41')

  def example(self, i, pixels=None, label=None):
    rng = np.random.default_rng(i)
    return _example(
      pixels=rng.random(784).astype(np.float32) if pixels is None else pixels,
      label=np.array([i % 62 if label is None else label]),
    )

  def wrong_examples(self):
    pixels = np.random.default_rng(0).random(784).astype(np.float32)
    return [
      ('without pixels', _example(label=np.array([3]))),
      ('without label', _example(pixels=pixels)),
      ('783 pixels', _example(pixels=pixels[:-1], label=np.array([3]))),
      (
        'pixels as integers',
        _example(pixels=np.arange(784), label=np.array([3])),
      ),
      ('label as float', _example(pixels=pixels, label=np.array([3.0]))),
      ('two labels', _example(pixels=pixels, label=np.array([3, 4]))),
    ]

  def load(self, root):
    from tasks import femnist

    return femnist.load_emnist(str(root), 0), root / self.target

  def check(self, result):
    """The examples TFF's SqlClientData serves the task's clients, read
    here with sqlite3 and tf.train.Example (tf.data is slow under the test
    session's TFF runtime)."""
    import tensorflow as tf

    task, path = result
    arrays = {}
    with sqlite3.connect(path) as db:
      rows = db.execute(
        'SELECT split_name, client_id, serialized_example_proto FROM examples'
      ).fetchall()
    db.close()
    for split, name in zip(self.splits, ('train', 'test')):
      by_client = collections.defaultdict(lambda: ([], []))
      for s, client, proto in rows:
        if s == split:
          feature = tf.train.Example.FromString(proto).features.feature
          by_client[client][0].append(feature['pixels'].float_list.value)
          by_client[client][1].append(feature['label'].int64_list.value[0])
      assert sorted(by_client) == list(getattr(task, name).client_ids)
      for _, ys in by_client.values():
        assert all(0 <= y < 62 for y in ys), ys
      arrays[name] = {
        c: collections.OrderedDict(
          x=np.array(xs, np.float32).reshape(-1, 28, 28, 1),
          y=np.array(ys, np.int32),
        )
        for c, (xs, ys) in by_client.items()
      }
    check_arrays(arrays, np.float32, (28, 28, 1), (0, 1), 62)

  def values(self):
    rows, meta = self.rows()
    out = super().values()
    for label, example in (
      ('pixel nan', self.example(0, np.full(784, np.nan, np.float32))),
      ('pixel inf', self.example(0, np.full(784, np.inf, np.float32))),
      ('pixel 1e300 (inf in float32)', self.example(0, np.full(784, 1e300))),
      ('pixel 1.5', self.example(0, np.full(784, 1.5, np.float32))),
      ('pixel -0.5', self.example(0, np.full(784, -0.5, np.float32))),
      ('label 62', self.example(0, label=62)),
      ('label -1', self.example(0, label=-1)),
      ('label 2**40', self.example(0, label=2**40)),
    ):
      out.append(
        (
          label,
          _sqlite(
            [
              (s, c, example) if i == 0 else (s, c, p)
              for i, (s, c, p) in enumerate(rows)
            ],
            meta,
          ),
        )
      )
    out.append(
      (
        "client_id with a quote (TFF's query breaks)",
        _sqlite(
          [(s, "f'1" if c == self.clients[0] else c, p) for s, c, p in rows],
          [("f'1" if c == self.clients[0] else c, s, n) for c, s, n in meta],
        ),
      )
    )
    return out

  def structure(self):
    rows, meta = self.rows()
    # Other splits (TFF's digits_only_*) are not read: valid.
    return [c for c in super().structure() if c[0] != 'unknown split name'] + [
      (
        'rows of another split',
        _sqlite(
          rows + [('digits_only_train', self.clients[0], rows[0][2])],
          meta + [(self.clients[0], 'digits_only_train', 1)],
        ),
        EITHER,
      )
    ]


# ---- Shakespeare pg100 (gzip text)
PG100 = """\ufeffThe Project Gutenberg EBook of The Complete Works\r
\r
THE TRAGEDY OF TESTING\r
\r
by William Shakespeare\r
\r
ACT I. SCENE 1.\r
\r
  HAMLET. To be, or not to be:\r
    that is the question.\r
  HORATIO. My lord?\r
  HAMLET. Whether 'tis nobler in the mind\r
    to suffer the slings.\r
  HORATIO. Sweet lord, if your leisure served,\r
    I should impart a thing to you.\r
\r
End of the Project Gutenberg EBook of The Complete Works\r
"""


class Pg100(Reader):
  name = 'shakespeare_pg100'
  target = 'shakespeare/pg100.txt.gz'
  compressed = True
  seed = 10

  def files(self):
    return {self.target: _gzip(PG100.encode())}

  def load(self, root):
    from tasks import shakespeare

    return shakespeare.load_roles(str(root))

  def check(self, result):
    check_arrays(result, np.int32, (80,), (0, 89), 90, y_shape=(80,))

  def truncation_expect(self, data, offset):
    return ERROR if data[offset:].strip() else EITHER

  def structure(self):
    end = PG100.index('End of the Project')
    return [
      (name, _gzip(text.encode()))
      for name, text in (
        ('empty text', ''),
        ('no end line', PG100[:end]),
        ('no works', PG100[: PG100.index('THE TRAGEDY')] + PG100[end:]),
        (
          'no speakers',
          PG100.replace('  HAMLET. ', '  ').replace('  HORATIO. ', '  '),
        ),
        ('binary content with the end line', '\x00\x01' * 100 + PG100[end:]),
      )
    ] + [
      ('UTF-16 text', _gzip(PG100.encode('utf-16'))),
      ('not gzip', PG100.encode()),
    ]

  def values(self):
    return [
      (
        'text not UTF-8',
        _gzip(PG100.encode().replace(b'nobler', b'nob\xffler')),
      )
    ]


# ---- Sent140 CSV
def _csv(rows, quoting=csv.QUOTE_ALL, encoding='latin-1'):
  buf = io.StringIO(newline='')
  csv.writer(buf, quoting=quoting, lineterminator='\n').writerows(rows)
  return buf.getvalue().encode(encoding)


class Sent140Csv(Reader):
  name = 'sent140_csv'
  target = 'sent140/training.1600000.processed.noemoticon.csv'
  seed = 11

  def rows(self):
    rows = []
    for k, user in enumerate(('alice', 'bob', 'carol')):
      for i in range(3):
        rows.append(
          [
            '4' if (i + k) % 2 else '0',
            str(1000 + 100 * k + i),
            'Mon Apr 06 22:19:45 PDT 2009',
            'NO_QUERY',
            user,
            TWEETS[(i + k) % len(TWEETS)],
          ]
        )
    return rows

  def files(self):
    return {self.target: _csv(self.rows())}

  def load(self, root):
    from tasks import sent140

    return sent140.load(str(root), source='csv', min_tweets=2)

  def check(self, result):
    check_arrays(result, np.int32, (25,), (0, 10_000), 2)

  def truncation_expect(self, data, offset):
    return _text_truncation(data, offset)

  def structure(self):
    rows = self.rows()

    def with_row(i, row):
      return _csv(rows[:i] + [row] + rows[i + 1 :])

    return [
      ('empty file', b''),
      ('blank lines only', b'\n\n\n'),
      ('header only', b'polarity,id,date,query,user,text\n'),
      ('5 fields', with_row(4, rows[4][:5])),
      ('8 fields', with_row(4, rows[4] + ['x', 'y'])),
      ('7 fields: an extra last column', with_row(4, rows[4] + ['x'])),
      (
        'a pandas copy: index column and header line (valid)',
        _csv([[''] + rows[0]] + [[str(i)] + r for i, r in enumerate(rows)]),
        EITHER,
      ),
      (
        'tab-separated',
        b'\n'.join(b'\t'.join(c.encode() for c in r) for r in rows) + b'\n',
      ),
      ('polarity a word', with_row(4, ['positive'] + rows[4][1:])),
      ('polarity 1', with_row(4, ['1'] + rows[4][1:])),
      ('polarity empty', with_row(4, [''] + rows[4][1:])),
      ('empty user', with_row(4, rows[4][:4] + ['', rows[4][5]])),
      ('an unterminated quote', _csv(rows)[:-2] + b'\n'),
      ('a JSON file', json.dumps({'users': []}).encode() + b'\n'),
      (
        'quoted line break in a tweet (valid)',
        with_row(4, rows[4][:5] + ['two\nlines']),
        EITHER,
      ),
      ('unquoted fields (valid)', _csv(rows, csv.QUOTE_MINIMAL), EITHER),
    ]

  def values(self):
    rows = self.rows()

    def with_field(i, j, value):
      changed = [list(r) for r in rows]
      changed[i][j] = value
      return _csv(changed)

    return [
      ('polarity 4.0', with_field(4, 0, '4.0')),
      ('polarity 1e300', with_field(4, 0, '1e300')),
      ('polarity nan', with_field(4, 0, 'nan')),
      ('polarity -0', with_field(4, 0, '-0')),
      ('polarity 40', with_field(4, 0, '40')),
      (
        'text not UTF-8 (read as ISO-8859-1, the official encoding)',
        with_field(4, 5, 'caf\xe9'),
        EITHER,
      ),
      ('NUL byte in a tweet', with_field(4, 5, 'a\0b'), EITHER),
    ]


# ---- GloVe embeddings (text)
GLOVE_WORDS = ('good', 'sad', 'love', '!', 'so', 'unused')


class Glove(Reader):
  name = 'glove_txt'
  target = 'glove.txt'
  seed = 12

  def lines(self):
    rng = np.random.default_rng(0)
    return [[w] + [f'{v:.5f}' for v in rng.normal(size=4)] for w in GLOVE_WORDS]

  def encode(self, lines, end=b'\n'):
    return b''.join(' '.join(words).encode() + end for words in lines)

  def files(self):
    leaf = LeafSent140Sample()
    return {**leaf.files(), self.target: self.encode(self.lines())}

  def load(self, root):
    from tasks import sent140

    task = sent140.load(str(root), embeddings=str(root / self.target))
    train = {u: [(TWEETS[0], 1)] for u in task.train.client_ids}
    return task, sent140.build_vocabulary(train, {}, str(root / self.target))

  def check(self, result):
    task, (vocabulary, matrix) = result
    check_arrays(task, np.int32, (25,), (0, 10_000), 2)
    assert matrix.dtype == np.float32 and np.isfinite(matrix).all()
    assert matrix.shape == (len(vocabulary) + 2, 4), matrix.shape

  def truncation_expect(self, data, offset):
    return _text_truncation(data, offset)

  def structure(self):
    lines = self.lines()
    return [
      ('empty file', b''),
      ('blank lines only', b'\n\n'),
      (
        'a line with 3 values',
        self.encode(lines[:2] + [lines[2][:4]] + lines[3:]),
      ),
      (
        'a line with 5 values',
        self.encode(lines[:2] + [lines[2] + ['1']] + lines[3:]),
      ),
      (
        'a word without values',
        self.encode(lines[:2] + [lines[2][:1]] + lines[3:]),
      ),
      ('word2vec header line', self.encode([['6', '4']] + lines)),
      (
        'tab-separated',
        b''.join('\t'.join(words).encode() + b'\n' for words in lines),
      ),
      ('no word of the data', self.encode([['zzz'] + lines[0][1:]])),
      (
        'a vector value not a number',
        self.encode(
          lines[:1] + [lines[1][:2] + ['abc'] + lines[1][3:]] + lines[2:]
        ),
      ),
      ('CRLF line ends (valid)', self.encode(lines, b'\r\n'), EITHER),
      (
        'a word listed twice (valid: the first vector)',
        self.encode(lines + lines[:1]),
        EITHER,
      ),
    ]

  def values(self):
    lines = self.lines()
    out = []
    for raw in (
      '1e300',
      '-1e300',
      '3.5e38',
      '1e400',
      'nan',
      'inf',
      '-inf',
      'NaN',
      str(10**400),
    ):
      bad = [list(words) for words in lines]
      bad[0][2] = raw
      out.append((f'vector value {_short(raw)}', self.encode(bad)))
    bad = self.encode(lines).replace(b'love', b'lo\xffve')
    out.append(('word not UTF-8', bad))
    bad = self.encode(lines).replace(b'unused', b'unus\xffd')
    out.append(('unused word not UTF-8', bad))
    return out


READERS = (
  MnistImages(),
  MnistLabels(),
  CifarTar(),
  CifarPickle(),
  CifarCache(),
  LeafSynthetic(),
  LeafFemnist(),
  LeafSent140(),
  LeafSent140Sample(),
  FemnistNpz(),
  ShakespeareSqlite(),
  EmnistSqlite(),
  Pg100(),
  Sent140Csv(),
  Glove(),
)


def corpus():
  return [case for reader in READERS for case in reader.cases()]


# ----------------------------------------------------------- the promise
Outcome = collections.namedtuple('Outcome', 'kind detail')
GOOD = ('refused', 'loaded valid data')


def outcome(case, root):
  """How loading `case` went: 'refused' or 'loaded valid data' keep the
  promise; anything else is a failure of it."""
  os.environ['TFF_ALGOS_CACHE'] = str(root / 'cache')
  path = case.reader.write(root, case.data)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    try:
      result = case.reader.load(root)
    except tasks.DataError as e:
      message = str(e)
      shown = [
        w
        for w in caught
        if not issubclass(
          w.category, (DeprecationWarning, PendingDeprecationWarning)
        )
      ]
      if '\n' in message or '\r' in message:
        return Outcome('message of several lines', message)
      try:
        message.encode('utf-8')
      except UnicodeEncodeError:
        return Outcome('message not printable', repr(message))
      if str(path) not in message:
        return Outcome('message does not name the file', message)
      if e.__cause__ is not None or (
        e.__context__ is not None and not e.__suppress_context__
      ):
        return Outcome('chained exception', message)
      if shown:
        return Outcome('warning printed', str(shown[0].message))
      return Outcome('refused', message)
    except Exception as e:
      return Outcome('other exception', f'{type(e).__name__}: {e}'[:300])
  if case.expect == ERROR:
    return Outcome('loaded without an error', '')
  try:
    case.reader.check(result)
  except AssertionError as e:
    return Outcome('loaded bad data', str(e)[:300])
  shown = [
    w
    for w in caught
    if not issubclass(
      w.category, (DeprecationWarning, PendingDeprecationWarning)
    )
  ]
  if shown:
    return Outcome('warning printed', str(shown[0].message))
  return Outcome('loaded valid data', '')


CORPUS = corpus()


@pytest.mark.parametrize(
  'case', CORPUS, ids=[f'{c.reader.name}-{c.cls}-{c.name}' for c in CORPUS]
)
def test_damaged_file(case, tmp_path, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
  result = outcome(case, tmp_path)
  assert result.kind in GOOD, f'{result.kind}: {result.detail}'


@pytest.mark.fast
def test_every_reader_loads_its_valid_files(tmp_path, monkeypatch):
  """The corpus starts from valid data: each reader loads it unchanged."""
  for reader in READERS:
    monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
    root = tmp_path / reader.name
    reader.write(root, reader.valid())
    reader.check(reader.load(root))


# Readers of data with no float values to push beyond float32: uint8
# pixels (IDX) and the cache of them.
NO_VALUES_CLASS = {'mnist_idx_images', 'cifar10_cache'}


@pytest.mark.fast
def test_corpus_covers_every_class_for_every_reader():
  counts = collections.Counter((c.reader.name, c.cls) for c in CORPUS)
  for reader in READERS:
    for cls in ('truncate', 'flip', 'structure'):
      assert counts[reader.name, cls] >= 4, (reader.name, cls)
    assert (counts[reader.name, 'values'] == 0) == (
      reader.name in NO_VALUES_CLASS
    ), reader.name


def table(cases=None):
  """Markdown table of the corpus: cases per reader and class."""
  cases = CORPUS if cases is None else cases
  counts = collections.Counter((c.reader.name, c.cls) for c in cases)
  lines = [
    '| reader | ' + ' | '.join(CLASSES) + ' | all |',
    '| --- |' + ' ---: |' * (len(CLASSES) + 1),
  ]
  for reader in READERS:
    row = [counts[reader.name, cls] for cls in CLASSES]
    lines.append(
      f'| {reader.name} | ' + ' | '.join(map(str, row)) + f' | {sum(row)} |'
    )
  total = [sum(counts[r.name, cls] for r in READERS) for cls in CLASSES]
  lines.append('| all | ' + ' | '.join(map(str, total)) + f' | {sum(total)} |')
  return '\n'.join(lines)


if __name__ == '__main__':
  sys.stdout.write(table() + '\n')
