"""Compiled clients: a round's local training, its clients one after
another in one XLA-compiled loop, in this process.

One client's step (`ClientTraining.step`: the gradient of its batch's
loss, the proximal term, the client optimizer's step) is a few dozen
small ops. Run by TensorFlow's executor, each op costs its dispatch, which
for the papers' small models is most of a step (docs/PERFORMANCE.md,
"Compiled clients"); compiled by XLA with the loop around it, the round is
one program. The clients keep their own order of minibatches
(`sampling.ClientSampler.minibatch_schedule`), each starts from w_t with a
fresh optimizer state, and each batch is padded to B with the padding
masked out of its mean: a client computes what it computes alone, in
float32, with only the order of some sums differing, so the models agree
to float32 rounding with the per-client path's
(tests/simulation/test_lockstep.py).

XLA compiles a program for each shape of its inputs: a round's steps and
clients are padded to the next power of two (`bucket`), so that a run
compiles a few programs, not one a round; the padding is never stepped.

No lanes: where TensorFlow's per-op cost dominates, many clients' copies
of the model stepped at once (`simulation.lockstep`) share that cost, but
compiled the cost is gone (benchmarks/step_cost.py), and one client's
steps in sequence do the least arithmetic: a round is its clients' steps,
not its longest client's steps times the lanes.
"""

from __future__ import annotations

import collections
import functools
import re

import numpy as np
import tensorflow as tf

from tff_algos.learning import client_definition
from tff_algos.learning.client_work import PROXIMAL_WEIGHT

# The fewest steps and clients a compiled round is shaped for.
MIN_BUCKET = 16


def bucket(n: int) -> int:
  """The size a compiled round pads `n` steps or clients to: the next
  power of two, at least MIN_BUCKET."""
  return max(MIN_BUCKET, 1 << max(int(n) - 1, 0).bit_length())


# Layers XLA's CPU code runs slower than TensorFlow's own kernels do per
# client (benchmarks/cohort.py): convolutions (FedAvg's MNIST CNN, K = 10,
# E = 5: 618 s a round compiled against 65 s per client) and recurrent
# layers (FedProx's Sent140 LSTM, K = 10, E = 1: 5.0 s against 1.3 s).
_SLOW_LAYERS = (
  tf.keras.layers.Conv1D,
  tf.keras.layers.Conv2D,
  tf.keras.layers.Conv3D,
  tf.keras.layers.Conv2DTranspose,
  tf.keras.layers.DepthwiseConv2D,
  tf.keras.layers.SeparableConv2D,
  tf.keras.layers.RNN,
)


def unpaying(layers) -> str | None:
  """Why compiled clients are not faster than per client for a model of
  `layers` (a phrase for the run's header), or None if they are."""
  slow = [layer.name for layer in layers if isinstance(layer, _SLOW_LAYERS)]
  if slow:
    return f"XLA's CPU code runs its layers {', '.join(slow)} slower"
  return None


def unsupported(step) -> str | None:
  """Why XLA cannot compile `step` (a client's step, traced:
  `ClientTraining.traced`), or None if it can: an op it has no kernel
  for (a phrase for the run's header)."""
  specs, _ = step.structured_input_signature
  flat = tf.function(  # XLA's IR takes flat TensorSpecs.
    lambda *args: step(*tf.nest.pack_sequence_as(specs, args)),
    jit_compile=True,
    autograph=False,
  )
  try:
    flat.experimental_get_compiler_ir(*tf.nest.flatten(specs))(stage='hlo')
  except (ValueError, tf.errors.InvalidArgumentError) as e:
    ops = re.findall(r'(\w+) \(No registered', str(e))
    if ops:
      return f"XLA has no kernel for its step's {', '.join(sorted(set(ops)))}"
    return f'XLA cannot compile its step ({str(e).strip().splitlines()[0]})'
  return None


