"""Compiled clients: a round's local training, its clients one after
another in one XLA-compiled loop, in this process, for any client work
defined once (`learning.ClientDefinition`: the package's proximal SGD and
full-batch gradient, and a user's own). The engine names no algorithm
and no hyper-parameter of one: it runs a definition's `init`, `step`s
and `final`.

A client's step is a few dozen small ops. Run by TensorFlow's executor,
each op costs its dispatch, which for the papers' small models is most of
a step (docs/PERFORMANCE.md, "Compiled clients"); compiled by XLA with
the loop around it, the round is one program. The clients keep their own
order of minibatches (`sampling.ClientSampler.minibatch_schedule`), each
starts from w_t with the definition's fresh state, and each batch is
padded to B with the padding masked out of its mean: a client computes
what it computes alone, in float32, with only the order of some sums
differing, so the models agree to float32 rounding with the per-client
path's (tests/simulation/test_compiled.py).

XLA compiles a program for each shape of its inputs: a round's steps and
clients are padded to the next power of two (`bucket`), so that a run
compiles a few programs, not one a round; the padding is never stepped.

The process (`learning.ComputedProcess`) then does what it does with its
own client work's results: the model aggregator sees each client's update
(DP clipping and noise, compression, robust aggregation are unchanged),
the metrics aggregator sums the rest, the server optimizer steps. What
crosses to the TFF worker each round is the clients' updates, not their
data.

What it needs, else the run trains per client and its header says why
(`refusal`, `work_refusal`): a process built by `learning.build_process`
with TFF's broadcast, a task whose model_fn is a `KerasModelFn` (the
tasks' models are) with a loss that averages its examples and no layer
that draws randomness or batch statistics in training, a local run
(remote workers train clients where they are), a client work XLA
compiles, and (under --client_execution=auto) a model XLA runs faster
than TensorFlow's own kernels do per client.

The training metrics it reports (`metrics['client_work']['train']`) are
the model wrapper's loss and counters (loss, num_examples, num_batches),
not the model's own Keras metrics: nothing the package records reads
them.
"""

from __future__ import annotations

import collections
import functools
import re
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from tff_algos.learning import client_definition
from tff_algos.learning import model_ops
from tff_algos.simulation.client_tensors import ClientTensors

# How the clients' training is named in a run's header and provenance
# ("clients trained ...").
EXECUTION = 'compiled by XLA'

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


# Layers whose training pass draws randomness or reads the batch: compiled
# clients cannot reproduce them client by client.
_STOCHASTIC_LAYERS = (
  tf.keras.layers.Dropout,
  tf.keras.layers.GaussianNoise,
  tf.keras.layers.GaussianDropout,
  tf.keras.layers.BatchNormalization,
)


def refusal(model_fn, requested='auto', workers='') -> str | None:
  """Why clients training `model_fn`'s model do not train compiled (a
  phrase for the run's header), or None: decided before any process is
  built, so that a run that trains per client builds one process only.
  --client_execution=`requested`: 'compiled' asks for it where it can
  run; 'auto' where it is also faster than per client on this machine's
  CPU (`unpaying`, measured with benchmarks/cohort.py)."""
  if workers:
    return 'remote workers train the clients where they are'
  if not isinstance(model_fn, model_ops.KerasModelFn):
    return (
      "the task's model_fn is not a learning.model_ops.KerasModelFn "
      '(a Keras model with its loss)'
    )
  with tf.Graph().as_default():
    model = model_fn.keras_model_fn()
    layers, loss = list(_layers(model)), model_fn.loss_fn()
    dtypes = {w.dtype.base_dtype for w in model.trainable_weights}
  if dtypes - {tf.float32}:
    names = ', '.join(sorted(d.name for d in dtypes))
    return f"the model's weights are {names}, not float32"
  stochastic = [
    layer.name for layer in layers if isinstance(layer, _STOCHASTIC_LAYERS)
  ]
  if stochastic:
    return (
      f"the model's layers {', '.join(stochastic)} draw randomness or "
      'batch statistics in training'
    )
  if getattr(loss, 'reduction', None) not in (
    tf.keras.losses.Reduction.AUTO,
    tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE,
  ):
    return "the model's loss is not a mean over the batch's examples"
  slower = requested == 'auto' and unpaying(layers)
  if slower:
    return (
      f'{slower}, so they train faster per client '
      '(--client_execution=compiled trains them here)'
    )
  return None


