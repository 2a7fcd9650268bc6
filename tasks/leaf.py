"""Reader for LEAF-format federated JSON (LEAF, the FedProx code, FedJAX).

A LEAF dataset folder has `train/` and `test/` sub-folders of `*.json` files,
each `{"users": [...], "num_samples": [...],
       "user_data": {user: {"x": [...], "y": [...]}}}`.
Each file is checked once, against `file_schema(x, y)` (`tasks.validate`)
with the schemas of x and y of the task reading it (e.g. rows of 60 float32
numbers and labels 0..9 for Synthetic), which also converts them.
"""

import collections
import glob
import json
import operator
import os

from tasks import validate
from tasks.validate import Int
from tasks.validate import ListOf
from tasks.validate import MapOf
from tasks.validate import Record
from tasks.validate import Str
from tasks.validate import Unchecked


def _users_agree(content):
  """users, num_samples and user_data describe the same users."""
  users, counts, data = (
    content['users'],
    content['num_samples'],
    content['user_data'],
  )
  if not users:
    return ('users',), 'is empty: the file holds no users'
  if len(counts) != len(users):
    return ('num_samples',), (
      f'has {len(counts)} counts for {len(users)} users'
    )
  listed = set(users)
  if listed != data.keys():
    for user in users:
      if user not in data:
        return (), f'user {user!r} is listed in users but has no user_data'
    user = next(u for u in data if u not in listed)
    return ('user_data',), f'has user {user!r}, not listed in users'
  samples = list(map(data.__getitem__, users))  # (x, y) of each user
  xs, sizes = (
    list(map(len, map(operator.itemgetter(k), samples))) for k in (0, 1)
  )
  if xs != sizes:
    user, x, y = next((u, a, b) for u, a, b in zip(users, xs, sizes) if a != b)
    return (
      (f'user {user!r}',),
      f'{x} x but {y} y (truncated or corrupt file?)',
    )
  if sizes != counts:
    user, size, count = next(
      (u, a, b) for u, a, b in zip(users, sizes, counts) if a != b
    )
    return (
      (f'user {user!r}',),
      f'has {size} samples, num_samples says '
      f'{count} (truncated or corrupt file?)',
    )
  return None


def file_schema(x=ListOf(Unchecked()), y=ListOf(Unchecked())):
  """The schema of one LEAF JSON file whose samples are `x` and `y`."""
  samples = Record({'x': x, 'y': y}, as_tuple=True)  # (x, y)
  return Record(
    {
      'users': ListOf(Str(), unique=True, what='a list of user names'),
      'num_samples': ListOf(Int(lo=0), what='a list of counts'),
      'user_data': MapOf(samples, name='user'),
    },
    rules=[_users_agree],
  )


def read_leaf_file(path, x=ListOf(Unchecked()), y=ListOf(Unchecked())):
  """{user: (x, y)} from one LEAF JSON file, checked against
  `file_schema(x, y)` (x, y as that schema converts them: lists by
  default)."""
  try:
    with open(path, 'rb') as f:
      raw = f.read()
    content = json.loads(raw.decode('utf-8'))
  except OSError as e:
    raise validate.fail(path, f'cannot read it ({e.strerror})') from None
  except (ValueError, RecursionError) as e:  # Not UTF-8, not JSON, too deep.
    reason = 'nested too deeply' if isinstance(e, RecursionError) else e
    raise validate.fail(
      path, f'not a readable LEAF JSON file ({reason}); truncated or corrupt?'
    ) from None
  content = validate.check(content, file_schema(x, y), path)
  data = content['user_data']
  return collections.OrderedDict(
    (user, data[user]) for user in content['users']
  )


class LeafSplit(collections.OrderedDict):
  """{user: (x, y)}, `sources`: {user: the file it came from}, `folder`."""

  def __init__(self, folder=''):
    super().__init__()
    self.sources = {}
    self.folder = folder


def read_leaf_split(folder, x=ListOf(Unchecked()), y=ListOf(Unchecked())):
  """Merges every `*.json` in `folder`; a user may not appear twice."""
  paths = sorted(glob.glob(os.path.join(folder, '*.json')))
  if not paths:
    raise validate.fail(folder, 'no LEAF *.json files in it')
  merged = LeafSplit(folder)
  for path in paths:
    for user, data in read_leaf_file(path, x, y).items():
      if user in merged:
        raise validate.fail(
          path,
          f'user {user!r} appears in two files '
          f'(also in {merged.sources[user]})',
        )
      merged[user] = data
      merged.sources[user] = path
  return merged


def pair_users(train, test):
  """(train, test) LeafSplits with the same users, test in train's order;
  DataError naming the file of a user that is in one split only."""
  for user in train:
    if user not in test:
      raise validate.fail(
        train.sources[user], f'user {user!r} has no test data in {test.folder}'
      )
  for user in test:
    if user not in train:
      raise validate.fail(
        test.sources[user],
        f'user {user!r} has no training data in {train.folder}',
      )
  ordered = LeafSplit(test.folder)
  for user in train:
    ordered[user] = test[user]
    ordered.sources[user] = test.sources[user]
  return train, ordered


def read_leaf_pair(data_dir, x, y):
  """(train, test) of `read_leaf_split` on data_dir/train and data_dir/test
  (`x`, `y`: their validators), the same users (`pair_users`)."""
  return pair_users(
    *(
      read_leaf_split(os.path.join(data_dir, split), x, y)
      for split in ('train', 'test')
    )
  )


def read_leaf_dataset(data_dir, x_shape, num_classes, lo=None, hi=None):
  """(train, test): {user: OrderedDict(x=float32 array, y=int32 array)},
  the same users; x rows of shape `x_shape`, finite float32 in [lo, hi],
  y whole numbers 0..num_classes-1 (checked while reading)."""
  (width,) = x_shape
  x, y = validate.Numbers(width, lo, hi), validate.Labels(num_classes)
  train, test = read_leaf_pair(data_dir, x, y)
  return tuple(
    collections.OrderedDict(
      (user, collections.OrderedDict(x=a, y=b))
      for user, (a, b) in split.items()
    )
    for split in (train, test)
  )