class ClientTraining:
  """A run's local training of one client, without its data: its fresh
  state and one step, as TensorFlow functions of tensors."""

  def __init__(self, model_fn, local, specs):
    self._model_fn = model_fn
    self._local = local
    self.specs = specs
    self.gradient = local.kind == 'gradient'

  @property
  def hparam_names(self) -> list[str]:
    """The client work's hyper-parameters a round takes: the proximal
    weight and the client optimizer's (none for the gradient kind)."""
    if self.gradient:
      return []
    return [PROXIMAL_WEIGHT, *self.optimizer_hparams]

  @functools.cached_property
  def optimizer_hparams(self) -> list[str]:
    with tf.Graph().as_default():
      optimizer = self._local.optimizer
      return list(optimizer.get_hparams(optimizer.initialize(self.specs)))

  def objective(self, weights, x, y, mask):
    """(what the client differentiates, its batch's mean loss): the mean
    of the real examples' losses (`mask`) plus the regularization; the
    gradient kind: n_b times it, as `model_ops.weighted_gradient`."""
    prediction, regularization = self._model_fn.predict(weights, x)
    examples = self._model_fn.example_losses(y, prediction)
    total = tf.reduce_sum(examples * mask)
    mean = total / tf.maximum(tf.reduce_sum(mask), 1.0)
    regularization = tf.add_n([tf.constant(0.0)] + regularization)
    if self.gradient:
      return total + tf.reduce_sum(mask) * regularization, mean
    return mean + regularization, mean

  def hparam_specs(self):
    return {name: tf.TensorSpec([], tf.float32) for name in self.hparam_names}

  def traced(self, batch, proximal):
    """(`fresh_state`, `step` with the proximal term or without) traced for
    a batch of `batch` (TensorSpecs of its features, by name): what a
    compiled round calls."""
    fresh = tf.function(
      self.fresh_state, autograph=False
    ).get_concrete_function(list(self.specs), self.hparam_specs())
    step = tf.function(
      self.step_function(proximal), autograph=False
    ).get_concrete_function(*self.step_specs(batch, fresh))
    return fresh, step

  def step_specs(self, batch, fresh=None):
    """The TensorSpecs of `step`'s arguments but `proximal`, for a batch of
    `batch` (TensorSpecs of its features, by name)."""
    weights = list(self.specs)
    fresh = fresh or tf.function(
      self.fresh_state, autograph=False
    ).get_concrete_function(weights, self.hparam_specs())
    state = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), fresh.structured_outputs[1]
    )
    mask = tf.TensorSpec(tf.nest.flatten(batch)[0].shape[:1], tf.float32)
    return weights, state, batch, mask, weights, self.hparam_specs()

  def fresh_state(self, global_weights, hparams):
    """What a client starts from: w_t, and a fresh client optimizer state
    at `hparams` (the gradient kind: a zero sum)."""
    weights = [tf.identity(w) for w in global_weights]
    if self.gradient:
      return weights, [tf.zeros_like(w) for w in weights]
    optimizer = self._local.optimizer
    return weights, optimizer.set_hparams(
      optimizer.initialize(tuple(self.specs)),
      collections.OrderedDict((k, hparams[k]) for k in self.optimizer_hparams),
    )

  def step_function(self, proximal):
    """`step` with the proximal term or without: a function of the rest of
    its arguments."""
    return lambda *args: self.step(*args, proximal=proximal)

  def step(
    self, weights, state, batch, mask, global_weights, hparams, proximal
  ):
    """One step on `batch`: (weights, state, the batch's mean loss). The
    client optimizer on ∇F + μ(w − w_t) (without the term if not
    `proximal`: μ = 0 gives the same values, as the per-client path
    skips it); the gradient kind adds the gradient to its sum (`state`)
    and keeps w_t."""
    with tf.GradientTape() as tape:
      tape.watch(weights)
      objective, mean = self.objective(weights, batch['x'], batch['y'], mask)
    gradients = [
      tf.convert_to_tensor(g)  # A gather's gradient: IndexedSlices.
      for g in tape.gradient(objective, weights)
    ]
    if self.gradient:
      return weights, [a + g for a, g in zip(state, gradients)], mean
    if proximal:
      gradients = [
        g + hparams[PROXIMAL_WEIGHT] * (w - w_t)
        for g, w, w_t in zip(gradients, weights, global_weights)
      ]
    state, stepped = self._local.optimizer.next(
      state, tuple(weights), tuple(gradients)
    )
    return list(stepped), state, mean


def round_function(fresh, step, specs, gradient: bool):
  """The compiled round (`run_round`) of clients that start from
  `fresh(global weights, hparams)` and take `step`s (traced functions of
  `ClientTraining`: see `ClientTraining.traced`), with weights of
  `specs`: a tf.function XLA compiles for each shape of its inputs."""
  return tf.function(
    functools.partial(run_round, fresh, step, specs, gradient),
    jit_compile=True,
    autograph=False,
  )


