"""Clients trained in this process: a round's local training for all of its
clients here, instead of a TFF call per client; in lanes (below), or
compiled (`Engine` with `compile_clients`: `simulation.compiled`, the
clients one after another in one XLA program).

A simulation runs the client work of a `learning.LockstepProcess` here and
hands the process each client's result (`learning.LockstepInput`): its
update, weight, local steps and training loss. The process then does what
it does with its own client work's results: the model aggregator sees each
client's update (DP clipping and noise, compression, robust aggregation
are unchanged), the metrics aggregator sums the rest, the server optimizer
steps. What crosses to the TFF worker each round is the clients' updates,
not their data.

How lanes work: the round's clients are packed into `slots` lanes, longest first into
the least loaded lane; every lane holds a copy of the model weights (and
of the client optimizer's state), and one step advances every lane by one
minibatch: a client's first step starts from w_t, its last writes w_t − w
to its row of the output. A client takes whole passes of UNROLL steps (its
last padded with steps in which its lane does nothing), so that lanes
start and finish clients only between passes. The model is the task's
Keras model built with the lanes' weights as tensors
(`learning.model_ops.KerasModelFn`), vectorized over the lanes with
`tf.vectorized_map`; each lane's batch is
padded to B, and the padding is masked out of the loss. A client computes
exactly what it computes alone: the same minibatches in the same order
(`sampling.ClientSampler.minibatch_schedule`), the same optimizer steps,
in float32; only the order of some float32 sums differs, so the models
agree to float32 rounding (tests/simulation/test_lockstep.py).

What it needs, else the run uses the per-client path and its header says
why (`executions`): a process built by `learning.build_process` with
TFF's broadcast (no model distributor of its own), a task whose model_fn
is a `KerasModelFn` (the tasks' models are) with a loss that averages its
examples and no layer that draws randomness or batch statistics in
training (dropout, batch normalization), and a local run (remote workers
train clients where they are).

The training metrics it reports (`metrics['client_work']['train']`) are
the model wrapper's loss and counters (loss, num_examples, num_batches),
not the model's own Keras metrics (accuracy over the training batches):
nothing the package records reads them.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tff_algos import learning
from tff_algos.learning import model_ops
from tff_algos.learning.client_work import PROXIMAL_WEIGHT
from tff_algos.runtime import tracing
from tff_algos.simulation import compiled
from tff_algos.simulation import evaluation

# The most lanes a round's computation takes (benchmarks/cohort.py: the
# MNIST MLR at K = 1,000); the lane counts it is traced for, each once
# (`lanes`).
MAX_SLOTS = 64
_LANE_COUNTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
# --client_execution=auto trains no model of more weights in lanes: its
# steps are arithmetic, which the lanes do not make cheaper
# (`executions`).
MAX_WEIGHTS = 50_000
# Steps per pass of the round's loop: a pass's own cost (its loop
# variables' control flow, and the branches that start and finish clients)
# is shared by this many steps: each client takes whole passes, its last
# padded with steps of no lane. (Measured on Synthetic(1,1), K = 10, E =
# 20: 1.2-1.7x faster than a branch each step; the MNIST MLR at K = 100,
# E = 1, whose clients take 1-2 passes, about as fast: docs/PERFORMANCE.md.)
UNROLL = 4
# A full-batch gradient's chunk (the per-client path's too).
CHUNK_SIZE = model_ops.CHUNK_SIZE
# Layers whose training pass draws randomness or reads the batch: a lane
# cannot reproduce them client by client.
_STOCHASTIC_LAYERS = (
  tf.keras.layers.Dropout,
  tf.keras.layers.GaussianNoise,
  tf.keras.layers.GaussianDropout,
  tf.keras.layers.BatchNormalization,
)


# How each execution in this process is named in a run's header and
# provenance ("clients trained ...").
EXECUTIONS = {'compiled': 'compiled by XLA', 'lockstep': 'lockstep'}


def executions(
  model_fn, requested: str = 'auto', workers: str = ''
) -> tuple[tuple[str, ...], str | None]:
  """(the executions in this process that clients training `model_fn`'s
  model may take, the first preferred, if the algorithm's builder takes
  `learning.LockstepInput`: 'compiled' (`simulation.compiled`) and
  'lockstep'; why none, a phrase for the run's header). Decided before
  any process is built, so that a run that will train per client builds
  one process only. --client_execution=`requested`: 'compiled' or
  'lockstep' asks for that one; 'auto' takes those that are faster than
  per client on this machine's CPU (`compiled.unpaying`, `_lanes_unpaying`;
  measured with benchmarks/cohort.py, docs/PERFORMANCE.md)."""
  if workers:
    return (), 'remote workers train the clients where they are'
  if not isinstance(model_fn, model_ops.KerasModelFn):
    return (), (
      "the task's model_fn is not a learning.model_ops.KerasModelFn "
      '(a Keras model with its loss)'
    )
  with tf.Graph().as_default():
    model = model_fn.keras_model_fn()
    loss = model_fn.loss_fn()
    layers = list(_layers(model))
    weights = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
  stochastic = [
    layer.name for layer in layers if isinstance(layer, _STOCHASTIC_LAYERS)
  ]
  if stochastic:
    return (), (
      f"the model's layers {', '.join(stochastic)} draw randomness or "
      'batch statistics in training'
    )
  if getattr(loss, 'reduction', None) not in (
    tf.keras.losses.Reduction.AUTO,
    tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE,
  ):
    return (), "the model's loss is not a mean over the batch's examples"
  if requested != 'auto':
    return (requested,), None
  unpaying = {
    'compiled': compiled.unpaying(layers),
    'lockstep': _lanes_unpaying(layers, weights),
  }
  paying = tuple(e for e, why in unpaying.items() if why is None)
  if paying:
    return paying, None
  return (), (
    f'{unpaying["compiled"]} and {unpaying["lockstep"]}, so they train '
    'faster per client (--client_execution=compiled or lockstep trains '
    'them here)'
  )


def _lanes_unpaying(layers, weights):
  """Why lanes are not faster than per client for a model of `layers`
  and `weights` (None if they are): a recurrent model's time loop runs
  lane by lane (Sent140's LSTM, K = 10, took 8.4 s a round against 1.1 s
  per client), and more than MAX_WEIGHTS weights make the lanes' batched
  matrix products cost more than the per-client overhead saved (the MNIST
  2NN, 199,210 weights, K = 10: 1.25 s against 0.57 s)."""
  recurrent = [
    layer.name for layer in layers if isinstance(layer, tf.keras.layers.RNN)
  ]
  if recurrent:
    return (
      f'lanes run its recurrent layers ({", ".join(recurrent)}) lane by lane'
    )
  if weights > MAX_WEIGHTS:
    return f'lanes of its {weights:,} weights (over {MAX_WEIGHTS:,}) cost more'
  return None


def _layers(model):
  for layer in model.layers:
    yield layer
    if isinstance(layer, tf.keras.Model):
      yield from _layers(layer)


@dataclasses.dataclass(frozen=True)
class RoundPlan:
  """One round's clients packed into lanes (numpy; see the module
  docstring). `indices`, `valid`: [steps, slots, batch] examples (indices
  into the resident data) and whether each is real; a pass is UNROLL
  steps, and `start`: [passes, slots] a client's first pass; `finish`:
  [passes, slots] the client (its position among the round's) whose last
  pass it is, else -1."""

  indices: np.ndarray
  valid: np.ndarray
  start: np.ndarray
  finish: np.ndarray


def lanes(
  batches: Sequence[Sequence[np.ndarray]], traced: Sequence[int] = ()
) -> int:
  """How many lanes a round's clients (their minibatches) take: about the
  fewest in which the longest client sets the round's steps (where a
  step's cost is TensorFlow's per op, a lane costs about as much as a
  client alone): a count the computation is already `traced` for if it
  has at most twice the lanes needed (a trace costs seconds), else the
  next of _LANE_COUNTS; at most MAX_SLOTS."""
  passes = _passes(batches)
  needed = min(-(-sum(passes) // max(passes, default=1)), MAX_SLOTS)
  reused = [n for n in traced if needed <= n <= 2 * needed]
  if reused:
    return min(reused)
  return next(n for n in _LANE_COUNTS if n >= needed)


def _passes(batches):
  """The passes each client takes: whole ones, so that a lane starts and
  finishes clients only between passes; a client without batches takes
  one pass of no examples (and finishes with an update of zero)."""
  return [max(-(-len(b) // UNROLL), 1) for b in batches]


def pack(
  batches: Sequence[Sequence[np.ndarray]],
  slots: int,
  batch_size: int,
) -> RoundPlan:
  """The plan of clients whose minibatches (example indices into the
  resident data, per step) are `batches`: each client into the least
  loaded of `slots` lanes, the longest first."""
  passes = _passes(batches)
  load, lanes = [0] * slots, [[] for _ in range(slots)]
  for client in sorted(range(len(batches)), key=lambda c: -len(batches[c])):
    lane = int(np.argmin(load))
    lanes[lane].append(client)
    load[lane] += passes[client]
  steps = max(load, default=0) * UNROLL
  indices = np.zeros((steps, slots, batch_size), np.int32)
  valid = np.zeros((steps, slots, batch_size), np.float32)
  start = np.zeros((steps // UNROLL, slots), bool)
  finish = np.full((steps // UNROLL, slots), -1, np.int32)
  for lane, clients in enumerate(lanes):
    at = 0  # The lane's next pass.
    for client in clients:
      start[at, lane] = True
      for step, batch in enumerate(batches[client], at * UNROLL):
        indices[step, lane, : len(batch)] = batch
        valid[step, lane, : len(batch)] = 1.0
      at += passes[client]
      finish[at - 1, lane] = client
  return RoundPlan(indices, valid, start, finish)


# Rounds traced in this process, by the content of what shapes them
# (`_round_key`), least recently used first. Runs in one process (a
# notebook's, a loop of runs, the tests') whose clients train by the same
# step reuse the round's trace and TensorFlow's instantiation of it: about
# 0.4-0.9 of a 3-round run's 3.4-5.3 CPU-s (docs/PERFORMANCE.md, "A round's
# trace, reused"). The memo is this module's, so a reloaded module, whose
# round code may differ, starts without it.
_ROUNDS: collections.OrderedDict = collections.OrderedDict()
_MAX_ROUNDS = 16


class Engine:
  """The client work of one run trained in this process: its process's
  model and local training, the clients' training data resident here, and
  the computation of a round (built once), compiled (`simulation.compiled`,
  with `compile_clients` where XLA compiles the step) or in lanes."""

  def __init__(
    self,
    process: learning.LockstepProcess,
    train_arrays: Sequence[Mapping[str, np.ndarray]],
    batch_size: int,
    client_tensors: evaluation.ClientTensors | None = None,
    compile_clients: bool = False,
  ):
    self._mean_of_updates = process.mean_of_updates
    self._sizes = np.array([len(next(iter(a.values()))) for a in train_arrays])
    tensors = client_tensors or evaluation.ClientTensors()
    self._data, self._offsets = tensors.with_offsets(train_arrays)
    # The weights' shapes from the process's type: no computation runs
    # before the run's folder (and the worker's log) is known.
    weights = process.get_model_weights.type_signature.result
    self._training = LaneTraining(
      process.model_fn,
      process.local_training,
      [tf.TensorSpec(w.shape, tf.float32) for w in weights.trainable],
    )
    self._gradient = self._training.gradient
    if self._gradient:  # One pass in chunks, as the per-client path.
      batch_size = int(min(self._sizes.max(), CHUNK_SIZE))
    elif batch_size < 1:  # B = ∞: a client's minibatch is all its data,
      batch_size = int(max(self._sizes.max(), 1))  # masked to its n_k.
    self._batch_size = batch_size
    self._weighting = process.local_training.weighting
    # (Lanes, whether μ ≠ 0) → the round's computation, traced for them.
    self._rounds = {}
    # One step of all lanes as a function of its own: TensorFlow optimizes
    # it whole (measured: ~135 against ~200 µs a step inlined in the loop,
    # Synthetic(1,1), 4 lanes). XLA did not pay here: compiling the
    # vectorized step did not finish in 5 minutes, and a compiled MLR step
    # ran at half the speed (benchmark notes, docs/PERFORMANCE.md).
    self._steps = {
      proximal: tf.function(
        self._training.step_function(proximal), autograph=False
      )
      for proximal in (False, True)
    }
    self._fresh_state = tf.function(self._training.fresh_state, autograph=False)
    # With `compile_clients`: the round's clients one after another, in
    # an XLA-compiled loop (`simulation.compiled`), with or without μ;
    # else, or where XLA cannot compile the step, in lanes.
    # Whether μ ≠ 0 → a client's traced functions, the compiled round.
    self._client_traced, self._compiled_rounds = {}, {}
    refused = compile_clients and compiled.unsupported(
      self._client_functions(not self._gradient)[1]
    )
    self._compiled = compile_clients and not refused
    # How the clients train (a run's header and provenance say so).
    self.execution = EXECUTIONS['compiled' if self._compiled else 'lockstep']
    if refused:
      self.execution += f' ({refused})'

  def inputs(self, state, schedules, round_num):
    """The round's client inputs (`learning.LockstepInput`), one per
    client of `schedules` ((client index, example order, batch ends) each,
    as the sampler drew them), from the process state `state` (its global
    model and client work hyper-parameters)."""
    del round_num  # The schedules hold the round's draws.
    if not schedules:  # A DP round without clients: noise on a zero sum.
      return []
    minibatches = [self._minibatches(*schedule) for schedule in schedules]
    proximal = bool(state.client_work.get(PROXIMAL_WEIGHT, 0.0))
    arguments = (
      [
        tf.constant(w, tf.float32) for w in state.global_model_weights.trainable
      ],
      {k: tf.constant(v, tf.float32) for k, v in state.client_work.items()},
      self._data,
    )
    if self._compiled:
      updates, losses = self._compiled_round(proximal)(
        *arguments,
        *compiled.layout(minibatches, self._batch_size),
        tf.constant(len(schedules), tf.int32),
      )
    else:
      updates, losses = self._in_lanes(minibatches, proximal, arguments)
    updates = [u.numpy()[: len(schedules)] for u in updates]
    steps = np.array([len(sizes) for _, sizes in minibatches], np.int32)
    if self._gradient:  # ∇F_k = Σ_b n_b ∇F_b / n_k, as the per-client path.
      n = np.array(
        [self._sizes[client] for client, _, _ in schedules], np.float32
      )
      updates = [u / n.reshape((-1,) + (1,) * (u.ndim - 1)) for u in updates]
    computed = Computed(
      updates,
      np.array([self._weights[c] for c, _, _ in schedules], np.float32),
      steps if not self._gradient else np.ones_like(steps),
      sum(
        np.sum(np.square(u, dtype=np.float64), axis=tuple(range(1, u.ndim)))
        for u in updates
      ),
      losses.numpy()[: len(schedules)],
      np.array([np.sum(sizes) for _, sizes in minibatches], np.int64),
    )
    if self._mean_of_updates:
      return [computed.one_input()]
    return computed.inputs()

  def fingerprint(self) -> str:
    """The SHA-256 of the step the clients train by (the model, its loss,
    the gradient and the client optimizer's step, traced for one lane):
    with lockstep clients the learning process's own computations do not
    hold the model's training step, so a run records this too
    (`provenance`). The step alone, not the round around it: the round's
    trace costs several times the step's, and the round is the package's
    code, which the provenance records apart."""
    from tff_algos.runtime import fingerprint

    step = (
      self._client_functions(not self._gradient)[1]
      if self._compiled
      else self._step_for(1, not self._gradient)
    )
    return fingerprint.graph_sha256(step.graph.as_graph_def())

  def _client_functions(self, proximal):
    """A client's fresh state and step, traced for one batch
    (`compiled.ClientTraining.traced`), once."""
    if proximal not in self._client_traced:
      self._client_traced[proximal] = self._training.client.traced(
        self._batch_spec(), proximal
      )
    return self._client_traced[proximal]

  def _compiled_round(self, proximal):
    """The compiled round with or without the proximal term
    (`compiled.round_function`), made once, or the one made before in
    this process from the same content (`_round_key`)."""
    if proximal in self._compiled_rounds:
      return self._compiled_rounds[proximal]
    fresh, step = self._client_functions(proximal)
    signature = ['compiled', self._training.specs, self._hparam_specs()]
    key = _round_key(signature, self._gradient, fresh, step)
    made = _ROUNDS.get(key) if key else None
    if made is None:
      made = compiled.round_function(
        fresh, step, self._training.specs, self._gradient
      )
    _remember(key, made)
    self._compiled_rounds[proximal] = made
    return made

  def _batch_spec(self):
    return {
      name: tf.TensorSpec([self._batch_size, *data.shape[1:]], data.dtype)
      for name, data in self._data.items()
    }

  def _minibatches(self, client, order, ends):
    """A client's minibatches: (the indices into the resident data of their
    examples, in order; each one's size)."""
    if self._gradient:  # The whole dataset in chunks, its order unused.
      n, b = self._sizes[client], self._batch_size
      order, ends = np.arange(n), np.minimum(np.arange(b, n + b, b), n)
    ends = np.asarray(ends, np.int64)
    used = ends[-1] if len(ends) else 0
    return (
      self._offsets[client] + np.asarray(order[:used]),
      np.diff(ends, prepend=0),
    )

  def _in_lanes(self, minibatches, proximal, arguments):
    """(updates, loss sums) of the clients' `minibatches` trained in lanes
    (`pack`, `_round`)."""
    batches = [
      np.split(indices, np.cumsum(sizes)[:-1]) if len(sizes) else []
      for indices, sizes in minibatches
    ]
    plan = pack(
      batches,
      lanes(batches, [n for n, p in self._rounds if p == proximal]),
      self._batch_size,
    )
    return self._traced(plan.start.shape[1], proximal)(
      *arguments,
      plan.indices,
      plan.valid,
      plan.start,
      plan.finish,
      len(minibatches),
    )

  @functools.cached_property
  def _weights(self) -> np.ndarray:
    """Each client's weight in the mean: its examples, or 1 (uniform)."""
    if self._weighting == learning.client_weighting('num_examples'):
      return self._sizes.astype(np.float32)
    return np.ones(len(self._sizes), np.float32)

  def _hparam_specs(self):
    return {
      name: tf.TensorSpec([], tf.float32)
      for name in self._training.hparam_names
    }

  def _fresh_for(self, slots):
    """`LaneTraining.fresh_state` traced for `slots` lanes."""
    return self._fresh_state.get_concrete_function(
      self._training.specs, self._hparam_specs(), slots
    )

  def _step_for(self, slots, proximal):
    """`LaneTraining.step` traced for `slots` lanes, as the round calls
    it, with the lanes' small products on Eigen's kernel
    (`tracing.batched_products_on_eigen`); with the proximal term if
    `proximal`."""
    lanes, state = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype),
      self._fresh_for(slots).structured_outputs,
    )
    batch = [slots, self._batch_size]
    with tracing.batched_products_on_eigen():
      return self._steps[proximal].get_concrete_function(
        lanes,
        state,
        {
          name: tf.TensorSpec(batch + data.shape[1:], data.dtype)
          for name, data in self._data.items()
        },
        tf.TensorSpec(batch, tf.float32),
        self._training.specs,
        self._hparam_specs(),
        tf.TensorSpec([slots], tf.bool),
      )

  def _traced(self, slots, proximal):
    """The round's computation on `slots` lanes (`_round`): (updates by
    client, training loss sums); traced once for each number of lanes, or
    the one traced before in this process from the same content."""
    if (slots, proximal) in self._rounds:
      return self._rounds[slots, proximal]
    batch = self._batch_size
    signature = [
      self._training.specs,
      self._hparam_specs(),
      {
        name: tf.TensorSpec([None, *data.shape[1:]], data.dtype)
        for name, data in self._data.items()
      },
      tf.TensorSpec([None, slots, batch], tf.int32),
      tf.TensorSpec([None, slots, batch], tf.float32),
      tf.TensorSpec([None, slots], tf.bool),
      tf.TensorSpec([None, slots], tf.int32),
      tf.TensorSpec([], tf.int32),
    ]
    fresh, step = self._fresh_for(slots), self._step_for(slots, proximal)
    key = _round_key(signature, self._gradient, fresh, step)
    traced = _ROUNDS.get(key) if key else None
    if traced is None:
      traced = tf.function(
        functools.partial(
          _round, fresh, step, self._training.specs, self._gradient, slots
        ),
        input_signature=signature,
        autograph=False,
      )
    _remember(key, traced)
    self._rounds[slots, proximal] = traced
    return traced


