"""A client's work defined once, as TensorFlow functions of tensors, and
built for every engine: TFF's client work (the per-client reference) and,
in a simulation, the compiled clients (`simulation.compiled`).

The shape is FedJAX's `client_init / client_step / client_final`:

    init(shared) -> state                      # from w_t and the hparams
    step(state, batch) -> state                # one minibatch
    final(shared, state, client) -> ClientOutput(update, weight=None,
                                                 scale=None, metrics={})

* `shared`: `Shared(weights, hparams)`: the broadcast model's trainable
  weights w_t (a list of tensors, in the model's order) and the
  definition's hyper-parameters (float32 scalars by name). The
  hyper-parameters are the client work's state: declared with their
  initial values (`ClientDefinition.hparams`), kept at the server,
  broadcast each round and read or changed by the process's
  `get_hparams` / `set_hparams` (e.g. a learning-rate schedule), as TFF's
  `ClientWorkProcess`'s.
* `state`: any nest of tensors (tuples, lists, dicts; fixed shapes).
* `batch`: a `Batch`: `batch.loss_and_gradients(weights)` gives the
  batch's mean loss (its real examples only: a compiled batch is padded
  to B and masked) plus the model's regularization, and its gradients
  with respect to `weights`; `batch.examples` is its number of real
  examples (float32); `batch.compiled` whether the step runs in the
  compiled engine's XLA program, where a branch (`tf.cond`) costs more
  than the few elementwise passes over the weights it might skip. Each
  call is a forward pass: the per-client reference counts the model's
  training metrics in it, the compiled clients report the last call's
  loss.
* `client`: `ClientInfo(examples, steps)`: the client's number of local
  examples n_k (float32; counted once, whatever work it did) and the
  steps it took τ_k (int32; a straggler's partial work is fewer).
* `ClientOutput`: `update` (a list like `shared.weights`: TFF's
  convention, w_t − w_k, a pseudo-gradient for the server optimizer);
  `weight` (None: the process's client weighting, n_k or 1); `scale` (a
  float32 scalar, or None): the server's update is then the model
  aggregator's result (the clients' weighted mean update, by default)
  times the weighted mean of their scales (the same weights; FedNova's
  τ_eff), a second aggregation beside the first, reported as
  `metrics['client_work']['update_scale']`; `metrics`: scalars by name,
  summed over the clients (`metrics['client_work'][name]`).

A definition's batches are its client's minibatches as the schedule
drew them (E epochs of B), or with `one_pass` its whole data once in
chunks, one local step (FedSGD's full-batch gradient, `local_sgd`).

No Python control flow on tensors (use `tf.cond`, `tf.where`): the
compiled engine traces the functions as they are.

A tiny example, local SGD (FedAvg's client), its learning rate a
hyper-parameter carried in the state:

    def init(shared):
      return list(shared.weights), shared.hparams['learning_rate']

    def step(state, batch):
      weights, rate = state
      _, gradients = batch.loss_and_gradients(weights)
      return [w - rate * g for w, g in zip(weights, gradients)], rate

    def final(shared, state, client):
      return ClientOutput([w0 - w for w0, w in zip(shared.weights, state[0])])

    LOCAL_SGD = ClientDefinition(init, step, final, {'learning_rate': 0.01})
    process = learning.build_process(
      model_fn, LOCAL_SGD.client_work, tff.learning.optimizers.build_sgdm(1.0))

examples/fednova.py is a whole algorithm written this way.

The client inputs: `ScheduledInput` and `StoredInput` (the simulation's,
each client's minibatches as the server's sampler drew them),
`DatasetInput` (production: a `tf.data.Dataset` of batches per client),
and `ComputedInput` (the clients' results computed outside the process:
`simulation.compiled` runs the same definition, compiled by XLA).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
import dataclasses
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import client_work as client_work_lib
from tff_algos.learning import measurements
from tff_algos.learning import model_ops


class Shared(NamedTuple):
  """What every client of a round starts from: the broadcast trainable
  weights w_t (a list of tensors) and the hyper-parameters (float32
  scalars by name)."""

  weights: list
  hparams: Mapping[str, tf.Tensor]


class ClientInfo(NamedTuple):
  """What a client's `final` may use besides its state: its number of
  local examples n_k (float32) and of local steps τ_k (int32)."""

  examples: tf.Tensor
  steps: tf.Tensor


class ClientOutput(NamedTuple):
  """A client's result (see the module docstring)."""

  update: list
  weight: tf.Tensor | None = None
  scale: tf.Tensor | None = None
  metrics: Mapping[str, tf.Tensor] = {}