def run_round(
  fresh,
  step,
  specs,
  gradient,
  global_weights,
  hparams,
  data,
  indices,
  valid,
  starts,
  clients,
):
  """The steps of the round's `clients` clients, one after another: client
  k takes the minibatches `indices[starts[k]:starts[k + 1]]` (example
  indices into `data`, each padded to B, `valid` its real examples) from
  w_t. Returns (per client, by weight tensor: w_t − w, or for the
  gradient kind Σ_b n_b ∇F_b; per client: Σ_b n_b × its batch's mean
  loss), shaped for the len(starts) − 1 clients the round is padded to
  (zeros after its last)."""
  shaped_for = starts.shape[0] - 1
  outputs = [tf.zeros([shaped_for, *spec.shape]) for spec in specs]
  loss_sums = tf.zeros([shaped_for])

  def one_client(k, outputs, loss_sums):
    weights, state = fresh(global_weights, hparams)

    def one_step(s, weights, state, loss_sum):
      mask = valid[s]
      weights, state, mean = step(
        weights,
        state,
        {name: tf.gather(values, indices[s]) for name, values in data.items()},
        mask,
        global_weights,
        hparams,
      )
      return s + 1, weights, state, loss_sum + mean * tf.reduce_sum(mask)

    _, weights, state, loss_sum = tf.while_loop(
      lambda s, *_: s < starts[k + 1],
      one_step,
      (starts[k], weights, state, tf.constant(0.0)),
    )
    result = (
      state
      if gradient
      else [w_t - w for w, w_t in zip(weights, global_weights)]
    )
    at = tf.reshape(k, [1, 1])
    return (
      k + 1,
      [
        tf.tensor_scatter_nd_update(o, at, r[None])
        for o, r in zip(outputs, result)
      ],
      tf.tensor_scatter_nd_update(loss_sums, at, loss_sum[None]),
    )

  _, outputs, loss_sums = tf.while_loop(
    lambda k, *_: k < clients, one_client, (0, outputs, loss_sums)
  )
  return outputs, loss_sums


def layout(minibatches, batch_size):
  """A round's clients' minibatches ((example indices, in order; each
  batch's size) by client) laid out one client after another: (indices,
  valid: [bucket(steps), B], starts: [bucket(clients) + 1]), the padding
  never stepped."""
  sizes = np.concatenate([np.zeros(0, np.int64)] + [s for _, s in minibatches])
  steps = len(sizes)
  indices = np.zeros((bucket(steps), batch_size), np.int32)
  valid = np.zeros((bucket(steps), batch_size), np.float32)
  rows = np.repeat(np.arange(steps), sizes)
  columns = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
  indices[rows, columns] = np.concatenate(
    [np.zeros(0, np.int64)] + [i for i, _ in minibatches]
  )
  valid[rows, columns] = 1.0
  starts = np.full(bucket(len(minibatches)) + 1, steps, np.int32)
  starts[: len(minibatches)] = np.cumsum(
    [0] + [len(s) for _, s in minibatches]
  )[:-1]
  return indices, valid, starts


# A client work defined once (`learning.ClientDefinition`), compiled: the
# round below runs any definition's `init`, `step`s and `final`, and names
# none of its hyper-parameters. (The built-in proximal SGD and gradient
# client works keep `ClientTraining` above for now.)


