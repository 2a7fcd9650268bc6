"""Client works: proximal minibatch SGD and full-batch gradients.

Each client work comes in two flavours, chosen by its `client_input`:

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

from tff_algos.learning import measurements
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
class LockstepInput:
  """Simulation: each client's local training is computed outside the
  process, many clients at once (`simulation.lockstep`), and its input to
  a round is its result: OrderedDict(update, weight, local_steps, train)
  (`lockstep_data_type`). The process aggregates those as it aggregates
  its own client work's; its client work says what a client computes
  (`LockstepClientWork.local_training`)."""


ClientInput = ScheduledInput | StoredInput | DatasetInput | LockstepInput


@dataclasses.dataclass(frozen=True)
class LocalTraining:
  """What a client of a lockstep process computes from the model it
  receives (`LockstepInput`): `kind` 'proximal_sgd', minibatch steps of
  `optimizer` on ∇F_k(w) + μ(w − w_t) (μ and the optimizer's
  hyper-parameters: the client work's state), or 'gradient', one
  full-batch gradient ∇F_k(w_t); weighted by `weighting`."""

  kind: str
  weighting: tff.learning.ClientWeighting
  optimizer: tff.learning.optimizers.Optimizer | None = None


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
class LockstepClientWork(StructClientWork):
  """A client work whose clients' results come computed (`LockstepInput`),
  with the `LocalTraining` they are computed by."""

  local_training: LocalTraining | None = None


# What a lockstep client reports of its local training: its loss, as the
# Keras model wrapper's mean (example-weighted over its batches), and its
# counters, as TFF's.
LOCKSTEP_METRICS = collections.OrderedDict(
  loss=lambda total_and_count: tf.math.divide_no_nan(*total_and_count),
  num_examples=lambda count: count[0],
  num_batches=lambda count: count[0],
)


def lockstep_data_type(weights_type):
  """The TFF type of a lockstep client's round input: its update, weight,
  statistics (local steps, participants: 1, ‖update‖²) and training
  metrics (`LockstepInput`). A simulation may hand the process one input
  for many clients whose updates only a mean aggregates
  (`LockstepProcess.mean_of_updates`): their weighted mean and summed
  weight, statistics and metrics."""
  return tff.to_type(
    collections.OrderedDict(
      update=weights_type.trainable,
      weight=tff.TensorType(np.float32),
      local_steps=tff.TensorType(np.int32),
      participants=tff.TensorType(np.int32),
      update_squared_norm=tff.TensorType(np.float64),
      train=collections.OrderedDict(
        loss=[tff.TensorType(np.float32)] * 2,
        num_examples=[tff.TensorType(np.int64)],
        num_batches=[tff.TensorType(np.int64)],
      ),
    )
  )


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


# The builders' argument of that name hides the function.
_weighting = client_weighting


def client_data_type(input_spec, client_input: ClientInput):
  """The TFF type of one client's training data (see the module docstring;
  a `LockstepInput` client's: `lockstep_data_type`)."""
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


def _schedule(client_input):
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


def _whole_dataset(client_input):
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


def _first_pass_examples(data, epochs):
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


def _build_client_work(
  model_fn,
  hparams,
  local_update,
  weighting,
  client_input,
  report_update_squared_norm,
  metrics_aggregator,
  scheduled_batches=_schedule,
  local_training=None,
):
  """A ClientWorkProcess around `local_update(hparams, model, initial
  weights, for_each_batch) -> (update, steps, n_k)`.

  `for_each_batch(fn, carry) -> (carry, n_k)` folds `fn(batch, carry)` over
  the client's batches (a `DatasetInput`'s for its epochs, a scheduled
  input's as `scheduled_batches` gives them); n_k, the client's number of
  local examples, is counted once, whatever work it did. `hparams` (e.g.
  μ, the client learning rate) are the state: kept at the server,
  broadcast each round, exposed by get/set_hparams, so they change between
  rounds without a new process.

  The update leaves the client only as the process's result (for the model
  aggregator); all else, summed by `metrics_aggregator` (default
  `tff.learning.metrics.sum_then_finalize`): its model's metrics (`train`),
  local steps, 1 (`participants`) and with `report_update_squared_norm`
  ‖u_k‖² (`update_squared_norm`). With a `LockstepInput` the clients'
  results come computed, by `local_training` (a `LocalTraining`)."""
  model_fn = model_ops.variable_model_fn(model_fn)
  weighting = client_weighting(weighting)
  aggregator = metrics_aggregator or tff.learning.metrics.sum_then_finalize
  finalizers, weights_type, data_type = _model_types(model_fn, client_input)
  if isinstance(client_input, LockstepInput):
    finalizers = LOCKSTEP_METRICS
    data_type = lockstep_data_type(weights_type)

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member
  if isinstance(client_input, LockstepInput):
    train_client = _computed_client(
      state_type, weights_type, data_type, report_update_squared_norm
    )
  else:
    train = _local_training(
      local_update,
      weighting,
      client_input,
      report_update_squared_norm,
      scheduled_batches,
    )

    @tff.tensorflow.computation(state_type, weights_type, data_type)
    def train_client(state, initial_weights, data):
      return train(model_fn(), state, initial_weights, data)

  metrics_type, statistics_type = train_client.type_signature.result[1:]
  aggregate_metrics = aggregator(finalizers, metrics_type)
  aggregate_statistics = aggregator(
    collections.OrderedDict(
      (name, _identity) for name in tff.structure.name_list(statistics_type)
    ),
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
    reports = collections.OrderedDict(train=aggregate_metrics(metrics))
    statistics = aggregate_statistics(statistics)
    for name in tff.structure.name_list(statistics_type):  # Flat, as TFF's.
      reports[name] = statistics[name]
    return tff.templates.MeasuredProcessOutput(
      state, result, tff.federated_zip(reports)
    )

  return _client_work_for(client_input, init_fn, next_fn, local_training)


def _client_work_for(client_input, init_fn, next_fn, local_training):
  """The client work of `init_fn` and `next_fn` as `client_input` takes
  it: a `LockstepClientWork` (what a client computes: `local_training`),
  a `StructClientWork`, or TFF's `ClientWorkProcess`; its hyper-parameters
  are its state's."""
  state_type = init_fn.type_signature.result.member
  get_hparams_fn, set_hparams_fn = _hparams_accessors(state_type)
  if isinstance(client_input, LockstepInput):
    return LockstepClientWork(
      init_fn, next_fn, get_hparams_fn, set_hparams_fn, local_training
    )
  if isinstance(client_input, StoredInput):
    return StructClientWork(init_fn, next_fn, get_hparams_fn, set_hparams_fn)
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
  """A lockstep client's part of a round: its computed result, training
  metrics and statistics (`_build_client_work`'s, with a definition's
  `metrics`), and with `scaled` its update's scale, from its input."""

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
    trained = (result, data['train'], statistics)
    return (*trained, data['scale']) if scaled else trained

  return computed_client


def _model_types(model_fn, client_input):
  """(metric finalizers, weights type, client data type) of the model."""
  with tf.Graph().as_default():
    model = model_fn()
    return (
      model.metric_finalizers(),
      tff.learning.models.weights_type_from_model(model),
      client_data_type(model.input_spec, client_input),
    )


def _local_training(
  local_update,
  weighting,
  client_input,
  report_update_squared_norm,
  scheduled_batches,
):
  """The client's training as a tf.function of (model, hparams, initial
  weights, data): its result (update and weight), its model's metrics and
  its statistics (see `_build_client_work`)."""

  @tf.function
  def train(model, state, initial_weights, data):
    model_ops.assign_weights(model, initial_weights)
    if isinstance(client_input, DatasetInput):
      update, steps, n = local_update(
        state,
        model,
        initial_weights,
        _first_pass_examples(data, client_input.epochs),
      )
    else:
      element = (
        read_stored(data, model.input_spec)
        if isinstance(client_input, StoredInput)
        else data.get_single_element()
      )
      fold, n = scheduled_batches(element)
      update, steps, _ = local_update(
        state, model, initial_weights, lambda fn, carry: (fold(fn, carry), n)
      )
    weight = (
      tf.cast(n, tf.float32)
      if weighting == tff.learning.ClientWeighting.NUM_EXAMPLES
      else tf.constant(1.0)
    )
    return (
      tff.learning.templates.ClientResult(update=update, update_weight=weight),
      model.report_local_unfinalized_metrics(),
      _client_statistics(steps, update, report_update_squared_norm),
    )

  return train


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


# The proximal client work's state (and `get_hparams`) key of μ.
PROXIMAL_WEIGHT = 'mu'


def build_proximal_sgd_client_work(
  model_fn: ModelFn,
  optimizer: tff.learning.optimizers.Optimizer,
  mu: float = 0.0,
  client_weighting='num_examples',
  client_input: ClientInput = ScheduledInput(),
  metrics_aggregator: MetricsAggregator | None = None,
  report_update_squared_norm: bool = False,
) -> tff.learning.templates.ClientWorkProcess:
  """Local solver of h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (FedProx, eq. 2).

  Each minibatch step feeds `optimizer` (the papers': plain SGD,
  `tff.learning.optimizers.build_sgdm(lr)`) the gradient ∇F_k(w) + μ(w − w_t).
  μ = 0 is FedAvg's local solver (McMahan et al. 2017, Algorithm 1).

  Args:
    model_fn: builds the model (a `tff.learning.models.VariableModel`), or
      a `tff.learning.models.FunctionalModel`.
    optimizer: the client optimizer.
    mu: the proximal weight μ (a hyper-parameter: `set_hparams`).
    client_weighting: 'num_examples' (n_k, the client's number of training
      examples, not of examples processed) or 'uniform' (1).
    client_input: `ScheduledInput()` (simulation) or `DatasetInput(epochs)`.
    metrics_aggregator: aggregates what the clients report besides their
      update (TFF's argument; default `tff.learning.metrics.
      sum_then_finalize`).
    report_update_squared_norm: also report Σ_k‖u_k‖² (for the update
      spread, `learning.build_process`).

  Returns:
    A ClientWorkProcess whose result is the update w_t − w_k (TFF's
    convention: a pseudo-gradient for the server optimizer) and whose
    hyper-parameters are `mu` and the optimizer's (e.g. `learning_rate`).
  """
  with tf.Graph().as_default():
    optimizer_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec([], tf.float32))
    )
  proximal_sgd = _proximal_sgd(optimizer, optimizer_hparams)
  hparams = collections.OrderedDict(
    {PROXIMAL_WEIGHT: float(mu)}, **optimizer_hparams
  )
  return _build_client_work(
    model_fn,
    hparams,
    proximal_sgd,
    client_weighting,
    client_input,
    report_update_squared_norm,
    metrics_aggregator,
    local_training=LocalTraining(
      'proximal_sgd', _weighting(client_weighting), optimizer
    ),
  )


