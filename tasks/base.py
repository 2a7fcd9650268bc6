"""What every task provides: federated train/test data and a model."""

import collections
from collections.abc import Callable
import dataclasses
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import DataError


@dataclasses.dataclass(frozen=True)
class FederatedTask:
  name: str
  train: tff.simulation.datasets.ClientData
  test: tff.simulation.datasets.ClientData
  model_fn: Callable[[], tff.learning.models.VariableModel]
  description: str = ''

  @property
  def client_ids(self):
    return self.train.client_ids


def client_data_from_arrays(arrays_by_client):
  """ClientData whose examples are OrderedDict(x=..., y=...) rows.

  `arrays_by_client` maps client id → OrderedDict of equal-length arrays;
  they stay attached (`.arrays`), so `client_arrays` needs no tf.data.
  """

  def dataset_fn(client_id):
    return tf.data.Dataset.from_tensor_slices(arrays_by_client[client_id])

  client_data = tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
    list(arrays_by_client), dataset_fn
  )
  client_data.arrays = arrays_by_client
  return client_data


ALIGNMENT = 64  # Bytes: TensorFlow takes memory aligned so without a copy.


def aligned_empty(shape, dtype, alignment=ALIGNMENT):
  """An uninitialized C-contiguous array whose data start at a multiple of
  `alignment` bytes."""
  dtype = np.dtype(dtype)
  size = int(np.prod(shape)) * dtype.itemsize
  buffer = np.empty(size + alignment, np.uint8)
  start = -buffer.ctypes.data % alignment
  return buffer[start : start + size].view(dtype).reshape(shape)


def packed_clients(columns, indices_by_client, client_id, chunk=4096):
  """{client_id(i): OrderedDict of its rows} for rows `indices_by_client[i]`
  of `columns` (OrderedDict name → (array, convert)), where every client's
  arrays are consecutive slices (views) of one aligned array per column in
  client order: the evaluation over all clients then uses that array as it
  is (no concatenated copy; `simulation.evaluation`), and building it takes
  `chunk` rows at a time (no full-size temporaries). `convert(rows)`
  turns the selected rows into the column's values (e.g. uint8 pixels into
  float32 in [0, 1]); it must act row by row, so that the values are those
  of converting the whole array and then selecting.
  """
  order = np.concatenate(indices_by_client)
  packed = collections.OrderedDict()
  for name, (array, convert) in columns.items():
    first = convert(array[order[:1]])
    out = aligned_empty((len(order),) + first.shape[1:], first.dtype)
    for start in range(0, len(order), chunk):
      out[start : start + chunk] = convert(array[order[start : start + chunk]])
    packed[name] = out
  ends = np.cumsum([len(i) for i in indices_by_client])
  return collections.OrderedDict(
    (
      client_id(i),
      collections.OrderedDict(
        (name, values[end - len(indices) : end])
        for name, values in packed.items()
      ),
    )
    for i, (indices, end) in enumerate(zip(indices_by_client, ends))
  )


def split_devices(x, y, devices, train_fraction, rng, client_id):
  """FedProx-style per-device split of index lists into train/test dicts.

  Each device's indices are shuffled with `rng` (in device order); the first
  ⌊train_fraction·n⌋ are training data. Raises DataError for a device too
  small to have both.
  """
  train, test = collections.OrderedDict(), collections.OrderedDict()
  for u, idx in enumerate(devices):
    idx = rng.permutation(idx)
    cut = int(train_fraction * len(idx))
    if cut == 0 or cut == len(idx):
      raise DataError(
        f'device {client_id(u)} has {len(idx)} examples, too '
        'few for a train/test split'
      )
    train[client_id(u)] = collections.OrderedDict(
      x=x[idx[:cut]], y=y[idx[:cut]]
    )
    test[client_id(u)] = collections.OrderedDict(x=x[idx[cut:]], y=y[idx[cut:]])
  return train, test


def file_fingerprint(path):
  """(absolute path, size, mtime): a cache key that changes with the file."""
  stat = os.stat(path)
  return (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


def client_subset(train, test, num_clients, seed):
  """`num_clients` of the clients of {client: data} dicts `train` and
  `test` (same keys), a seeded random choice kept in their order; all of
  them when num_clients is None."""
  if num_clients is None:
    return train, test
  if not 1 <= num_clients <= len(train):
    raise DataError(
      f'--num_clients must be in 1..{len(train)}, got {num_clients}'
    )
  rng = np.random.default_rng([seed, 3])
  names = [
    list(train)[k]
    for k in sorted(rng.choice(len(train), num_clients, replace=False))
  ]
  return (
    collections.OrderedDict((c, train[c]) for c in names),
    collections.OrderedDict((c, test[c]) for c in names),
  )


def client_arrays(client_data):
  """Each client's whole dataset as numpy arrays, in `client_ids` order
  (the arrays of a `client_data_from_arrays`, without going through
  tf.data: 1,000 clients' datasets take half a minute)."""
  arrays = getattr(client_data, 'arrays', None)
  if arrays is not None:
    for client_id in client_data.client_ids:
      if not len(next(iter(arrays[client_id].values()))):
        raise DataError(f'client {client_id!r} has no examples')
    return [arrays[client_id] for client_id in client_data.client_ids]
  result = []
  for client_id in client_data.client_ids:
    dataset = client_data.create_tf_dataset_for_client(client_id)
    # Bounded batches: one huge batch hangs on TFF's SQL-backed datasets.
    batches = list(dataset.batch(4096).as_numpy_iterator())
    if not batches:
      raise DataError(f'client {client_id!r} has no examples')
    result.append(
      collections.OrderedDict(
        (k, np.concatenate([b[k] for b in batches])) for k in batches[0]
      )
    )
  return result