def _remember(key, traced):
  """Keeps `traced` (a round's function) in `_ROUNDS` by `key` (None:
  not kept), the least recently used dropped beyond _MAX_ROUNDS."""
  if key:
    _ROUNDS[key] = traced
    _ROUNDS.move_to_end(key)
    while len(_ROUNDS) > _MAX_ROUNDS:
      _ROUNDS.popitem(last=False)


def _round_key(signature, gradient, *functions):
  """What a round's trace is a function of: its signature (the lanes, the
  batch, the weights, hyper-parameters and data), whether the clients sum
  gradients, and the graphs of the functions it calls (a lane's fresh
  state and the lanes' step: the model, its loss, the client optimizer),
  as `fingerprint.graph_sha256` hashes them; the round's own code is this
  module's. None (not kept) when a function captures a value of the
  process (a tensor or variable created outside it), which its graph does
  not hold."""
  if any(function.captured_inputs for function in functions):
    return None
  from tff_algos.runtime import fingerprint

  return (
    repr(signature),
    gradient,
    *(fingerprint.graph_sha256(f.graph.as_graph_def()) for f in functions),
  )


def _round(
  fresh,
  step,
  specs,
  gradient,
  slots,
  global_weights,
  hparams,
  data,
  indices,
  valid,
  start,
  finish,
  clients,
):
  """Every lane's steps (see the module docstring) with the traced
  functions `fresh` and `step` (`LaneTraining`): the clients' updates
  w_t − w (the gradient kind: Σ_b n_b ∇F_b, divided by n_k in
  `Engine.inputs`) and the sums of their batches' losses times their
  sizes."""
  fresh = fresh(global_weights, hparams, slots)
  outputs = [
    tf.TensorArray(tf.float32, size=clients, element_shape=spec.shape)
    for spec in specs
  ]
  loss_sums = tf.TensorArray(tf.float32, size=clients, element_shape=[])

  def reset(first, lanes, state, lane_loss):
    return (
      [_where(first, w, lane) for lane, w in zip(lanes, fresh[0])],
      tf.nest.map_structure(
        lambda f, now: _where(first, f, now), fresh[1], state
      ),
      tf.where(first, 0.0, lane_loss),
    )

  def write(done, finished, lanes, state, lane_loss, outputs, loss_sums):
    whose = tf.boolean_mask(finished, done)
    results = (
      state
      if gradient
      else [w - lane for lane, w in zip(lanes, global_weights)]
    )
    return (
      [
        o.scatter(whose, tf.boolean_mask(r, done))
        for o, r in zip(outputs, results)
      ],
      loss_sums.scatter(whose, tf.boolean_mask(lane_loss, done)),
    )

  def one_pass(p, lanes, state, lane_loss, outputs, loss_sums):
    first = start[p]
    lanes, state, lane_loss = _when(
      tf.reduce_any(first),
      lambda: reset(first, lanes, state, lane_loss),
      (lanes, state, lane_loss),
    )
    for s in range(UNROLL):
      lanes, state, lane_loss = one_step(
        p * UNROLL + s, lanes, state, lane_loss
      )
    done = finish[p] >= 0
    outputs, loss_sums = _when(
      tf.reduce_any(done),
      lambda: write(
        done, finish[p], lanes, state, lane_loss, outputs, loss_sums
      ),
      (outputs, loss_sums),
    )
    return p + 1, lanes, state, lane_loss, outputs, loss_sums

  def one_step(s, lanes, state, lane_loss):
    mask = valid[s]
    examples = tf.reduce_sum(mask, axis=1)
    lanes, state, losses = step(
      lanes,
      state,
      {name: tf.gather(values, indices[s]) for name, values in data.items()},
      mask,
      global_weights,
      hparams,
      examples > 0,
    )
    return lanes, state, lane_loss + losses * examples

  _, _, _, _, outputs, loss_sums = tf.while_loop(
    lambda p, *_: p < tf.shape(start)[0],
    one_pass,
    (0, fresh[0], fresh[1], tf.zeros([slots]), outputs, loss_sums),
  )
  return [o.stack() for o in outputs], loss_sums.stack()