def _proximal_sgd(optimizer, optimizer_hparams):
  """The local update of `build_proximal_sgd_client_work`: minibatch steps
  of `optimizer` on ∇F_k(w) + μ(w − w_t), from the client's state
  (μ and the optimizer's hyper-parameters `optimizer_hparams`)."""

  def proximal_sgd(state, model, initial_weights, for_each_batch):
    trainable = model.trainable_variables
    anchor = tuple(tf.nest.flatten(initial_weights.trainable))
    optimizer_state = optimizer.set_hparams(
      optimizer.initialize(tuple(tf.TensorSpec.from_tensor(w) for w in anchor)),
      collections.OrderedDict((k, state[k]) for k in optimizer_hparams),
    )

    def step(batch, carry):
      optimizer_state, steps = carry
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      weights = tuple(tf.identity(w) for w in trainable)
      gradients = tuple(
        tf.convert_to_tensor(g)  # Embeddings: IndexedSlices.
        for g in tape.gradient(loss, trainable)
      )
      # μ = 0 (FedAvg) skips the proximal term: three elementwise passes
      # over the weights per step, ~15% of a CNN step's CPU time
      # (docs/PERFORMANCE.md). Same values: g + 0·(w − w_t) = g.
      proximal_gradients = tf.cond(
        tf.equal(state[PROXIMAL_WEIGHT], 0.0),
        lambda: gradients,
        lambda: tuple(
          g + tf.cast(state[PROXIMAL_WEIGHT], g.dtype) * (w - w0)
          for g, w, w0 in zip(gradients, weights, anchor)
        ),
      )
      optimizer_state, weights = optimizer.next(
        optimizer_state, weights, proximal_gradients
      )
      for variable, value in zip(trainable, weights):
        variable.assign(value)
      return optimizer_state, steps + 1

    (_, steps), n = for_each_batch(step, (optimizer_state, tf.constant(0)))
    update = [w0 - w for w0, w in zip(anchor, trainable)]
    return (
      tf.nest.pack_sequence_as(initial_weights.trainable, update),
      steps,
      n,
    )

  return proximal_sgd


