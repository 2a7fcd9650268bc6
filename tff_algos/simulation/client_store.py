"""The clients' training data on disk, read where the clients train.

A run whose clients train per client (a TFF call each) would otherwise
serialize every selected client's examples and send them to the TFF worker
each round. With a `ClientStore` each round sends a client's path and
schedule (`learning.StoredInput`), and the client work reads its data in
the worker, from files this module writes once:

    <runtime.cache_folder()>/client_data/<sha256>/<client index>.<i>

the i-th tensor of the client's data (in `tf.nest.flatten` order, the
order of the model's input_spec) as a serialized `TensorProto`, which
TensorFlow's `parse_tensor` reads back bit for bit. The folder is named by
the SHA-256 of its files' names and bytes, so it holds exactly those data:
a store is reused by every run on the same data, and any other data get a
folder of their own. It is written into a temporary folder renamed into
place, so a reader never sees a partial store. A run trusts no byte of it
unchecked: it reads the folder back and compares its digest with the
folder's name (`benchmarks/client_store.py` times it), and writes again
each file that is missing or differs, saying so in one line. A worker on another
machine reads the same path, which must therefore hold the same folder
there (docs/guide/remote-workers.md); before the first round each remote
worker reads its copy and returns each file's size and keyed hash
(`runtime.remote.keyed_digest`, under a key of the run's), which must be
those of this machine's data (`ClientStore.check_remote_workers`): a
missing, truncated or changed file stops the run with one line naming the
worker and the file. A file changed while a run is under way is not seen.

The folders of the last `KEPT` data sets used stay, and so does every
folder used within `IN_USE_S` (a run marks its folder used as it opens it
and every round, `ClientStore.touch`); older ones are deleted when a run
opens a store, as are partial folders that old (a killed writer's).
"""

import contextlib
import dataclasses
import errno
import hashlib
import os
import secrets
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from tff_algos import runtime

FOLDER = 'client_data'
KEPT = 8
IN_USE_S = 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class ClientStore:
  """The files of every client's data (`folder`, absolute; `files`, their
  names)."""

  folder: str
  files: frozenset[str]

  def path(self, client: int) -> str:
    """The common prefix of client `client`'s files."""
    return os.path.join(self.folder, str(client))

  def check_remote_workers(self, arrays) -> None:
    """Raises StoreError naming the first remote worker whose machine
    lacks a file of the store, or holds one whose bytes are not those of
    `arrays` (the store's data): its clients would not read their data.
    Each worker reads its whole copy once, with a key of this run's (the
    local worker reads this machine's folder, checked by `of`)."""
    workers = runtime.remote_workers()
    for worker in workers:
      missing = sorted(self.files - worker.files_in(self.folder))
      if missing:
        more = f' and {len(missing) - 1} more' if len(missing) > 1 else ''
        raise StoreError(
          f'{worker.name} has {len(self.files) - len(missing)} of the '
          f'{len(self.files)} files of the client data folder {self.folder} '
          f'(missing {missing[0]}{more}): {_COPY_AGAIN}'
        )
    if workers:
      self._check_contents(workers, arrays)

  def _check_contents(self, workers, arrays):
    from tff_algos.runtime import remote  # Only with remote workers.

    # A key of this run's (not --seed's: it shapes no number), so that no
    # copy made before the run can match by chance or by design.
    key = [secrets.randbits(63) for _ in range(2)]
    names, expected = [], []
    for name, content in _files(arrays):
      names.append(name)
      expected.append((len(content), remote.keyed_digest(content, key)))
    paths = [os.path.join(self.folder, name) for name in names]
    for worker in workers:
      found = worker.file_digests(paths, key)
      for name, (size, digest), (its_size, its_digest) in zip(
        names, expected, found
      ):
        if (its_size, its_digest) != (size, digest):
          differs = (
            f'has {its_size} of its {size} bytes'
            if its_size != size
            else "differs from this machine's"
          )
          raise StoreError(
            f'{worker.name}: its copy of the client data file '
            f'{os.path.join(self.folder, name)} {differs}: {_COPY_AGAIN}'
          )

  def touch(self) -> None:
    """Marks the folder used now (so that it is not deleted under a run)."""
    with contextlib.suppress(OSError):
      os.utime(self.folder)

  @classmethod
  def of(cls, arrays, root: str | None = None) -> 'ClientStore':
    """The store of `arrays` (every client's OrderedDict of arrays, by
    client index, in the dtypes of the model's input_spec, as the
    evaluation takes them too), written under `root` (default: the
    package's cache folder) unless it is there already. A store there is
    read back and checked against its SHA-256 name; files that differ from
    `arrays` are written again (one line on stderr says which). StoreError
    when the folder cannot be written."""

    digest = hashlib.sha256()
    names = []
    for name, content in _files(arrays):
      _add(digest, name, content)
      names.append(name)
    folder = os.path.join(
      root or runtime.cache_folder(), FOLDER, digest.hexdigest()
    )
    try:
      if not os.path.isdir(folder):
        _write(folder, _files(arrays))  # Or another run wrote it first.
      if _digest_of(folder, names) != digest.hexdigest():
        _repair(folder, _files(arrays))
    except OSError as e:
      raise StoreError(_unwritable(folder, e)) from None
    store = cls(folder, frozenset(names))
    store.touch()
    _delete_unused(os.path.dirname(folder))
    return store


