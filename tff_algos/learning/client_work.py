"""What a client work takes, whatever it computes (what it computes is a
`ClientDefinition`: `client_definition`, the package's in `local_sgd`):
its client input, its client weighting, and each input's batches.

A client's input to a round, chosen by the client work's `client_input`:

* `ScheduledInput()` (the simulation): a client's input to one round is its
  whole local training set plus the minibatch schedule that the server-side
  sampler drew for it (`tff_algos.simulation.sampling`),

      OrderedDict(data=<the model's input_spec, batch dim None>,
                  example_order=int32[None],  # indices into data, all epochs
                  batch_ends=int32[None])     # end offset of each minibatch

  (one element of a sequence: TFF client data are sequences), so n_k is
  known however many epochs the client ran, and every minibatch is fixed by
  (seed, round, client) outside the computation: stragglers' partial work
  and identical draws across algorithms are simulation concepts.
* `StoredInput()` (the simulation, data kept where the clients train): as
  `ScheduledInput`, but a client's input names its data instead of holding
  them, so a round sends each client's schedule and not its examples,

      OrderedDict(path=tf.string,             # its data files' common prefix
                  example_order=int32[None],
                  batch_ends=int32[None])

  (a structure, not a sequence: `StructClientWork`). The client reads
  `path + '.i'`, the i-th tensor of its data (in `tf.nest.flatten` order of
  the model's input_spec) as a serialized `TensorProto`, where the
  computation runs: a TFF worker reads them from its own file system
  (`tff_algos.simulation.client_store` writes them).
* `DatasetInput(epochs)` (production): the convention of
  `tff.learning.algorithms.build_weighted_fed_avg`, a `tf.data.Dataset` of
  the model's batches per client. The client runs `epochs` passes over it and
  counts its own examples n_k in the first pass.

In both, n_k is the client's number of local examples, counted once,
whatever work it did (a straggler's partial work is weighted by its n_k).

Given the same minibatch sequence both flavours compute the same update.
Public `tff.*` API only: this is what a production port takes.
"""

import collections
from collections.abc import Callable
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import model_ops

# A no-argument callable returning a tff.learning.models.VariableModel, or a
# tff.learning.models.FunctionalModel (model_ops.variable_model_fn).
ModelFn = model_ops.ModelFn
# TFF's metrics aggregator: (metric finalizers, unfinalized metrics type) →
# a federated computation (e.g. tff.learning.metrics.sum_then_finalize).
MetricsAggregator = Callable[..., tff.Computation]


@dataclasses.dataclass(frozen=True)
class ScheduledInput:
  """Simulation: each client's whole dataset and its server-drawn schedule."""


@dataclasses.dataclass(frozen=True)
class StoredInput:
  """Simulation: each client's schedule and the path of its data files,
  which it reads where it trains."""


@dataclasses.dataclass(frozen=True)
class DatasetInput:
  """Production: a `tf.data.Dataset` of batches per client, `epochs` passes."""

  epochs: int = 1

  def __post_init__(self):
    if self.epochs < 1:
      raise ValueError(f'epochs must be >= 1, got {self.epochs}')


@dataclasses.dataclass(frozen=True)
class ComputedInput:
  """Simulation: each client's local training is computed outside the
  process (`simulation.compiled`), and its input to
  a round is its result: OrderedDict(update, weight, local_steps, train)
  (`computed_input_type`). The process aggregates those as it aggregates
  its own client work's; its client work says what a client computes
  (`ComputedClientWork.local_training`)."""


ClientInput = ScheduledInput | StoredInput | DatasetInput | ComputedInput


@dataclasses.dataclass(frozen=True)
class StructClientWork:
  """A client work whose client data are a structure of tensors, not a
  sequence (which `tff.learning.templates.ClientWorkProcess` requires):
  TFF serializes a sequence as a dataset graph, milliseconds a client. It has a ClientWorkProcess's computations
  (`composition.compose` composes it as TFF does)."""

  initialize: tff.Computation
  next: tff.Computation
  get_hparams: tff.Computation
  set_hparams: tff.Computation


@dataclasses.dataclass(frozen=True)
class ComputedClientWork(StructClientWork):
  """A client work whose clients' results come computed (`ComputedInput`),
  with what they compute (a `client_definition.DefinedTraining`)."""

  local_training: object = None


