"""The one place where dataset files are checked: schemas and a validator.

Each reader in tasks/ parses its file with the format's own library (json,
pickle, numpy, sqlite3, ...) and hands what it got to ONE `check(value,
SCHEMA, where)` call with the schema of that format, declared next to the
reader from the pieces below. Whatever is wrong becomes one
`tasks.DataError`, a single line naming the file, the place in it and what
is wrong, e.g.

  .../train/data.json: user 'f_00001': x: sample 3 has 1e+300, beyond
  float32's range (±3.4e+38)

Pieces: `Str`, `Int`, `ListOf`, `MapOf` (a dict of like entries: users →
data), `Record` (a dict of named fields, with `rules` relating them), and
the vectorised leaves `Numbers` (a table of numbers → a float32 array),
`Labels` (whole numbers 0..n-1 → int32) and `Array` (a numpy array of the
right dtype, rank and range). `check` returns the value with every leaf
converted, so nothing is converted again (or silently overflowed) later.
Line- and byte-oriented formats (IDX, tar members, CSV and GloVe lines,
pg100 text) are checked in their one reader function, with `fail` and
`check` for the same one-line errors; TFF's SQLite files in
`tasks/tff_sqlite.py`.
"""

import itertools
import operator

import numpy as np

from tasks import DataError

FLOAT32_MAX = float(np.finfo(np.float32).max)


class Problem(Exception):
  """Something wrong at `path` inside a value (raised while checking).

  Schemas raise it with the path relative to themselves; the containers
  above prefix their part while it propagates (nothing is built when all
  is well). An `anchored` path (a map entry, "user 'u'") names its place on
  its own: the containers above leave it as it is."""

  def __init__(self, path, message, anchored=False, index=None):
    super().__init__(message)
    self.path, self.message, self.anchored = tuple(path), message, anchored
    self.index = index  # In a column check: the position of the bad value.

  def under(self, head):
    """This problem seen from the container holding it under `head`."""
    if self.anchored:
      return self
    if self.path and self.path[0].startswith('['):  # users + [3]: users[3]
      path = (head + self.path[0],) + self.path[1:]
    else:
      path = (head,) + self.path
    return Problem(path, self.message, index=self.index)


def fail(where, message):
  """The DataError for `where` (a file): one line, printable (line breaks
  become spaces, undecodable bytes of names \\x escapes)."""
  text = ' '.join(f'{where}: {message}'.splitlines())
  return DataError(text.encode('utf-8', 'backslashreplace').decode('utf-8'))


def check(value, schema, where):
  """`value` checked against `schema`, leaves converted; DataError naming
  `where` (the file) and the place in it otherwise."""
  try:
    return schema.validate(value)
  except Problem as problem:
    place = ': '.join(problem.path)
    raise fail(
      where, f'{place}: {problem.message}' if place else problem.message
    ) from None


def describe(value):
  """'a string ('0.5')', 'null', 'a list', ...: what a wrong value is."""
  if value is None:
    return 'null'
  if isinstance(value, bool):
    return f'{str(value).lower()} (a boolean)'
  if isinstance(value, str):
    return f'a string ({value[:20]!r})'
  if isinstance(value, (float, np.floating)):
    return f'{value:.6g} (a float)'
  if isinstance(value, (int, np.integer)):
    digits = len(str(abs(int(value))))
    return str(value) if digits < 16 else f'a {digits}-digit integer'
  if isinstance(value, np.ndarray):
    return f'an array of {value.dtype} {value.shape}'
  name = {dict: 'a map', list: 'a list', bytes: 'bytes'}.get(type(value))
  return name or f'a {type(value).__name__}'


class Schema:
  """What a value must be; `validate` returns it (converted) or raises a
  Problem."""

  what = 'a value'

  def validate(self, value):
    raise NotImplementedError

  def valid_as_is(self, values):
    """True if every one of `values` is valid and `validate` would return it
    unchanged: a cheap bulk test (C loops) letting a list skip checking its
    items one by one; False means only 'check them one by one'."""
    del values
    return False

  def validate_column(self, values):
    """[validate(v) for v in values] (a map's entries: a user's data), in
    bulk where a schema can; a Problem raised has `index`, the position of
    the bad value."""
    out = []
    try:
      for v in values:
        out.append(self.validate(v))
    except Problem as problem:
      problem.index = len(out)
      raise
    return out

  def wrong(self, value):
    return Problem((), f'is {describe(value)}, expected {self.what}')


class Unchecked(Schema):
  """Any value, as it is (what a reader checks later, or not at all)."""

  def validate(self, value):
    return value

  def valid_as_is(self, values):
    return True


