"""Reader for LEAF-format federated JSON (LEAF, the FedProx code, FedJAX).

A LEAF dataset folder has `train/` and `test/` sub-folders of `*.json` files,
each `{"users": [...], "num_samples": [...],
       "user_data": {user: {"x": [...], "y": [...]}}}`.
"""

import collections
import glob
import json
import os

from tasks import DataError


def read_leaf_file(path):
  """{user: (x list, y list)} from one LEAF JSON file, validated."""
  try:
    with open(path, encoding='utf-8') as f:
      content = json.load(f)
  except (OSError, ValueError) as e:
    raise DataError(f'{path}: not a readable LEAF JSON file ({e})') from None
  if not isinstance(content, dict) or not {'users', 'user_data'} <= set(
      content):
    raise DataError(f'{path}: missing "users"/"user_data" (not LEAF format)')
  users = content['users']
  counts = content.get('num_samples', [None] * len(users))
  result = collections.OrderedDict()
  for user, count in zip(users, counts):
    data = content['user_data'].get(user)
    if data is None or 'x' not in data or 'y' not in data:
      raise DataError(f'{path}: user {user!r} has no x/y data')
    if len(data['x']) != len(data['y']) or (
        count is not None and count != len(data['y'])):
      raise DataError(
          f'{path}: user {user!r} has {len(data["x"])} x, {len(data["y"])} '
          f'y and num_samples {count} (truncated or corrupt file?)')
    result[user] = (data['x'], data['y'])
  return result


class LeafSplit(collections.OrderedDict):
  """{user: (x list, y list)}, and `sources`: {user: the file it came from}."""

  def __init__(self):
    super().__init__()
    self.sources = {}


def read_leaf_split(folder):
  """Merges every `*.json` in `folder`; a user may not appear twice."""
  paths = sorted(glob.glob(os.path.join(folder, '*.json')))
  if not paths:
    raise DataError(f'no LEAF *.json files in {folder}')
  merged = LeafSplit()
  for path in paths:
    for user, data in read_leaf_file(path).items():
      if user in merged:
        raise DataError(f'{path}: user {user!r} appears in two files')
      merged[user] = data
      merged.sources[user] = path
  return merged


def read_leaf_dataset(data_dir, x_shape, num_classes):
  """(train, test): {user: OrderedDict(x=float32 array, y=int32 array)},
  the same users, every user's data checked (`base.checked_arrays`)."""
  from tasks import base  # pylint: disable=g-import-not-at-top
  splits = []
  for split in ('train', 'test'):
    raw = read_leaf_split(os.path.join(data_dir, split))
    splits.append(collections.OrderedDict(
        (user, base.checked_arrays(x, y, f'{raw.sources[user]}: user {user!r}',
                                   x_shape, num_classes))
        for user, (x, y) in raw.items()))
  train, test = splits
  if set(train) != set(test):
    raise DataError(f'{data_dir}: train and test hold different users')
  return train, collections.OrderedDict((u, test[u]) for u in train)