class LaneTraining:
  """A run's local training on lanes, without its data: a lane's fresh
  state and one step of all lanes (`Engine` traces both)."""

  def __init__(self, model_fn, local, specs):
    self.client = compiled.ClientTraining(model_fn, local, specs)
    self._local = local
    self.specs = specs
    self.gradient = self.client.gradient

  @property
  def hparam_names(self) -> list[str]:
    return self.client.hparam_names

  @property
  def _optimizer_hparams(self) -> list[str]:
    return self.client.optimizer_hparams

  @functools.cached_property
  def _elementwise(self) -> bool:
    """Whether the client optimizer's step is elementwise with a state of
    its hyper-parameters and tensors shaped like the weights (SGD with or
    without momentum), so that one step on the lanes stacked is each lane's
    step; otherwise (Adam's step count, ...) it is vectorized per lane."""
    if self.gradient:
      return True
    with tf.Graph().as_default():
      optimizer = self._local.optimizer
      state = optimizer.initialize(tuple(self.specs))
      hparams = optimizer.get_hparams(state)
      shapes = {tuple(spec.shape) for spec in self.specs}
      return all(
        tuple(np.shape(t)) in shapes
        for name, value in state.items()
        if name not in hparams
        for t in tf.nest.flatten(value)
      )

  def fresh_state(self, global_weights, hparams, slots):
    """What a lane holds when a client starts: w_t, and a fresh client
    optimizer state at `hparams` (the gradient kind: a zero sum)."""
    lanes = [tf.repeat(w[None], slots, axis=0) for w in global_weights]
    if self.gradient:
      return lanes, [tf.zeros_like(lane) for lane in lanes]
    optimizer = self._local.optimizer
    state = optimizer.set_hparams(
      optimizer.initialize(tuple(self.specs)),
      collections.OrderedDict((k, hparams[k]) for k in self._optimizer_hparams),
    )
    if self._elementwise:  # Its hyper-parameters stay scalars.
      hparams_now = optimizer.get_hparams(state)
      return lanes, collections.OrderedDict(
        (
          name,
          value
          if name in hparams_now
          else tf.nest.map_structure(
            lambda t: tf.repeat(tf.convert_to_tensor(t)[None], slots, 0), value
          ),
        )
        for name, value in state.items()
      )
    return lanes, tf.nest.map_structure(
      lambda t: tf.repeat(tf.convert_to_tensor(t)[None], slots, 0), state
    )

  def step_function(self, proximal):
    """`step` with the proximal term or without: a function of the rest of
    its arguments."""
    return lambda *args: self.step(*args, proximal=proximal)

  def step(
    self, lanes, state, batch, mask, global_weights, hparams, active, proximal
  ):
    """One step of every lane: the gradients, then `_advance` (with the
    proximal term if `proximal`: μ ≠ 0)."""
    gradients, losses = self._gradients(lanes, batch, mask)
    lanes, state = self._advance(
      lanes, state, gradients, global_weights, hparams, active, proximal
    )
    return lanes, state, losses

  def _advance(
    self, lanes, state, gradients, global_weights, hparams, active, proximal
  ):
    """One step of the active lanes: the client optimizer on ∇F + μ(w −
    w_t); the gradient kind adds the gradient to its sum (`state`) and
    keeps w_t."""
    all_active = tf.reduce_all(active)
    if self.gradient:
      summed = [a + g for a, g in zip(state, gradients)]
      return lanes, _when(
        all_active,
        lambda: summed,
        [_where(active, n, o) for n, o in zip(summed, state)],
      )
    # μ = 0 (FedAvg) skips the proximal term, as the per-client path does:
    # the same values, g + 0·(w − w_t) = g. The round chooses the step
    # (a branch here would cost each step ~15 control-flow ops).
    if proximal:
      gradients = [
        g + hparams[PROXIMAL_WEIGHT] * (lane - w)
        for g, lane, w in zip(gradients, lanes, global_weights)
      ]
    optimizer = self._local.optimizer
    if self._elementwise:  # Its state is per weight: all lanes at once.
      new_state, stepped = optimizer.next(state, tuple(lanes), tuple(gradients))
    else:
      new_state, stepped = tf.vectorized_map(
        lambda a: optimizer.next(a[0], a[1], a[2]),
        (state, tuple(lanes), tuple(gradients)),
      )
    return _when(
      all_active,
      lambda: (list(stepped), new_state),
      lambda: (
        [_where(active, n, o) for n, o in zip(stepped, lanes)],
        tf.nest.map_structure(
          lambda n, o: _where(active, n, o), new_state, state
        ),
      ),
    )

  def _gradients(self, lanes, batch, mask):
    """Each lane's gradient of its batch's loss (the mean over the real
    examples, plus the regularization; the gradient kind: n_b times it, as
    `model_ops.weighted_gradient`), and the mean without the
    regularization (the wrapper's loss metric)."""
    with tf.GradientTape() as tape:
      tape.watch(lanes)
      objectives, means = tf.vectorized_map(
        lambda args: self.client.objective(*args),
        (tuple(lanes), batch['x'], batch['y'], mask),
      )
      total = tf.reduce_sum(objectives)
    return [
      tf.convert_to_tensor(g)  # A gather's gradient: IndexedSlices.
      for g in tape.gradient(total, lanes)
    ], means