def unsupported(step) -> str | None:
  """Why XLA cannot compile `step` (a client's work traced for one
  batch: `Clients.checked`), or None if it can: an op it has no kernel
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


class Layout(NamedTuple):
  """A round's clients' minibatches laid out one client after another:
  `indices`, `valid`: [bucket(steps), B] each step's examples (indices
  into the resident data) and which are real; `starts`: [bucket(clients)
  + 1] each client's first step; `examples`, `steps`: [bucket(clients)]
  each client's n_k and local steps τ_k; `clients`: how many (the rest is
  padding, never stepped)."""

  indices: Any
  valid: Any
  starts: Any
  examples: Any
  steps: Any
  clients: Any


def layout(minibatches, batch_size, examples, steps) -> Layout:
  """The `Layout` of a round's clients' `minibatches` ((example indices,
  in order; each batch's size) by client), their `examples` and
  `steps`."""
  sizes = np.concatenate([np.zeros(0, np.int64)] + [s for _, s in minibatches])
  total = len(sizes)
  indices = np.zeros((bucket(total), batch_size), np.int32)
  valid = np.zeros((bucket(total), batch_size), np.float32)
  rows = np.repeat(np.arange(total), sizes)
  columns = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
  indices[rows, columns] = np.concatenate(
    [np.zeros(0, np.int64)] + [i for i, _ in minibatches]
  )
  valid[rows, columns] = 1.0
  clients = len(minibatches)
  starts = np.full(bucket(clients) + 1, total, np.int32)
  starts[:clients] = np.cumsum([0] + [len(s) for _, s in minibatches])[:-1]
  padded = np.zeros(bucket(clients), np.float32)
  padded[:clients] = examples
  counts = np.zeros(bucket(clients), np.int32)
  counts[:clients] = steps
  return Layout(
    indices, valid, starts, padded, counts, np.asarray(clients, np.int32)
  )


class Clients:
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

  @functools.cached_property
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

  def client(self, global_weights, hparams, data, layout, k):
    """Client k's training: from w_t, the minibatches
    `indices[starts[k]:starts[k + 1]]` (padded to B, `valid` its real
    examples) of the round's `layout` (`Layout`)."""
    shared = client_definition.Shared(list(global_weights), hparams)

    def one_step(s, state, loss_sum):
      batch = {
        name: tf.gather(values, layout.indices[s])
        for name, values in data.items()
      }
      state, loss = self.one_step(state, batch, layout.valid[s])
      return s + 1, state, loss_sum + loss

    _, state, loss_sum = tf.while_loop(
      lambda s, *_: s < layout.starts[k + 1],
      one_step,
      (layout.starts[k], self.definition.init(shared), tf.constant(0.0)),
    )
    return self.result(
      shared, state, layout.examples[k], layout.steps[k], loss_sum
    )

  def run_round(self, global_weights, hparams, data, layout):
    """The round's `layout.clients` clients, one after another: their
    results by name, each shaped for the clients the round is padded to
    (zeros after its last)."""
    shaped_for = tf.shape(layout.examples)[0]  # Unknown when traced.
    outputs = tf.nest.map_structure(
      lambda s: tf.zeros([shaped_for, *s.shape], s.dtype),
      self._result_specs,
    )

    def one_client(k, outputs):
      result = self.client(global_weights, hparams, data, layout, k)
      at = tf.reshape(k, [1, 1])
      return k + 1, tf.nest.map_structure(
        lambda o, r: tf.tensor_scatter_nd_update(o, at, r[None]),
        outputs,
        result,
      )

    _, outputs = tf.while_loop(
      lambda k, *_: k < layout.clients, one_client, (0, outputs)
    )
    return outputs

  @functools.cached_property
  def _result_specs(self):
    return tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype),
      self.checked.structured_outputs[0],
    )


def work_refusal(model_fn, local, batch_size) -> str | None:
  """Why a process's clients (`local`, a `learning.DefinedTraining`, of a
  model of `model_fn`) do not train compiled, or None: its client work
  does not trace as TensorFlow functions of tensors, or XLA cannot
  compile it (`unsupported`)."""
  clients = Clients(
    model_fn, local, _weight_specs(model_fn), _batch_specs(model_fn, batch_size)
  )
  try:
    traced = clients.checked
  except Exception as e:  # A definition XLA's tracing refuses: say why.
    return (
      f'its client work does not trace as TensorFlow functions of tensors '
      f'({type(e).__name__}: {str(e).strip().splitlines()[0]})'
    )
  return unsupported(traced)


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


