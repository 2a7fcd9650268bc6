"""Reader for TFF's `SqlClientData` files (Shakespeare, EMNIST), checked.

Such a file holds two tables: `examples` (split_name, client_id,
serialized_example_proto: a serialized `tf.train.Example`) and
`client_metadata` (client_id, split_name, num_examples). `read` checks, for
the splits a task uses, in one pass over the file:

- the file is whole (not shorter than its header's page count × page size)
  and both tables have their columns;
- every metadata row names a client (a non-empty string without a quote,
  which TFF's per-client SQL query cannot hold) with a whole number >= 1 of
  examples, once per split;
- every example belongs to a listed client, and each client has exactly
  the examples its metadata counts;
- every example is a `tf.train.Example` holding the task's `features`
  (kind, number of values), with finite float values and every value in
  the feature's range.

Rows of other splits (EMNIST's digits_only_*) are not read. Anything wrong
is one `tasks.DataError` naming the file, the client and what is wrong.
"""

import collections
import contextlib
import os
import pathlib
import sqlite3

import numpy as np

from tasks import validate

# A feature of the examples: 'bytes', 'float' or 'int' values of `shape`,
# within [lo, hi] (floats must also be finite).
Feature = collections.namedtuple(
  'Feature', 'kind shape lo hi', defaults=((), None, None)
)
COLUMNS = {
  'examples': ('split_name', 'client_id', 'serialized_example_proto'),
  'client_metadata': ('client_id', 'split_name', 'num_examples'),
}
BATCH = 4096
_LISTS = {'bytes': 'bytes_list', 'float': 'float_list', 'int': 'int64_list'}


def read(path, splits, features, keep=True):
  """{split: {client: {feature: array}}} (clients sorted), every example
  checked (see the module doc); with `keep=False` only checks and returns
  {split: {client: number of examples}}."""
  uri = pathlib.Path(path).absolute().as_uri() + '?mode=ro'
  try:
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
      _check_file(db, path)
      metadata = _metadata(db, path, splits)
      return _examples(db, path, splits, features, metadata, keep)
  except sqlite3.Error as e:
    raise validate.fail(
      path, f'not a readable TFF SQLite file ({e}); truncated or corrupt?'
    ) from None


def _check_file(db, path):
  page_size = db.execute('PRAGMA page_size').fetchone()[0]
  pages = db.execute('PRAGMA page_count').fetchone()[0]
  size = os.path.getsize(path)
  if size < page_size * pages:
    raise validate.fail(
      path,
      f'{size} bytes, but its header says {pages} '
      f'pages of {page_size} bytes: the file is truncated',
    )
  for table, columns in COLUMNS.items():
    found = {row[1] for row in db.execute(f'PRAGMA table_info({table})')}
    if not found:
      raise validate.fail(
        path, f'has no table {table!r} (not a TFF SqlClientData file)'
      )
    missing = [c for c in columns if c not in found]
    if missing:
      raise validate.fail(
        path, f'table {table!r} has no column {", ".join(missing)}'
      )


def _client_problem(client):
  if not isinstance(client, str) or not client:
    return (
      f'client id {validate.describe(client)} (expected a non-empty string)'
    )
  if "'" in client:
    return (
      f"client id {client!r} holds a quote, which TFF's per-client query cannot"
    )
  return None


def _metadata(db, path, splits):
  """{(client, split): num_examples} of `splits`, checked."""
  marks = ', '.join('?' * len(splits))
  metadata = {}
  for client, split, count in db.execute(
    'SELECT client_id, split_name, num_examples FROM client_metadata '
    f'WHERE split_name IN ({marks})',
    splits,
  ):
    problem = _client_problem(client)
    if problem:
      raise validate.fail(path, f'client_metadata: {problem}')
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
      raise validate.fail(
        path,
        f'client_metadata: client {client!r} '
        f'({split}) has num_examples '
        f'{validate.describe(count)}, expected a whole '
        'number >= 1',
      )
    if (client, split) in metadata:
      raise validate.fail(
        path, f'client_metadata lists client {client!r} ({split}) twice'
      )
    metadata[client, split] = count
  if not metadata:
    raise validate.fail(
      path, f'client_metadata lists no client of the splits {", ".join(splits)}'
    )
  return metadata