class Batch:
  """One minibatch, as a definition's `step` sees it."""

  examples: tf.Tensor  # Its real examples (float32).
  compiled = False  # Whether it is stepped in one XLA program.

  def loss_and_gradients(self, weights):
    """(the batch's mean loss plus the regularization, its gradients
    with respect to `weights`, a list of tensors)."""
    raise NotImplementedError


class ModelBatch(Batch):
  """A batch of the per-client reference: the model's variables take
  `weights`, and its forward pass (which also counts the model's
  metrics, as TFF's client work reports them) is differentiated."""

  def __init__(self, model, data):
    self._model, self._data = model, data
    self.examples = tf.cast(model_ops.num_examples(data), tf.float32)

  def loss_and_gradients(self, weights):
    trainable = self._model.trainable_variables
    for variable, value in zip(trainable, weights):
      variable.assign(value)
    with tf.GradientTape() as tape:
      loss = self._model.forward_pass(self._data, training=True).loss
    gradients = [
      tf.convert_to_tensor(g)  # Embeddings: IndexedSlices.
      for g in tape.gradient(loss, trainable)
    ]
    return loss, gradients


class MaskedBatch(Batch):
  """A batch padded to B, `mask` its real examples, of a model given as
  `model_ops.KerasModelFn` (its weights as tensors): what the compiled
  engine steps. `mean_loss` is the last loss computed, without the
  regularization (the training loss metric, as the per-client path's)."""

  compiled = True

  def __init__(self, model_fn, data, mask):
    self._model_fn, self._data, self._mask = model_fn, data, mask
    self.examples = tf.reduce_sum(mask)
    self.mean_loss = tf.constant(0.0)

  def loss_and_gradients(self, weights):
    weights = list(weights)
    with tf.GradientTape() as tape:
      tape.watch(weights)
      prediction, regularization = self._model_fn.predict(
        weights, self._data['x']
      )
      losses = self._model_fn.example_losses(self._data['y'], prediction)
      mean = tf.reduce_sum(losses * self._mask) / tf.maximum(self.examples, 1.0)
      loss = mean + tf.add_n([tf.constant(0.0)] + regularization)
    self.mean_loss = mean
    gradients = [
      tf.convert_to_tensor(g)  # A gather's gradient: IndexedSlices.
      for g in tape.gradient(loss, weights)
    ]
    return loss, gradients


@dataclasses.dataclass(frozen=True)
class ClientDefinition:
  """A client's work (see the module docstring): `init`, `step`, `final`
  and the hyper-parameters' initial values by name."""

  init: Callable[[Shared], Any]
  step: Callable[[Any, Batch], Any]
  final: Callable[[Shared, Any, ClientInfo], ClientOutput]
  hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
  # The client's batches are its whole data once, in order, in chunks of
  # `model_ops.CHUNK_SIZE` (B = ∞, E = 1: the schedule unused; a
  # `DatasetInput`'s one pass), and count as one local step: a full-batch
  # gradient's (FedSGD).
  one_pass: bool = False

  def client_work(
    self,
    model_fn: client_work_lib.ModelFn,
    client_weighting='num_examples',
    client_input: client_work_lib.ClientInput | None = None,
    metrics_aggregator: client_work_lib.MetricsAggregator | None = None,
    report_update_squared_norm: bool = False,
  ):
    """The client work of this definition for `learning.build_process`
    (its `build_client_work`): a `tff.learning.templates.ClientWorkProcess`
    (a `StructClientWork` for `StoredInput`, a `ComputedClientWork` for
    `ComputedInput`). Arguments as `build_proximal_sgd_client_work`'s."""
    return build_client_work(
      self,
      model_fn,
      client_weighting,
      client_input,
      metrics_aggregator,
      report_update_squared_norm,
    )