@dataclasses.dataclass(frozen=True)
class Computed:
  """A round's clients' results, by client (the first axis of each
  array): updates (per weight tensor), weights, local steps, ‖update‖²
  (float64), and their training loss sums and examples."""

  updates: Sequence[np.ndarray]
  weights: np.ndarray
  steps: np.ndarray
  squared_norms: np.ndarray
  loss_sums: np.ndarray
  examples: np.ndarray

  def inputs(self):
    """One `learning.LockstepInput` per client."""
    return [
      self._input(
        [u[k] for u in self.updates],
        self.weights[k],
        self.steps[k],
        1,
        self.squared_norms[k],
        self.loss_sums[k],
        self.examples[k],
        self.steps[k],
      )
      for k in range(len(self.weights))
    ]

  def one_input(self):
    """The clients as the one input a mean aggregates alike
    (`learning.LockstepProcess.mean_of_updates`): their updates' weighted
    mean with the sum of their weights (the mean's float32 sums, as TFF's
    mean factory adds), their statistics and training metrics summed."""
    total = np.float32(np.sum(self.weights, dtype=np.float32))
    mean = [np.tensordot(self.weights, u, axes=1) / total for u in self.updates]
    return self._input(
      mean,
      total,
      np.sum(self.steps),
      len(self.weights),
      np.sum(self.squared_norms),
      np.sum(self.loss_sums, dtype=np.float64),
      np.sum(self.examples),
      np.sum(self.steps),
    )

  @staticmethod
  def _input(
    update,
    weight,
    steps,
    participants,
    squared_norm,
    loss_sum,
    examples,
    batches,
  ):
    return collections.OrderedDict(
      update=[np.asarray(u, np.float32) for u in update],
      weight=np.float32(weight),
      local_steps=np.int32(steps),
      participants=np.int32(participants),
      update_squared_norm=np.float64(squared_norm),
      train=collections.OrderedDict(
        loss=[np.float32(loss_sum), np.float32(examples)],
        num_examples=[np.int64(examples)],
        num_batches=[np.int64(batches)],
      ),
    )


def _when(condition, then, otherwise):
  """`then()` if the scalar `condition` holds, else `otherwise` (a value,
  or a function giving it): a branch, so that its ops run only when
  needed."""
  return tf.cond(
    condition, then, otherwise if callable(otherwise) else lambda: otherwise
  )


def _where(condition, new, old):
  """`new` where the per-lane `condition` holds, else `old` (both of a
  static rank; a scalar, one of the optimizer's hyper-parameters, is
  every lane's, unchanged within a round)."""
  if old.shape.rank == 0:
    return new
  # TensorFlow's v1 `Select` picks whole rows by a vector: 2x faster than
  # `tf.where`'s broadcast for MNIST's [64 × 784 × 10] lanes (18.5 against
  # 37.3 µs), the same values.
  return tf.compat.v1.where(condition, new, old)