def _explain(proto, features):
  """Why one serialized example does not parse as `features`."""
  import tensorflow as tf

  try:
    example = tf.train.Example.FromString(proto)
  except Exception:  # protobuf's DecodeError.
    return 'that is not a serialized tf.train.Example'
  for name, feature in features.items():
    if name not in example.features.feature:
      return f'without the feature {name!r}'
    value = example.features.feature[name]
    kind = value.WhichOneof('kind')
    if kind != _LISTS[feature.kind]:
      return (
        f'whose feature {name!r} is {kind or "empty"}, expected '
        f'{_LISTS[feature.kind]}'
      )
    size = int(np.prod(feature.shape))
    if len(getattr(value, kind).value) != size:
      return (
        f'whose feature {name!r} has {len(getattr(value, kind).value)} '
        f'values, expected {size}'
      )
  return 'that cannot be parsed'


def _parse(protos, features):
  """{feature: array} of serialized examples, or None if one is wrong."""
  import tensorflow as tf

  dtypes = {'bytes': tf.string, 'float': tf.float32, 'int': tf.int64}
  spec = {
    name: tf.io.FixedLenFeature(f.shape, dtypes[f.kind])
    for name, f in features.items()
  }
  try:
    parsed = tf.io.parse_example(tf.constant(protos, tf.string), spec)
  except (tf.errors.InvalidArgumentError, ValueError):
    return None
  return {name: value.numpy() for name, value in parsed.items()}


def _value_problem(name, feature, values):
  """(row, message) of the first out-of-range value of a batch, or None."""
  if feature.kind == 'bytes':
    return None
  rows = values.reshape(len(values), -1)
  bad = np.zeros(rows.shape, bool)
  if feature.kind == 'float':
    bad |= ~np.isfinite(rows)
  if feature.lo is not None:
    bad |= rows < feature.lo
  if feature.hi is not None:
    bad |= rows > feature.hi
  if not bad.any():
    return None
  i, j = np.argwhere(bad)[0]
  wanted = [] if feature.kind != 'float' else ['finite']
  if feature.lo is not None or feature.hi is not None:
    wanted.append(f'in [{feature.lo}, {feature.hi}]')
  return i, (
    f'feature {name!r} has {rows[i, j]:g}, expected values '
    f'{" and ".join(wanted)}'
  )


def _examples(db, path, splits, features, metadata, keep):
  marks = ', '.join('?' * len(splits))
  cursor = db.execute(
    'SELECT split_name, client_id, serialized_example_proto FROM examples '
    f'WHERE split_name IN ({marks})',
    splits,
  )
  counts = collections.Counter()
  rows_of = collections.defaultdict(lambda: collections.defaultdict(list))
  chunks = {name: [] for name in features}
  total = 0
  while True:
    rows = cursor.fetchmany(BATCH)
    if not rows:
      break
    for split, client, proto in rows:
      if (client, split) not in metadata:
        problem = _client_problem(client)
        raise validate.fail(
          path,
          f'examples: {problem}'
          if problem
          else f'examples: client {client!r} ({split}) is not '
          'in client_metadata',
        )
      if not isinstance(proto, bytes):
        raise validate.fail(
          path,
          f'examples: client {client!r} ({split}) '
          f'has an example that is '
          f'{validate.describe(proto)}, not a serialized '
          'tf.train.Example',
        )
    parsed = _parse([proto for _, _, proto in rows], features)
    if parsed is None:
      for split, client, proto in rows:
        if _parse([proto], features) is None:
          raise validate.fail(
            path,
            f'examples: client {client!r} ({split}) '
            f'has an example {_explain(proto, features)}',
          )
      raise validate.fail(path, 'examples cannot be parsed')
    for name, feature in features.items():
      problem = _value_problem(name, feature, parsed[name])
      if problem:
        i, message = problem
        raise validate.fail(
          path, f'examples: client {rows[i][1]!r} ({rows[i][0]}): {message}'
        )
    for i, (split, client, _) in enumerate(rows):
      counts[client, split] += 1
      if keep:
        rows_of[split][client].append(total + i)
    if keep:
      for name in features:
        chunks[name].append(parsed[name])
    total += len(rows)
  for (client, split), count in sorted(metadata.items()):
    if counts[client, split] != count:
      raise validate.fail(
        path,
        f'client {client!r} ({split}) has {counts[client, split]} '
        f'examples, client_metadata says {count}: the file is truncated '
        'or corrupt',
      )
  if not keep:
    return {
      split: {c: n for (c, s), n in sorted(counts.items()) if s == split}
      for split in splits
    }
  arrays = {name: np.concatenate(chunks[name]) for name in features}
  return {
    split: collections.OrderedDict(
      (client, {name: arrays[name][rows] for name in features})
      for client, rows in sorted(rows_of[split].items())
    )
    for split in splits
  }