class Str(Schema):
  what = 'a string'

  def validate(self, value):
    if not isinstance(value, str):
      raise self.wrong(value)
    return value

  def valid_as_is(self, values):
    return set(map(type, values)) <= {str}


class Int(Schema):
  """A whole number (not a boolean, not a float) >= lo."""

  def __init__(self, lo=None):
    self.lo = lo
    self.what = 'a whole number' + ('' if lo is None else f' >= {lo}')

  def validate(self, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise self.wrong(value)
    if self.lo is not None and value < self.lo:
      raise Problem((), f'is {value}, expected >= {self.lo}')
    return int(value)

  def valid_as_is(self, values):
    return set(map(type, values)) <= {int} and (
      self.lo is None or min(values, default=self.lo) >= self.lo
    )


class ListOf(Schema):
  """A list of `item`s; `name` labels an item in messages ('sample 3',
  else 'users[3]')."""

  def __init__(self, item, min_len=0, unique=False, name=None, what='a list'):
    self.item, self.min_len, self.unique, self.name = (
      item,
      min_len,
      unique,
      name,
    )
    self.what = what

  def valid_as_is(self, values):
    if self.unique or not set(map(type, values)) <= {list}:
      return False
    if self.min_len and min(map(len, values), default=self.min_len) < (
      self.min_len
    ):
      return False
    items = itertools.chain.from_iterable(values)
    return self.item.valid_as_is(
      list(items) if isinstance(self.item, ListOf) else items
    )

  def validate_column(self, values):
    if self.valid_as_is(values):
      return list(values)
    return super().validate_column(values)

  def validate(self, value):
    if not isinstance(value, list):
      raise self.wrong(value)
    if len(value) < self.min_len:
      raise Problem(
        (),
        'is empty'
        if not value
        else f'has {len(value)} items, expected at least {self.min_len}',
      )
    if self.item.valid_as_is(value):
      out = value  # Nothing to convert, nothing wrong.
    else:
      out = []
      try:
        for v in value:
          out.append(self.item.validate(v))
      except Problem as problem:
        i = len(out)
        raise problem.under(
          f'{self.name} {i}' if self.name else f'[{i}]'
        ) from None
    if self.unique and len(set(out)) != len(out):
      seen = set()
      twice = next(v for v in out if v in seen or seen.add(v))
      raise Problem((), f'lists {twice!r} twice')
    return out


class MapOf(Schema):
  """A dict of like entries (keys `key`, values `value`): in messages an
  entry is '<name> <key>' on its own (e.g. "user 'f_00001'", not
  "user_data: user 'f_00001'")."""

  def __init__(self, value, key=Str(), name='entry'):
    self.value, self.key, self.name = value, key, name
    self.what = f'a map of {name}s'

  def validate(self, value):
    if not isinstance(value, dict):
      raise self.wrong(value)
    keys = list(value)
    try:
      if not self.key.valid_as_is(keys):
        for i, k in enumerate(keys):  # noqa: B007 (the except clause reads i)
          self.key.validate(k)
      i = None
      values = self.value.validate_column(list(value.values()))
    except Problem as problem:
      k = keys[problem.index if i is None else i]
      raise Problem(
        (f'{self.name} {k!r}',) + problem.path, problem.message, anchored=True
      ) from None
    return dict(zip(keys, values))


class Record(Schema):
  """A dict with the fields `fields` (extra keys are allowed and dropped):
  a dict of the converted fields, or with `as_tuple` a tuple of them in the
  order of `fields`. `rules` are functions of that converted record
  returning a problem (a string, or (place, string)) or None, checked once
  the fields are."""

  def __init__(self, fields, rules=(), what=None, as_tuple=False):
    self.fields, self.rules, self.as_tuple = fields, rules, as_tuple
    self.what = what or 'a map with ' + ', '.join(_key(k) for k in fields)

  def validate_column(self, values):
    if not set(map(type, values)) <= {dict}:
      return super().validate_column(values)  # Finds the first bad one.
    columns = []
    for k, schema in self.fields.items():
      try:
        column = list(map(operator.itemgetter(k), values))
      except KeyError:  # A record without k.
        return super().validate_column(values)
      try:
        columns.append(schema.validate_column(column))
      except Problem as problem:
        raise problem.under(_key(k)) from None
    keys = list(self.fields)
    out = (
      list(zip(*columns))
      if self.as_tuple
      else [dict(zip(keys, row)) for row in zip(*columns)]
    )
    for rule in self.rules:
      for i, record in enumerate(out):
        problem = rule(record)
        if problem:
          raise self._problem(problem, i)
    return out

  @staticmethod
  def _problem(problem, index=None):
    place, message = problem if isinstance(problem, tuple) else ((), problem)
    return Problem(place, message, index=index)

  def validate(self, value):
    if not isinstance(value, dict):
      raise self.wrong(value)
    out = {}
    for k, schema in self.fields.items():
      if k not in value:
        missing = [_key(k) for k in self.fields if k not in value]
        raise Problem((), f'has no {", ".join(missing)}')
      try:
        out[k] = schema.validate(value[k])
      except Problem as problem:
        raise problem.under(_key(k)) from None
    if self.as_tuple:
      out = tuple(out.values())
    for rule in self.rules:
      problem = rule(out)
      if problem:
        raise self._problem(problem)
    return out


def _key(k):
  return k.decode('ascii', 'replace') if isinstance(k, bytes) else str(k)


def _exactly(value, types):
  """type(value) is one of `types` (a bool, an int subclass, is not)."""
  return type(value) in types


def _first(mask):
  return int(np.flatnonzero(mask)[0])


def _index(mask):
  """The first True place of `mask`: an int for 1-D, else a tuple."""
  place = tuple(int(k) for k in np.argwhere(mask)[0])
  return place[0] if len(place) == 1 else place


class Numbers(Schema):
  """A list of samples, each a list of `width` numbers: a float32 array
  [n, width]. Every value must be a JSON number (not a string, boolean or
  null), finite in float32 (1e300 is finite in float64 only) and within
  [lo, hi] where given."""

  def __init__(self, width, lo=None, hi=None, name='sample', min_len=1):
    self.width, self.lo, self.hi, self.name = width, lo, hi, name
    self.min_len = min_len
    self.what = f'a list of {name}s of {width} numbers'

  def validate(self, value):
    if not isinstance(value, list):
      raise self.wrong(value)
    if len(value) < self.min_len:
      raise Problem((), f'has no {self.name}s')
    for i, row in enumerate(value):
      if not _exactly(row, (list,)):
        raise Problem(
          (),
          f'{self.name} {i} is {describe(row)}, expected '
          f'a list of {self.width} numbers',
        )
    if not set(map(type, itertools.chain.from_iterable(value))) <= {int, float}:
      for i, row in enumerate(value):
        for v in row:
          if not _exactly(v, (int, float)):
            raise Problem(
              (), f'{self.name} {i} holds {describe(v)}, expected numbers'
            )
    lengths = np.fromiter(map(len, value), np.int64, len(value))
    if (lengths != self.width).any():
      i = _first(lengths != self.width)
      raise Problem(
        (), f'{self.name} {i} has {lengths[i]} values, expected {self.width}'
      )
    try:
      rows = np.array(value, np.float64)
    except OverflowError:  # An integer beyond float64 (10**400).
      i = next(
        i
        for i, row in enumerate(value)
        if any(_exactly(v, (int,)) and abs(v) > FLOAT32_MAX for v in row)
      )
      raise Problem(
        (),
        f'{self.name} {i} has an integer beyond '
        f"float32's range (±{FLOAT32_MAX:.2g})",
      ) from None
    finite = np.isfinite(rows) & (np.abs(rows) <= FLOAT32_MAX)
    if not finite.all():
      i, j = np.argwhere(~finite)[0]
      raise Problem(
        (),
        f'{self.name} {i} has {rows[i, j]:g}, '
        + (
          'not a finite number'
          if not np.isfinite(rows[i, j])
          else f"beyond float32's range (±{FLOAT32_MAX:.2g})"
        ),
      )
    outside = np.zeros(rows.shape, bool)
    if self.lo is not None:
      outside |= rows < self.lo
    if self.hi is not None:
      outside |= rows > self.hi
    if outside.any():
      i, j = np.argwhere(outside)[0]
      raise Problem(
        (),
        f'{self.name} {i} has {rows[i, j]:g}, outside [{self.lo}, {self.hi}]',
      )
    return rows.astype(np.float32)


class Labels(Schema):
  """A list (or integer array) of labels, the whole numbers
  0..num_classes-1: an int32 array (`as_list`: a list of ints). `floats`:
  whole-valued floats (1.0) pass too (LEAF JSON files written by numpy code
  hold them)."""

  def __init__(
    self, num_classes, floats=True, name='sample', min_len=1, as_list=False
  ):
    self.num_classes, self.floats, self.name = num_classes, floats, name
    self.min_len, self.as_list = min_len, as_list
    self.what = f'a list of labels 0..{num_classes - 1}'

  def validate_column(self, values):
    """All the lists' labels checked at once when they are plain ints."""
    if set(map(type, values)) <= {list} and (
      not values or min(map(len, values)) >= self.min_len
    ):
      flat = list(itertools.chain.from_iterable(values))
      if set(map(type, flat)) <= {int} and (
        not flat or (min(flat) >= 0 and max(flat) < self.num_classes)
      ):
        if self.as_list:
          return list(values)  # Valid as they are.
        array = np.array(flat, np.int32)
        ends = list(itertools.accumulate(map(len, values)))
        return [array[a:b] for a, b in zip([0] + ends[:-1], ends)]
    return super().validate_column(values)  # Finds the first bad one.

  def validate(self, value):
    if isinstance(value, np.ndarray):
      if value.ndim != 1 or value.dtype.kind not in 'iu':
        raise self.wrong(value)
      array = value.astype(np.float64)
    else:
      if not isinstance(value, list):
        raise self.wrong(value)
      allowed = (int, float) if self.floats else (int,)
      n = self.num_classes
      if (
        len(value) >= self.min_len
        and set(map(type, value)) == {int}
        and (min(value) >= 0 and max(value) < n)
      ):  # The common case.
        return list(value) if self.as_list else np.array(value, np.int32)
      wrong = None
      if not set(map(type, value)) <= set(allowed):
        wrong = next(i for i, v in enumerate(value) if not _exactly(v, allowed))
      else:
        try:
          array = np.array(value, np.float64)
        except OverflowError:  # An integer beyond float64 (10**400).
          wrong = next(i for i, v in enumerate(value) if abs(v) > 2**64)
      if wrong is not None:
        raise Problem(
          (),
          f'{self.name} {wrong} has label '
          f'{describe(value[wrong])}; labels are the whole '
          f'numbers 0..{self.num_classes - 1}',
        )
    if len(array) < self.min_len:
      raise Problem((), f'has no {self.name}s')
    bad = (
      ~np.isfinite(array)
      | (array != np.round(array))
      | (array < 0)
      | (array >= self.num_classes)
    )
    if bad.any():
      i = _first(bad)
      raise Problem(
        (),
        f'{self.name} {i} has label {array[i]:g}; labels '
        f'are the whole numbers 0..{self.num_classes - 1}',
      )
    return (
      array.astype(np.int32).tolist()
      if self.as_list
      else (array.astype(np.int32))
    )


_KINDS = {
  'u': 'integers',
  'i': 'integers',
  'iu': 'integers',
  'f': 'floats',
  'U': 'strings',
}


class Array(Schema):
  """A numpy array: dtype kind in `kinds` ('iu' integers, 'f' floats, 'U'
  strings), shape `shape` (None: any length; its first entry None: any
  number of rows, at least `min_len`), values in [lo, hi] (finite for
  floats)."""

  def __init__(self, kinds, shape, lo=None, hi=None, min_len=1, what=None):
    self.kinds, self.shape, self.lo, self.hi = kinds, tuple(shape), lo, hi
    self.min_len = min_len
    self.what = what or (
      f'an array of {_KINDS[kinds]} of shape '
      f'({", ".join("N" if d is None else str(d) for d in shape)}'
      + (',)' if len(shape) == 1 else ')')
    )

  def validate(self, value):
    if (
      not isinstance(value, np.ndarray)
      or value.dtype.kind not in (self.kinds)
      or value.ndim != len(self.shape)
      or any(d is not None and d != s for d, s in zip(self.shape, value.shape))
    ):
      raise self.wrong(value)
    if len(value) < self.min_len:
      raise Problem((), 'is empty')
    if value.dtype.kind in 'iuf' and value.size:
      if value.dtype.kind == 'f' and not np.isfinite(value).all():
        i = _index(~np.isfinite(value))
        raise Problem((), f'item {i} is {value[i]:g}, not a finite number')
      full = (
        value.dtype.kind in 'iu'
        and (self.lo is None or np.iinfo(value.dtype).min >= self.lo)
        and (self.hi is None or np.iinfo(value.dtype).max <= self.hi)
      )
      if not full:  # Values the dtype allows may be out of range.
        if self.lo is not None and value.min() < self.lo:
          i = _index(value < self.lo)
        elif self.hi is not None and value.max() > self.hi:
          i = _index(value > self.hi)
        else:
          return value
        raise Problem(
          (),
          f'item {i} is {value[i]:g}, expected '
          + (
            f'{self.lo}..{self.hi}' if self.hi is not None else f'>= {self.lo}'
          ),
        )
    return value