@dataclasses.dataclass(frozen=True)
class DefinedTraining:
  """What a computed process's clients compute when their work is a
  definition (`ComputedProcess.local_training`): the definition, the
  client weighting, what its `final` gives besides the update
  (`outputs`), and whether a client reports ‖update‖² (`squared_norm`)."""

  definition: ClientDefinition
  weighting: tff.learning.ClientWeighting
  outputs: Outputs
  squared_norm: bool = False


@dataclasses.dataclass(frozen=True)
class Outputs:
  """What a definition's `final` gives besides the update: whether it
  scales the mean update, and its metrics' dtypes by name."""

  scaled: bool
  metrics: Mapping[str, tf.DType]


# The client work's measurement of the clients' weighted mean scale
# (`ClientOutput.scale`), by which the process multiplies the aggregated
# update before the server optimizer steps (`composition.compose`).
UPDATE_SCALE = 'update_scale'
# A client's statistics of its update's scale (`ClientOutput.scale`): w_k
# s_k and w_k, summed by the metrics aggregator into the clients' mean
# scale (`client_definition._next_fn`).
SCALE_SUMS = ('update_scale_weighted', 'update_scale_weight')
# What every client work reports: a definition's metrics take other names.
RESERVED_METRICS = frozenset(
  (
    'train',
    'local_steps',
    'participants',
    'update_squared_norm',
    UPDATE_SCALE,
    *SCALE_SUMS,
  )
)


def hparam_specs(definition: ClientDefinition) -> dict:
  return {name: tf.TensorSpec([], tf.float32) for name in definition.hparams}


def finish(definition, shared, state, client, weighting):
  """The client's `final`, made whole: (update, weight, scale or None,
  metrics), its weight the process's weighting where `final` gives none."""
  output = definition.final(shared, state, client)
  weight = output.weight
  if weight is None:
    weight = (
      client.examples
      if weighting == tff.learning.ClientWeighting.NUM_EXAMPLES
      else tf.constant(1.0)
    )
  scale = output.scale
  return (
    [tf.cast(u, w.dtype) for u, w in zip(output.update, shared.weights)],
    tf.cast(weight, tf.float32),
    None if scale is None else tf.cast(scale, tf.float32),
    collections.OrderedDict(
      (name, tf.convert_to_tensor(value))
      for name, value in sorted(output.metrics.items())
    ),
  )


def outputs_of(definition, weight_specs) -> Outputs:
  """What `definition`'s `final` gives besides the update, read from a
  trace of `init` then `final` for weights of `weight_specs`."""
  found = {}

  def probe(weights, hparams):
    shared = Shared(list(weights), hparams)
    state = definition.init(shared)
    client = ClientInfo(tf.constant(1.0), tf.constant(1))
    _, _, scale, metrics = finish(
      definition, shared, state, client, tff.learning.ClientWeighting.UNIFORM
    )
    clashes = set(metrics) & RESERVED_METRICS
    if clashes:
      raise ValueError(
        f"a client definition's metrics may not be named {sorted(clashes)}:"
        ' the client work reports those itself'
      )
    found['outputs'] = Outputs(
      scale is not None,
      collections.OrderedDict((k, v.dtype) for k, v in metrics.items()),
    )
    return tf.constant(0)

  tf.function(probe, autograph=False).get_concrete_function(
    list(weight_specs), hparam_specs(definition)
  )
  return found['outputs']