class DefinedClients:
  """A definition's clients (`learning.DefinedTraining`), without their
  data: one client's training, and the round of many, as TensorFlow
  functions XLA compiles."""

  def __init__(self, model_fn, local, specs, batch):
    self._model_fn = model_fn
    self._local = local
    self.specs = list(specs)
    self.batch = batch  # TensorSpecs of a batch's features, by name.

  @property
  def definition(self):
    return self._local.definition

  def hparam_specs(self):
    return client_definition.hparam_specs(self.definition)

  def result(self, shared, state, examples, steps, loss_sum):
    """A client's result, by name: its `final`'s (update, weight, scale
    if it gives one, metrics) and its training loss sum."""
    update, weight, scale, metrics = client_definition.finish(
      self.definition,
      shared,
      state,
      client_definition.ClientInfo(examples, steps),
      self._local.weighting,
    )
    result = collections.OrderedDict(update=update, weight=weight)
    if scale is not None:
      result['scale'] = scale
    result.update(metrics=metrics, loss_sum=loss_sum)
    return result

  def one_step(self, state, batch, mask):
    """(the state after a step on the padded `batch`, its mean loss times
    its real examples)."""
    masked = client_definition.MaskedBatch(self._model_fn, batch, mask)
    state = self.definition.step(state, masked)
    return state, masked.mean_loss * masked.examples

  def checked(self):
    """`init`, one step and `final` traced for one batch: what XLA must
    compile (`unsupported`), and what the run's provenance hashes."""

    def one_batch(global_weights, hparams, batch, mask, examples):
      shared = client_definition.Shared(list(global_weights), hparams)
      state, loss_sum = self.one_step(self.definition.init(shared), batch, mask)
      # The state too: what a step carries to the next is computed by the
      # round, whether or not `final` reads it.
      return (
        self.result(shared, state, examples, tf.constant(1), loss_sum),
        state,
      )

    mask = tf.TensorSpec(tf.nest.flatten(self.batch)[0].shape[:1], tf.float32)
    return tf.function(one_batch, autograph=False).get_concrete_function(
      self.specs,
      self.hparam_specs(),
      self.batch,
      mask,
      tf.TensorSpec([], tf.float32),
    )

  def client(
    self, global_weights, hparams, data, indices, valid, start, end, examples
  ):
    """Client k's training: from w_t, the minibatches
    `indices[start:end]` (padded to B, `valid` its real examples)."""
    shared = client_definition.Shared(list(global_weights), hparams)

    def one_step(s, state, loss_sum):
      batch = {
        name: tf.gather(values, indices[s]) for name, values in data.items()
      }
      state, loss = self.one_step(state, batch, valid[s])
      return s + 1, state, loss_sum + loss

    _, state, loss_sum = tf.while_loop(
      lambda s, *_: s < end,
      one_step,
      (start, self.definition.init(shared), tf.constant(0.0)),
    )
    return self.result(shared, state, examples, end - start, loss_sum)

  def run_round(
    self,
    global_weights,
    hparams,
    data,
    indices,
    valid,
    starts,
    examples,
    clients,
  ):
    """The round's `clients` clients, one after another (`layout`): their
    results by name, each shaped for the len(starts) − 1 clients the
    round is padded to (zeros after its last)."""
    shaped_for = starts.shape[0] - 1
    outputs = tf.nest.map_structure(
      lambda s: tf.zeros([shaped_for, *s.shape], s.dtype),
      self._result_specs,
    )

    def one_client(k, outputs):
      result = self.client(
        global_weights,
        hparams,
        data,
        indices,
        valid,
        starts[k],
        starts[k + 1],
        examples[k],
      )
      at = tf.reshape(k, [1, 1])
      return k + 1, tf.nest.map_structure(
        lambda o, r: tf.tensor_scatter_nd_update(o, at, r[None]),
        outputs,
        result,
      )

    _, outputs = tf.while_loop(
      lambda k, *_: k < clients, one_client, (0, outputs)
    )
    return outputs

  @functools.cached_property
  def _result_specs(self):
    return tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype),
      self.checked().structured_outputs[0],
    )


def defined_refusal(model_fn, local, batch_size, paying) -> str | None:
  """Why a definition's clients (`local`, of a model of `model_fn`)
  train per client rather than compiled, or None: compiled clients are
  not faster for the model (`paying`: the executions
  `lockstep.executions` found faster, without 'compiled'), or XLA cannot
  compile its work (`unsupported`)."""
  if 'compiled' not in paying:
    return f'compiled clients are slower here ({_unpaying_reason(model_fn)})'
  clients = DefinedClients(
    model_fn, local, _weight_specs(model_fn), _batch_specs(model_fn, batch_size)
  )
  try:
    traced = clients.checked()
  except Exception as e:  # A definition XLA's tracing refuses: say why.
    return (
      f'its client work does not trace as TensorFlow functions of tensors '
      f'({type(e).__name__}: {str(e).strip().splitlines()[0]})'
    )
  return unsupported(traced)


def _unpaying_reason(model_fn) -> str:
  with tf.Graph().as_default():
    return unpaying(list(_layers(model_fn.keras_model_fn()))) or 'measured'


def _layers(model):
  for layer in model.layers:
    yield layer
    if isinstance(layer, tf.keras.Model):
      yield from _layers(layer)


def _weight_specs(model_fn):
  with tf.Graph().as_default():
    model = model_fn.keras_model_fn()
    return [tf.TensorSpec(w.shape, tf.float32) for w in model.trainable_weights]


def _batch_specs(model_fn, batch_size):
  return {
    name: tf.TensorSpec([max(batch_size, 1), *spec.shape[1:]], spec.dtype)
    for name, spec in model_fn.input_spec.items()
  }


