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
place, so a reader never sees a partial store; one whose files are not
all there at their sizes (a file deleted) is written again. A worker on
another machine reads the same path, which must therefore hold the same
folder there (README, "Remote workers"); a run checks that before its
first round (`ClientStore.check_remote_workers`).

The folders of the last `KEPT` data sets used stay, and so does every
folder used within `IN_USE_S` (a run marks its folder used as it opens it
and every round, `ClientStore.touch`); older ones are deleted when a run
opens a store, as are partial folders that old (a killed writer's).
"""

import contextlib
import dataclasses
import hashlib
import os
import shutil
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

  def check_remote_workers(self) -> None:
    """Raises WorkerError naming the first remote worker whose machine
    lacks any of the files: its clients could not read their data (the
    local worker reads this machine's folder)."""
    for worker in runtime.remote_workers():
      missing = sorted(self.files - worker.files_in(self.folder))
      if missing:
        more = f' and {len(missing) - 1} more' if len(missing) > 1 else ''
        raise runtime.WorkerError(
          f'{worker.name} has {len(self.files) - len(missing)} of the '
          f'{len(self.files)} files of the client data folder {self.folder} '
          f'(missing {missing[0]}{more}): copy the folder to its machine '
          '(README, "Remote workers") or run with '
          '--client_execution=per_client'
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
    package's cache folder) unless it is there already."""

    # One client's files at a time: a copy of all the data would double
    # the process's peak memory on the large datasets.
    def files():
      for client, client_arrays in enumerate(arrays):
        for i, content in enumerate(_serialized(client_arrays)):
          yield f'{client}.{i}', content

    digest = hashlib.sha256()
    sizes = {}
    for name, content in files():
      digest.update(f'{name} {len(content)}\n'.encode())
      digest.update(content)
      sizes[name] = len(content)
    folder = os.path.join(
      root or runtime.cache_folder(), FOLDER, digest.hexdigest()
    )
    if _sizes(folder) != sizes:  # None there, or damaged: (re)written.
      shutil.rmtree(folder, ignore_errors=True)
      _write(folder, files())
    store = cls(folder, frozenset(sizes))
    store.touch()
    _delete_unused(os.path.dirname(folder))
    return store


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


def _sizes(folder) -> dict[str, int]:
  try:
    return {e.name: e.stat().st_size for e in os.scandir(folder)}
  except FileNotFoundError:
    return {}


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