def computed_data_type(weights_type, outputs: Outputs, squared_norm=False):
  """The TFF type of a `ComputedInput` client's round input: its update,
  weight, statistics (local steps, participants: 1; with `squared_norm`,
  ‖update‖², for the update spread), training
  metrics, and a definition's scale and metrics. A simulation may hand the
  process one input for many clients whose updates only a mean aggregates
  (`ComputedProcess.mean_of_updates`): their weighted mean and summed
  weight, statistics and metrics, and their weighted mean scale."""
  fields = collections.OrderedDict(
    update=weights_type.trainable,
    weight=tff.TensorType(np.float32),
    local_steps=tff.TensorType(np.int32),
    participants=tff.TensorType(np.int32),
    train=collections.OrderedDict(
      loss=[tff.TensorType(np.float32)] * 2,
      num_examples=[tff.TensorType(np.int64)],
      num_batches=[tff.TensorType(np.int64)],
    ),
  )
  if squared_norm:
    fields['update_squared_norm'] = tff.TensorType(np.float64)
  if outputs.scaled:
    fields['scale'] = tff.TensorType(np.float32)
  if outputs.metrics:
    fields['metrics'] = collections.OrderedDict(
      (name, tff.TensorType(dtype.as_numpy_dtype))
      for name, dtype in outputs.metrics.items()
    )
  return tff.to_type(fields)


def build_client_work(
  definition: ClientDefinition,
  model_fn,
  client_weighting='num_examples',
  client_input=None,
  metrics_aggregator=None,
  report_update_squared_norm=False,
):
  """`ClientDefinition.client_work` (`client_input` None: a
  `ScheduledInput`)."""
  client_input = client_input or client_work_lib.ScheduledInput()
  epochs = getattr(client_input, 'epochs', 1)
  if definition.one_pass and epochs != 1:
    raise ValueError(
      'a full-batch gradient is one pass (E = 1), got '
      f'DatasetInput(epochs={epochs})'
    )
  model_fn = model_ops.variable_model_fn(model_fn)
  weighting = client_work_lib.client_weighting(client_weighting)
  aggregator = metrics_aggregator or tff.learning.metrics.sum_then_finalize
  finalizers, weights_type, data_type = _model_types(model_fn, client_input)
  weight_specs = [
    tf.TensorSpec(t.shape, t.dtype) for t in weights_type.trainable
  ]
  outputs = outputs_of(definition, weight_specs)
  computed = isinstance(client_input, client_work_lib.ComputedInput)
  if computed:
    finalizers = COMPUTED_METRICS
    data_type = computed_data_type(
      weights_type, outputs, report_update_squared_norm
    )

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(
      collections.OrderedDict(
        (name, np.float32(value)) for name, value in definition.hparams.items()
      ),
      tff.SERVER,
    )

  state_type = init_fn.type_signature.result.member
  if computed:
    train_client = _computed_client(
      state_type,
      weights_type,
      data_type,
      report_update_squared_norm,
      metrics=tuple(outputs.metrics),
      scaled=outputs.scaled,
    )
  else:
    train = _training(
      definition, weighting, client_input, report_update_squared_norm
    )

    @tff.tensorflow.computation(state_type, weights_type, data_type)
    def train_client(state, initial_weights, data):
      return train(model_fn(), state, initial_weights, data)

  next_fn = _next_fn(
    init_fn, train_client, weights_type, data_type, finalizers, aggregator
  )
  return _client_work_for(
    client_input,
    init_fn,
    next_fn,
    DefinedTraining(definition, weighting, outputs, report_update_squared_norm),
  )