def build_gradient_client_work(
  model_fn: ModelFn,
  client_weighting='num_examples',
  client_input: ClientInput = ScheduledInput(),
  metrics_aggregator: MetricsAggregator | None = None,
  report_update_squared_norm: bool = False,
) -> tff.learning.templates.ClientWorkProcess:
  """FedSGD's client work: one full-batch gradient ∇F_k(w_t) (McMahan et al.
  2017, §2: the FedSGD baseline, E = 1, B = ∞).

  The gradient of the mean loss over all of the client's examples,
  Σ_b n_b ∇F_b / n_k over its batches (a scheduled input's whole dataset
  in chunks, its schedule unused; a `DatasetInput(epochs=1)`'s batches).
  The result is ∇F_k(w_t), weighted by n_k ('num_examples') or 1
  ('uniform'); one local step. `metrics_aggregator` and
  `report_update_squared_norm` as for `build_proximal_sgd_client_work`.
  """

  def gradient(state, model, initial_weights, for_each_batch):
    del state

    def add_batch(batch, total):
      gradient, _ = model_ops.weighted_gradient(model, batch)
      return tuple(t + g for t, g in zip(total, gradient))

    zeros = tuple(tf.zeros_like(v) for v in model.trainable_variables)
    total, n = for_each_batch(add_batch, zeros)
    gradient = [t / tf.cast(n, tf.float32) for t in total]
    return (
      tf.nest.pack_sequence_as(initial_weights.trainable, gradient),
      tf.constant(1),
      n,
    )

  if isinstance(client_input, DatasetInput) and client_input.epochs != 1:
    raise ValueError(
      'a full-batch gradient is one pass (E = 1), got '
      f'DatasetInput(epochs={client_input.epochs})'
    )
  return _build_client_work(
    model_fn,
    collections.OrderedDict(),
    gradient,
    client_weighting,
    client_input,
    report_update_squared_norm,
    metrics_aggregator,
    scheduled_batches=_whole_dataset,
    local_training=LocalTraining('gradient', _weighting(client_weighting)),
  )