# Compiled rounds made in this process, by the content of what they run
# (`round_key`), least recently used first. Runs in one process (a
# notebook's, a loop of runs, the tests') whose clients train by the same
# work reuse the round and XLA's programs for it (docs/PERFORMANCE.md, "A
# round's program, reused"). The memo is this module's, so a reloaded
# module, whose round code may differ, starts without it.
_ROUNDS: collections.OrderedDict = collections.OrderedDict()
_MAX_ROUNDS = 16


def round_key(signature, traced):
  """What a compiled round is a function of: `signature` (the weights',
  hyper-parameters' and batch's specs) and the graph of a client's work
  traced for one batch (`Clients.checked`: the model, its loss, the
  definition and the client weighting), as `fingerprint.graph_sha256`
  hashes it. None (not kept) when that graph captures a value of the
  process (a tensor or variable created outside it), which it does not
  hold."""
  if traced.captured_inputs:
    return None
  from tff_algos.runtime import fingerprint

  return repr(signature), fingerprint.graph_sha256(traced.graph.as_graph_def())


def remembered(key, make):
  """The program kept in `_ROUNDS` by `key`, else `make()` (kept unless
  it or `key` is None), the least recently used dropped beyond
  _MAX_ROUNDS: the compiled rounds and evaluations of this process."""
  made = _ROUNDS.get(key) if key else None
  made = made or make()
  if key and made is not None:
    _ROUNDS[key] = made
    _ROUNDS.move_to_end(key)
    while len(_ROUNDS) > _MAX_ROUNDS:
      _ROUNDS.popitem(last=False)
  return made


class Engine:
  """The clients of one run trained in this process, compiled: its
  process's model and client work (`learning.ComputedProcess`), the
  clients' training data resident here, and the round (`Clients`); their
  results handed to the process as `learning.ComputedInput`s."""

  def __init__(self, process, train_arrays, batch_size, client_tensors=None):
    local = process.local_training
    self._mean_of_updates = process.mean_of_updates
    self._squared_norm = local.squared_norm
    self._one_pass = local.definition.one_pass
    self._sizes = np.array([len(next(iter(a.values()))) for a in train_arrays])
    tensors = client_tensors or ClientTensors()
    self._data, self._offsets = tensors.with_offsets(train_arrays)
    largest = int(max(self._sizes.max(), 1))
    if self._one_pass:  # The whole data in chunks, as the per-client path.
      batch_size = min(largest, model_ops.CHUNK_SIZE)
    elif batch_size < 1:  # B = ∞: a client's minibatch is all its data,
      batch_size = largest  # masked to its n_k.
    self._batch_size = batch_size
    # The weights' shapes from the process's type: no computation runs
    # before the run's folder (and the worker's log) is known.
    weights = process.get_model_weights.type_signature.result
    clients = Clients(
      process.model_fn,
      local,
      [tf.TensorSpec(w.shape, tf.float32) for w in weights.trainable],
      {
        name: tf.TensorSpec([batch_size, *data.shape[1:]], data.dtype)
        for name, data in self._data.items()
      },
    )
    self._checked = clients.checked
    signature = [clients.specs, clients.hparam_specs(), clients.batch]
    # XLA compiles the round for each bucket of clients and steps it is
    # called with (`layout`); reduce_retracing spares each new bucket a
    # trace of its graph too (a quarter of such a round's time).
    self._round = remembered(
      round_key(signature, self._checked),
      lambda: tf.function(
        clients.run_round,
        jit_compile=True,
        autograph=False,
        reduce_retracing=True,
      ),
    )
    self.execution = EXECUTION

  def fingerprint(self) -> str:
    """The SHA-256 of a client's work traced for one batch (the model,
    its loss and the definition): with compiled clients the learning
    process's own computations do not hold the model's training step, so
    a run records this too (`provenance`)."""
    from tff_algos.runtime import fingerprint

    return fingerprint.graph_sha256(self._checked.graph.as_graph_def())

  def inputs(self, state, schedules, round_num):
    """The round's client inputs (`learning.ComputedInput`), one per
    client of `schedules` ((client index, example order, batch ends) each,
    as the sampler drew them; one for all with a mean aggregator), from
    the process state `state` (its global model and client work
    hyper-parameters)."""
    del round_num  # The schedules hold the round's draws.
    if not schedules:  # A DP round without clients: noise on a zero sum.
      return []
    minibatches = [self._minibatches(*schedule) for schedule in schedules]
    steps = [1 if self._one_pass else len(s) for _, s in minibatches]
    outputs = self._round(
      [
        tf.constant(w, tf.float32) for w in state.global_model_weights.trainable
      ],
      {k: tf.constant(v, tf.float32) for k, v in state.client_work.items()},
      self._data,
      layout(
        minibatches,
        self._batch_size,
        [self._sizes[c] for c, _, _ in schedules],
        steps,
      ),
    )
    clients = len(schedules)
    results = tf.nest.map_structure(lambda t: t.numpy()[:clients], outputs)
    results['steps'] = np.array(steps, np.int32)
    results['batches'] = np.array([len(s) for _, s in minibatches], np.int64)
    results['examples'] = np.array(
      [np.sum(s) for _, s in minibatches], np.int64
    )
    if self._mean_of_updates:
      return [_one_input(results, self._squared_norm)]
    inputs = []
    for k in range(clients):
      client = tf.nest.map_structure(lambda a, k=k: a[k], results)
      norm = _squared_norm(client['update']) if self._squared_norm else None
      inputs.append(_input(client, norm))
    return inputs

  def _minibatches(self, client, order, ends):
    """A client's minibatches: (the indices into the resident data of their
    examples, in order; each one's size); a one-pass work's, its whole
    data in chunks, in order (its schedule unused)."""
    if self._one_pass:
      n, b = self._sizes[client], self._batch_size
      order, ends = np.arange(n), np.minimum(np.arange(b, n + b, b), n)
    ends = np.asarray(ends, np.int64)
    used = ends[-1] if len(ends) else 0
    return (
      self._offsets[client] + np.asarray(order[:used]),
      np.diff(ends, prepend=0),
    )


