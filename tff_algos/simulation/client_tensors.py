"""Clients' arrays as tensors in this process: one tensor per feature
for many clients, shared by a run's evaluation, dissimilarity and
compiled clients, which read the same training clients."""

import collections

import numpy as np
import tensorflow as tf

from tasks.base import aligned_empty
from tasks.base import ALIGNMENT


def _root(array):
  """The array (or buffer) that owns `array`'s memory."""
  while isinstance(array.base, np.ndarray):
    array = array.base
  return array


def _joined(arrays):
  """np.concatenate(arrays), without a copy when they are consecutive
  slices of one C-contiguous array (as `tasks.base.packed_clients` makes
  them): then a view of it."""
  first = arrays[0]
  if all(
    a.flags.c_contiguous
    and a.dtype == first.dtype
    and a.shape[1:] == first.shape[1:]
    and _root(a) is _root(first)
    for a in arrays
  ):
    start = first.ctypes.data
    end = start
    for a in arrays:
      if a.ctypes.data != end:
        break
      end += a.nbytes
    else:
      root = _root(first)
      if isinstance(root, np.ndarray) and root.flags.c_contiguous:
        offset = start - root.ctypes.data
        if 0 <= offset and offset + (end - start) <= root.nbytes:
          return np.ndarray(
            (sum(len(a) for a in arrays),) + first.shape[1:],
            first.dtype,
            buffer=root,
            offset=offset,
          )
  return np.concatenate(
    arrays,
    out=aligned_empty(
      (sum(len(a) for a in arrays),) + first.shape[1:], np.result_type(*arrays)
    ),
  )


def _tensor(array):
  """`array` as a tensor that shares its memory (DLPack) when TensorFlow
  can take it so (C-contiguous, 64-byte aligned, a numeric dtype), else a
  copy (tf.constant); the array must not change afterwards. Either way
  the same values: the evaluation's results do not depend on it."""
  if (
    array.flags.c_contiguous
    and array.size
    and array.ctypes.data % ALIGNMENT == 0
    and array.dtype in (np.float32, np.float64, np.int32, np.int64, np.uint8)
  ):
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
  return tf.constant(array)


class ClientTensors:
  """Clients' arrays as one tensor per feature plus each client's row
  offsets, kept for the last `size` client lists (by the identity of their
  arrays, which are never modified in place here). Clients that are
  consecutive slices of one aligned array (`tasks.base.packed_clients`)
  cost no memory here: the tensor is that array (`_joined`, `_tensor`).
  A run makes one and gives it to its evaluation, dissimilarity and
  compiled clients, which read the same training clients
  (`trainer.ClientData.tensors`)."""

  def __init__(self, size=2):
    self._size = size
    self._entries = collections.OrderedDict()

  def __call__(self, data):
    if not data:
      raise ValueError("evaluation needs at least one client's data")
    key = tuple(id(a) for client in data for a in client.values())
    if key not in self._entries:
      if len(self._entries) == self._size:
        self._entries.popitem(last=False)
      sizes = [len(next(iter(client.values()))) for client in data]
      self._entries[key] = (
        list(data),  # Keeps the ids in `key` from being reused.
        collections.OrderedDict(
          (name, _tensor(_joined([c[name] for c in data]))) for name in data[0]
        ),
        tf.constant(np.cumsum([0] + sizes), tf.int32),
      )
    self._entries.move_to_end(key)
    _, concatenated, splits = self._entries[key]
    return concatenated, splits

  def with_offsets(self, data):
    """All clients' arrays (`data`, by client) as one tensor per feature
    and each client's first row in it (what `compiled.Engine` reads)."""
    concatenated, splits = self(data)
    return concatenated, splits.numpy()[:-1]