# What a worker with a damaged or partial copy of the store is to do.
_COPY_AGAIN = (
  'copy the folder to its machine again (docs/guide/remote-workers.md) or run '
  'with --client_execution=per_client'
)


def _files(arrays):
  """(name, bytes) of each file of the store of `arrays`, in the order of
  its digest. One client's files at a time: a copy of all the data would
  double the process's peak memory on the large datasets."""
  for client, client_arrays in enumerate(arrays):
    for i, content in enumerate(_serialized(client_arrays)):
      yield f'{client}.{i}', content


class StoreError(Exception):
  """A client data store that cannot be written here, or that a remote
  worker's machine holds damaged or in part: the one line a run stops
  with."""


def _unwritable(folder, error) -> str:
  """What stopped `folder`'s writing (`error`, an OSError), and what to do."""
  cache = os.path.dirname(os.path.dirname(folder))
  what = (
    f'no space left on the device holding {cache}'
    if error.errno in (errno.ENOSPC, errno.EDQUOT)
    else f'cannot use the client data store under {cache} '
    f'({error.strerror or error}'
    + (f': {error.filename}' if error.filename else '')
    + ')'
  )
  return (
    f'{what}: set TFF_ALGOS_CACHE to a folder with room that can be '
    'written, or run with --client_execution=per_client (which sends '
    "each client's data instead)"
  )


def _add(digest, name, content):
  """Adds one file to the store's digest (its name: the folder's)."""
  digest.update(f'{name} {len(content)}\n'.encode())
  digest.update(content)


def _digest_of(folder, names) -> str | None:
  """The digest of the files `names` as they are in `folder`, or None if
  one is missing."""
  digest = hashlib.sha256()
  try:
    for name in names:
      with open(os.path.join(folder, name), 'rb') as f:
        _add(digest, name, f.read())
  except FileNotFoundError:
    return None
  return digest.hexdigest()


def _repair(folder, files):
  """Writes again each file of `folder` whose bytes are not its
  content (each replaced at once: a run reading the store meanwhile sees
  the old file or the new one), and says so on stderr."""
  damaged = []
  for name, content in files:
    path = os.path.join(folder, name)
    try:
      with open(path, 'rb') as f:
        intact = f.read() == content
    except FileNotFoundError:
      intact = False
    if not intact:
      damaged.append(name)
      with tempfile.NamedTemporaryFile(
        dir=folder, prefix=f'.{name}-', delete=False
      ) as f:
        f.write(content)
      os.replace(f.name, path)
  if not damaged:
    return  # Another run repaired it meanwhile.
  more = f' and {len(damaged) - 1} more' if len(damaged) > 1 else ''
  print(
    f'the client data store {folder} had damaged or missing files '
    f'({damaged[0]}{more}): written again from '
    "the task's data",
    file=sys.stderr,
  )


def _delete_unused(parent):
  """Deletes the folders beyond the `KEPT` most recently used that no run
  used within `IN_USE_S` (partial ones too)."""
  with contextlib.suppress(OSError):
    folders = sorted(
      (e for e in os.scandir(parent) if e.is_dir()),
      key=lambda e: e.stat().st_mtime,
      reverse=True,
    )
    stores = [e for e in folders if not e.name.startswith('.')]
    kept = {e.name for e in stores[:KEPT]}
    unused_since = time.time() - IN_USE_S
    for entry in folders:
      if entry.name not in kept and entry.stat().st_mtime < unused_since:
        shutil.rmtree(entry.path, ignore_errors=True)


def _serialized(client_arrays) -> list[bytes]:
  """A client's arrays as `TensorProto`s, in `tf.nest.flatten` order."""
  return [
    tf.make_tensor_proto(np.asarray(a)).SerializeToString()
    for a in tf.nest.flatten(client_arrays)
  ]


def _write(folder, files):
  parent = os.path.dirname(folder)
  os.makedirs(parent, exist_ok=True)
  partial = tempfile.mkdtemp(dir=parent, prefix='.partial-')
  try:
    for name, content in files:
      with open(os.path.join(partial, name), 'wb') as f:
        f.write(content)
    os.rename(partial, folder)
  except OSError:
    if not os.path.isdir(folder):  # Not another run's store, written first.
      raise
  finally:
    shutil.rmtree(partial, ignore_errors=True)