def _input(client, squared_norm=None, participants=1):
  """A `learning.ComputedInput` of a client's (or, summed, of many
  clients') results: `client_definition.computed_data_type`'s fields;
  `squared_norm`, ‖update‖² (of many: Σ_k ‖u_k‖²) where the process
  reports it (the update spread), else None."""
  data = collections.OrderedDict(
    update=[np.asarray(u, np.float32) for u in client['update']],
    weight=np.float32(client['weight']),
    local_steps=np.int32(client['steps']),
    participants=np.int32(participants),
    train=collections.OrderedDict(
      loss=[np.float32(client['loss_sum']), np.float32(client['examples'])],
      num_examples=[np.int64(client['examples'])],
      num_batches=[np.int64(client['batches'])],
    ),
  )
  if squared_norm is not None:
    data['update_squared_norm'] = np.float64(squared_norm)
  if 'scale' in client:
    data['scale'] = np.float32(client['scale'])
  if client['metrics']:
    data['metrics'] = collections.OrderedDict(
      (name, np.asarray(value)) for name, value in client['metrics'].items()
    )
  return data


def _squared_norm(updates):
  return sum(np.sum(np.square(u, dtype=np.float64)) for u in updates)


def _one_input(results, squared_norm):
  """The round's clients as the one input a mean aggregates alike
  (`learning.ComputedProcess.mean_of_updates`): their updates' and
  scales' weighted means (the float32 sums TFF's mean adds), with the sum
  of their weights, statistics and metrics."""
  weights = results['weight']
  total = np.float32(np.sum(weights, dtype=np.float32))
  summed = collections.OrderedDict(
    update=[
      np.tensordot(weights, u, axes=1) / total for u in results['update']
    ],
    weight=total,
    metrics=collections.OrderedDict(
      (name, np.sum(v, dtype=v.dtype)) for name, v in results['metrics'].items()
    ),
    loss_sum=np.sum(results['loss_sum'], dtype=np.float64),
    steps=np.sum(results['steps']),
    batches=np.sum(results['batches']),
    examples=np.sum(results['examples']),
  )
  if 'scale' in results:
    summed['scale'] = np.dot(weights, results['scale']) / total
  norms = _squared_norm(results['update']) if squared_norm else None
  return _input(summed, norms, participants=len(weights))