def client_weighting(value) -> tff.learning.ClientWeighting:
  """A `tff.learning.ClientWeighting` from itself or its name
  ('num_examples': n_k, the papers' default; 'uniform': 1/K)."""
  if isinstance(value, tff.learning.ClientWeighting):
    return value
  if not isinstance(value, str):
    raise TypeError(
      'client_weighting must be a tff.learning.ClientWeighting '
      f'or its name, got {type(value).__name__}'
    )
  try:
    return tff.learning.ClientWeighting[value.upper()]
  except KeyError:
    raise ValueError(
      f'client_weighting must be num_examples or uniform, got {value!r}'
    ) from None


def client_data_type(input_spec, client_input: ClientInput):
  """The TFF type of one client's training data (see the module docstring;
  a `ComputedInput` client's: `computed_input_type`)."""
  if isinstance(client_input, DatasetInput):
    return tff.SequenceType(tff.types.tensorflow_to_type(input_spec))
  schedule = collections.OrderedDict(
    example_order=tff.TensorType(np.int32, [None]),
    batch_ends=tff.TensorType(np.int32, [None]),
  )
  if isinstance(client_input, StoredInput):
    return tff.to_type(
      collections.OrderedDict(path=tff.TensorType(np.str_), **schedule)
    )
  return tff.SequenceType(
    collections.OrderedDict(data=model_ops.dataset_type(input_spec), **schedule)
  )


def takes_stored_input(process) -> bool:
  """Whether a learning process's `next` takes `StoredInput` clients."""
  clients_type = process.next.type_signature.parameter[1]
  return clients_type.member == client_data_type(None, StoredInput())


def read_stored(client_input, input_spec):
  """A `StoredInput` client's input as a scheduled input's element: its
  data read from the files its path names (see the module docstring)."""
  specs = tf.nest.flatten(model_ops.batched_spec(input_spec))
  tensors = [
    tf.ensure_shape(
      tf.io.parse_tensor(
        tf.io.read_file(tf.strings.join([client_input['path'], f'.{i}'])),
        spec.dtype,
      ),
      spec.shape,
    )
    for i, spec in enumerate(specs)
  ]
  return collections.OrderedDict(
    data=tf.nest.pack_sequence_as(input_spec, tensors),
    example_order=client_input['example_order'],
    batch_ends=client_input['batch_ends'],
  )


def scheduled_batches(client_input):
  """Folds over a scheduled input's minibatches, in the schedule's order."""
  data = client_input['data']
  order, ends = client_input['example_order'], client_input['batch_ends']

  def fold(fn, carry):
    start = tf.constant(0)
    for end in ends:
      carry = fn(model_ops.take(data, order[start:end]), carry)
      start = end
    return carry

  return fold, model_ops.num_examples(data)


def whole_data_batches(client_input):
  """Folds over a scheduled input's whole dataset in chunks (the schedule
  is not used): full-batch gradients."""
  data = client_input['data']

  def fold(fn, carry):
    for start in tf.range(
      0, model_ops.num_examples(data), model_ops.CHUNK_SIZE
    ):
      carry = fn(model_ops.chunk(data, start), carry)
    return carry

  return fold, model_ops.num_examples(data)


def dataset_batches(data, epochs):
  """The `for_each_batch` of a `DatasetInput` client: `epochs` passes over
  `data`; n_k counts the examples of the first pass only, so a client whose
  data source ends early in a later pass (a device that stops at a
  deadline) still reports its number of local examples.

  The passes are one dataset (each batch with its pass's index), folded
  by `Dataset.reduce`, as TFF's own client work folds its batches. A graph
  loop over the passes would build an iterator each pass (about 13 ms here),
  and a graph loop over the batches dispatches several iterator ops each
  step: a round of `make run`'s workload took 17–22 s and 3.0–3.6 s in
  TFF's runtime that way, 1.0–1.1 s folded (PERFORMANCE.md)."""

  def for_each_batch(fn, carry):
    passes = tf.data.Dataset.range(epochs).flat_map(
      lambda epoch: tf.data.Dataset.zip(
        (tf.data.Dataset.from_tensors(epoch).repeat(), data)
      )
    )

    def step(state, pass_and_batch):
      carry, n = state
      epoch, batch = pass_and_batch
      first_pass = tf.equal(epoch, 0)
      n += tf.where(first_pass, model_ops.num_examples(batch), 0)
      return fn(batch, carry), n

    return passes.reduce((carry, tf.constant(0)), step)

  return for_each_batch