def _next_fn(
  init_fn, train_client, weights_type, data_type, finalizers, aggregator
):
  """The client work's round: each client's training; its metrics and
  statistics summed by the metrics aggregator, as TFF's client work
  reports them; and for a definition whose `final` gives a scale, the
  clients' weighted mean scale (`UPDATE_SCALE`) from two of those sums
  (`SCALE_SUMS`), by which the process multiplies the aggregated update
  (`composition.compose`): a client's scale leaves it only through the
  configured metrics aggregator (secure aggregation's too)."""
  metrics_type, statistics_type = train_client.type_signature.result[1:]
  aggregate_metrics = aggregator(finalizers, metrics_type)
  names = tff.structure.name_list(statistics_type)
  aggregate_statistics = aggregator(
    collections.OrderedDict((name, _identity) for name in names),
    statistics_type,
  )

  @tff.federated_computation(
    init_fn.type_signature.result,
    tff.FederatedType(weights_type, tff.CLIENTS),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(state, weights, data):
    result, metrics, statistics = tff.federated_map(
      train_client, (tff.federated_broadcast(state), weights, data)
    )
    statistics = aggregate_statistics(statistics)
    reports = collections.OrderedDict(train=aggregate_metrics(metrics))
    for name in names:  # Flat, as TFF's.
      if name not in SCALE_SUMS:
        reports[name] = statistics[name]
    if SCALE_SUMS[0] in names:
      reports[UPDATE_SCALE] = tff.federated_map(
        _mean_scale, (statistics[SCALE_SUMS[0]], statistics[SCALE_SUMS[1]])
      )
    return tff.templates.MeasuredProcessOutput(
      state, result, tff.federated_zip(reports)
    )

  return next_fn


@tff.tensorflow.computation(np.float32, np.float32)
def _mean_scale(weighted_scales, weights):
  """Σ_k w_k s_k / Σ_k w_k at the server, from the clients' sums
  (aggregated beside the updates: no broadcast after them, MapReduceForm's
  round). 1 without clients (a DP round's noise of a zero sum passes
  unscaled), where a mean would be 0/0."""
  return tf.where(
    weights > 0.0, tf.math.divide_no_nan(weighted_scales, weights), 1.0
  )


def scale_sums(scale, weight):
  """A client's statistics for the mean scale (`SCALE_SUMS`)."""
  return collections.OrderedDict(
    zip(SCALE_SUMS, (scale * weight, tf.cast(weight, tf.float32)))
  )


def _training(definition, weighting, client_input, report_update_squared_norm):
  """A client's training as a tf.function of (model, hparams, initial
  weights, data): (its result, its model's metrics, its statistics, with
  the definition's metrics and its scale's sums)."""

  @tf.function
  def train(model, hparams, initial_weights, data):
    model_ops.assign_weights(model, initial_weights)
    shared = Shared(list(tf.nest.flatten(initial_weights.trainable)), hparams)

    initial = definition.init(shared)

    # The state crosses the loop flat: `Dataset.reduce` would take a list
    # in it for one tensor.
    def one_step(batch, carry):
      flat, steps = carry
      state = tf.nest.pack_sequence_as(initial, list(flat))
      state = definition.step(state, ModelBatch(model, batch))
      return tuple(tf.nest.flatten(state)), steps + 1

    carry = (tuple(tf.nest.flatten(initial)), tf.constant(0))
    for_each_batch = _for_each_batch(
      client_input, model, data, definition.one_pass
    )
    (flat, steps), n = for_each_batch(one_step, carry)
    if definition.one_pass:
      steps = tf.constant(1)
    state = tf.nest.pack_sequence_as(initial, list(flat))
    client = ClientInfo(tf.cast(n, tf.float32), steps)
    update, weight, scale, metrics = finish(
      definition, shared, state, client, weighting
    )
    update = tf.nest.pack_sequence_as(initial_weights.trainable, update)
    statistics = _client_statistics(steps, update, report_update_squared_norm)
    statistics.update(metrics)
    if scale is not None:
      statistics.update(scale_sums(scale, weight))
    return (
      tff.learning.templates.ClientResult(update=update, update_weight=weight),
      model.report_local_unfinalized_metrics(),
      statistics,
    )

  return train


def _for_each_batch(client_input, model, data, one_pass):
  """`for_each_batch(fn, carry) -> (carry, n_k)` over the client's
  minibatches: a `DatasetInput`'s for its epochs, a scheduled or stored
  input's in its schedule's order (`one_pass`: its whole data in
  chunks)."""
  if isinstance(client_input, client_work_lib.DatasetInput):
    return client_work_lib.dataset_batches(data, client_input.epochs)
  element = (
    client_work_lib.read_stored(data, model.input_spec)
    if isinstance(client_input, client_work_lib.StoredInput)
    else data.get_single_element()
  )
  batches = (
    client_work_lib.whole_data_batches
    if one_pass
    else client_work_lib.scheduled_batches
  )
  fold, n = batches(element)
  return lambda fn, carry: (fold(fn, carry), n)


# What a computed client reports of its local training: its loss, as the
# Keras model wrapper's mean (example-weighted over its batches), and its
# counters, as TFF's.
COMPUTED_METRICS = collections.OrderedDict(
  loss=lambda total_and_count: tf.math.divide_no_nan(*total_and_count),
  num_examples=lambda count: count[0],
  num_batches=lambda count: count[0],
)


def _identity(value):
  return value


def _client_statistics(steps, update, report_update_squared_norm):
  """What a client reports besides its model's metrics, summed over the
  clients by the metrics aggregator: its local steps, 1 (participants)
  and, for the update spread, ‖u_k‖² (float64)."""
  statistics = collections.OrderedDict(
    local_steps=steps, participants=tf.constant(1)
  )
  if report_update_squared_norm:
    statistics['update_squared_norm'] = measurements.squared_norm(
      [tf.cast(u, tf.float64) for u in tf.nest.flatten(update)]
    )
  return statistics


def _client_work_for(client_input, init_fn, next_fn, local_training):
  """The client work of `init_fn` and `next_fn` as `client_input` takes
  it: a `ComputedClientWork` (what a client computes: `local_training`),
  a `StructClientWork`, or TFF's `ClientWorkProcess`; its hyper-parameters
  are its state's."""
  state_type = init_fn.type_signature.result.member
  get_hparams_fn, set_hparams_fn = _hparams_accessors(state_type)
  if isinstance(client_input, client_work_lib.ComputedInput):
    return client_work_lib.ComputedClientWork(
      init_fn, next_fn, get_hparams_fn, set_hparams_fn, local_training
    )
  if isinstance(client_input, client_work_lib.StoredInput):
    return client_work_lib.StructClientWork(
      init_fn, next_fn, get_hparams_fn, set_hparams_fn
    )
  return tff.learning.templates.ClientWorkProcess(
    init_fn,
    next_fn,
    get_hparams_fn=get_hparams_fn,
    set_hparams_fn=set_hparams_fn,
  )


def _computed_client(
  state_type,
  weights_type,
  data_type,
  report_update_squared_norm,
  metrics=(),
  scaled=False,
):
  """A computed client's part of a round: its computed result, training
  metrics and statistics (those of a client training per client, with
  the definition's `metrics`, and with `scaled` its scale's sums), from
  its input."""

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def computed_client(state, initial_weights, data):
    del state, initial_weights
    result = tff.learning.templates.ClientResult(
      update=data['update'], update_weight=data['weight']
    )
    statistics = collections.OrderedDict(
      local_steps=data['local_steps'], participants=data['participants']
    )
    if report_update_squared_norm:
      statistics['update_squared_norm'] = data['update_squared_norm']
    for name in metrics:
      statistics[name] = data['metrics'][name]
    if scaled:
      statistics.update(scale_sums(data['scale'], data['weight']))
    return result, data['train'], statistics

  return computed_client


def _model_types(model_fn, client_input):
  """(metric finalizers, weights type, client data type) of the model."""
  with tf.Graph().as_default():
    model = model_fn()
    return (
      model.metric_finalizers(),
      tff.learning.models.weights_type_from_model(model),
      client_work_lib.client_data_type(model.input_spec, client_input),
    )


def _hparams_accessors(state_type):
  """(get_hparams_fn, set_hparams_fn) of a client work whose whole state
  is its hyper-parameters."""

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  return get_hparams_fn, set_hparams_fn