class DefinitionEngine:
  """The clients of a run whose client work is a definition, trained in
  this process: compiled (`DefinedClients`), their results handed to the
  process as `learning.LockstepInput`s (as `lockstep.Engine` does for the
  built-in client works)."""

  def __init__(
    self,
    process,
    train_arrays,
    batch_size,
    client_tensors,
    execution='compiled by XLA',
  ):
    self._local = process.local_training
    self._mean_of_updates = process.mean_of_updates
    self._sizes = np.array([len(next(iter(a.values()))) for a in train_arrays])
    self._data, self._offsets = client_tensors.with_offsets(train_arrays)
    self._batch_size = batch_size
    weights = process.get_model_weights.type_signature.result
    self._clients = DefinedClients(
      process.model_fn,
      self._local,
      [tf.TensorSpec(w.shape, tf.float32) for w in weights.trainable],
      {
        name: tf.TensorSpec([batch_size, *data.shape[1:]], data.dtype)
        for name, data in self._data.items()
      },
    )
    self._round = tf.function(
      self._clients.run_round, jit_compile=True, autograph=False
    )
    self.execution = execution

  def fingerprint(self) -> str:
    """The SHA-256 of a client's work traced for one batch (the model,
    its loss and the definition)."""
    from tff_algos.runtime import fingerprint

    graph = self._clients.checked().graph.as_graph_def()
    return fingerprint.graph_sha256(graph)

  def inputs(self, state, schedules, round_num):
    """The round's client inputs (`learning.LockstepInput`) for
    `schedules` ((client index, example order, batch ends) each), from
    the process state `state`."""
    del round_num  # The schedules hold the round's draws.
    if not schedules:  # A DP round without clients: noise on a zero sum.
      return []
    minibatches = [self._minibatches(*schedule) for schedule in schedules]
    clients = len(schedules)
    examples = np.zeros(bucket(clients), np.float32)
    examples[:clients] = [self._sizes[c] for c, _, _ in schedules]
    outputs = self._round(
      [
        tf.constant(w, tf.float32) for w in state.global_model_weights.trainable
      ],
      {k: tf.constant(v, tf.float32) for k, v in state.client_work.items()},
      self._data,
      *layout(minibatches, self._batch_size),
      examples,
      tf.constant(clients, tf.int32),
    )
    results = tf.nest.map_structure(lambda t: t.numpy()[:clients], outputs)
    results['steps'] = np.array([len(s) for _, s in minibatches], np.int32)
    results['examples'] = np.array(
      [np.sum(s) for _, s in minibatches], np.int64
    )
    if self._mean_of_updates:
      return [_one_input(results)]
    return [
      _input(tf.nest.map_structure(lambda a, k=k: a[k], results))
      for k in range(clients)
    ]

  def _minibatches(self, client, order, ends):
    """A client's minibatches: (the indices into the resident data of their
    examples, in order; each one's size)."""
    ends = np.asarray(ends, np.int64)
    used = ends[-1] if len(ends) else 0
    return (
      self._offsets[client] + np.asarray(order[:used]),
      np.diff(ends, prepend=0),
    )


def _input(client, participants=1):
  """A `learning.LockstepInput` of a client's (or, summed, of many
  clients') results: `client_definition.computed_data_type`'s fields."""
  squared_norm = client.get('squared_norm')
  if squared_norm is None:
    squared_norm = sum(
      np.sum(np.square(u, dtype=np.float64)) for u in client['update']
    )
  data = collections.OrderedDict(
    update=[np.asarray(u, np.float32) for u in client['update']],
    weight=np.float32(client['weight']),
    local_steps=np.int32(client['steps']),
    participants=np.int32(participants),
    update_squared_norm=np.float64(squared_norm),
    train=collections.OrderedDict(
      loss=[np.float32(client['loss_sum']), np.float32(client['examples'])],
      num_examples=[np.int64(client['examples'])],
      num_batches=[np.int64(client['steps'])],
    ),
  )
  if 'scale' in client:
    data['scale'] = np.float32(client['scale'])
  if client['metrics']:
    data['metrics'] = collections.OrderedDict(
      (name, np.asarray(value)) for name, value in client['metrics'].items()
    )
  return data


def _one_input(results):
  """The round's clients as the one input a mean aggregates alike
  (`learning.LockstepProcess.mean_of_updates`): their updates' and
  scales' weighted means (the float32 sums TFF's mean adds), with the sum
  of their weights, statistics and metrics."""
  weights = results['weight']
  total = np.float32(np.sum(weights, dtype=np.float32))
  summed = collections.OrderedDict(
    update=[
      np.tensordot(weights, u, axes=1) / total for u in results['update']
    ],
    weight=total,
    squared_norm=sum(
      np.sum(np.square(u, dtype=np.float64)) for u in results['update']
    ),
    metrics=collections.OrderedDict(
      (name, np.sum(v, dtype=v.dtype)) for name, v in results['metrics'].items()
    ),
    loss_sum=np.sum(results['loss_sum'], dtype=np.float64),
    steps=np.sum(results['steps']),
    examples=np.sum(results['examples']),
  )
  if 'scale' in results:
    summed['scale'] = np.dot(weights, results['scale']) / total
  return _input(summed, participants=len(weights))
