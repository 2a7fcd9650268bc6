"""Our tasks' client data as a `tff.program.FederatedDataSource`, for TFF's
program layer (`tff.learning.programs.train_model`).

TFF 0.87's own `tff.program.DatasetDataSource` cannot be used with
`train_model`: `train_model` deep-copies the data iterator every round and
saves it in each checkpoint, and an iterator holding `tf.data.Dataset`s can
be neither copied nor saved. Here the iterator holds only where it is (the
number of selections made); the data stay in the source, which the
iterator finds again by a key when a checkpoint is loaded (create the same
`ClientDataSource` before resuming).

`select(k)` picks the k clients that the simulation's sampler picks for the
next round (`sampling.ClientSampler`, from the seed and the round number)
and gives each one's `tf.data.Dataset` of batches, in order: a program run
with `train_model` sees the same clients and batches as a process driven
by hand from the same seed.
"""

import hashlib
import json
import weakref

import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.simulation.sampling import ClientSampler

_SOURCES = weakref.WeakValueDictionary()  # key → ClientDataSource


class ClientDataSource(tff.program.FederatedDataSource):
  """The clients of a `tff.simulation.datasets.ClientData`, batched.

  Args:
    client_data: e.g. a task's `train`.
    batch_size: B, the batch size of each client's dataset.
    seed: seeds the selection of each round's clients (as `--seed` does).
  """

  def __init__(
    self,
    client_data: tff.simulation.datasets.ClientData,
    batch_size: int,
    seed: int = 0,
  ):
    if batch_size < 1:
      raise ValueError(f'batch_size must be >= 1, got {batch_size}')
    self._client_data = client_data
    self._batch_size = batch_size
    self._seed = seed
    spec = client_data.element_type_structure
    self._federated_type = tff.FederatedType(
      tff.SequenceType(
        tff.types.tensorflow_to_type(
          tf.nest.map_structure(
            lambda s: tf.TensorSpec([None, *s.shape], s.dtype), spec
          )
        )
      ),
      tff.CLIENTS,
    )
    self.key = hashlib.sha256(
      json.dumps(
        [
          list(client_data.client_ids),
          batch_size,
          seed,
          str(self._federated_type),
        ]
      ).encode()
    ).hexdigest()[:16]
    _SOURCES[self.key] = self

  @property
  def federated_type(self) -> tff.FederatedType:
    return self._federated_type

  def iterator(self) -> 'ClientDataIterator':
    return ClientDataIterator(self, selections=0)

  def dataset(self, client_id: str) -> tf.data.Dataset:
    """The client's examples, batched by B, in their order."""
    return self._client_data.create_tf_dataset_for_client(client_id).batch(
      self._batch_size
    )

  def clients(self, round_num: int, k: int) -> list[str]:
    """The ids of the k clients of round `round_num` (1, 2, ...)."""
    ids = self._client_data.client_ids
    sampler = ClientSampler(len(ids), k, epochs=1, seed=self._seed)
    return [ids[plan.client] for plan in sampler.round_plan(round_num)]


class ClientDataIterator(tff.program.FederatedDataSourceIterator):
  """Where a `ClientDataSource` is: the selections made so far."""

  def __init__(self, source: ClientDataSource, selections: int):
    self._source = source
    self._selections = selections

  @property
  def federated_type(self) -> tff.FederatedType:
    return self._source.federated_type

  def select(self, k: int | None = None) -> list[tf.data.Dataset]:
    """The datasets of the next round's k clients."""
    if k is None or k < 1:
      raise ValueError(f'k must be a number of clients >= 1, got {k!r}')
    self._selections += 1
    return [
      self._source.dataset(c) for c in self._source.clients(self._selections, k)
    ]

  def to_bytes(self) -> bytes:
    return json.dumps(
      dict(source=self._source.key, selections=self._selections)
    ).encode()

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'ClientDataIterator':
    saved = json.loads(buffer.decode())
    source = _SOURCES.get(saved['source'])
    if source is None:
      raise ValueError(
        "the checkpoint's data source (key "
        f'{saved["source"]}) is not open in this process: create the same '
        'ClientDataSource (client data, batch size, seed) before loading '
        'the program state'
      )
    return cls(source, saved['selections'])

  def __deepcopy__(self, memo):
    del memo  # The source (the data) is shared: only the position is copied.
    return ClientDataIterator(self._source, self._selections)

  def __eq__(self, other):
    if not isinstance(other, ClientDataIterator):
      return NotImplemented
    return (self._source.key, self._selections) == (
      other._source.key,
      other._selections,
    )
