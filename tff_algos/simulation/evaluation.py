"""Evaluation of a global model over ALL clients' data.

`build_evaluation` gives the papers' global objective f(w) = Σ_k p_k F_k(w)
(p_k = n_k / n) and accuracy over every example of every client, not the
running loss of the sampled clients, and in the same pass each client's own
accuracy (`ClientAccuracy`), which `client_accuracy_summary` turns into the
spread of accuracy across clients. `build_dissimilarity` gives FedProx's
gradient dissimilarity (Li et al. 2020, §4.1 Def. 3 and §5.3.3):
    grad_variance      = Σ_k p_k ‖∇F_k(w) − ∇f(w)‖²,
    grad_dissimilarity = B(w) = sqrt(Σ_k p_k ‖∇F_k(w)‖² / ‖∇f(w)‖²)
(the paper's B-local dissimilarity; 1 for identical devices).

Both are measurements, not part of any algorithm, so they run in this
process as plain TensorFlow: one `tf.function` (traced once) runs the same
TF code as their TFF computations (tests/simulation/federated_evaluation.py,
the tests' reference) and combines the results with the same sums and weighted
means, in float32: the same numbers to rounding (the tests compare them at
rtol 1e-6). They run here rather than in TFF's worker because through the
TFF runtime every evaluation ships every client's data over gRPC, most of a
round's time on small models (docs/PERFORMANCE.md). A dense Keras
classifier's evaluation is one XLA-compiled program instead (`compiled_evaluation.sums_of`):
its per-op costs were most of a small model's round with evaluation every
round.
"""

import collections
import collections.abc
import dataclasses
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import measurements
from tff_algos.learning import model_ops
from tff_algos.simulation import compiled_evaluation
from tff_algos.simulation.client_tensors import ClientTensors


class _InProcess:
  """A model built once in this process, and what a tf.function over all
  clients needs: its input signature, the weights' structure, the reset of
  its metrics to a fresh model's (a TFF computation builds a fresh model for
  each client) and each client's slice of the concatenated data.

  `function(f)` traces f at once: Keras swaps the base classes of its models
  whenever a model is built in a graph (as TFF computations build theirs),
  and an eager model traced after such a swap fails.
  """

  def __init__(self, model_fn, clients: ClientTensors | None = None):
    self.model = model_fn()
    self._template = tff.learning.models.ModelWeights.from_model(self.model)
    self.input_signature = [
      [
        tf.TensorSpec(v.shape, v.dtype) for v in tf.nest.flatten(self._template)
      ],
      model_ops.batched_spec(self.model.input_spec),
      tf.TensorSpec([None], tf.int32),
    ]
    self.fresh_metrics = [v.numpy() for v in self.model.local_variables]
    self.clients = clients or ClientTensors()

  def function(self, python_function, autograph=True):
    """`python_function` traced now, for `input_signature` (its one
    concrete function, which a call runs without tf.function's dispatch:
    1.4 of an MLR evaluation's 7.6 ms, docs/PERFORMANCE.md)."""
    return tf.function(
      python_function, input_signature=self.input_signature, autograph=autograph
    ).get_concrete_function()

  def weights(self, flat_weights):
    return tf.nest.pack_sequence_as(self._template, flat_weights)

  def reset_metrics(self):
    for variable, value in zip(self.model.local_variables, self.fresh_metrics):
      variable.assign(value)

  @staticmethod
  def client(data, splits, k):
    return tf.nest.map_structure(lambda t: t[splits[k] : splits[k + 1]], data)

  def __call__(self, function, weights, data):
    """function(flat weights, concatenated data, splits) on these clients."""
    return function(
      [tf.constant(w) for w in tf.nest.flatten(weights)], *self.clients(data)
    )


def _predict_in_parts(model):
  """Has `model`'s inference passes predict `model_ops.PREDICT_ROWS` rows
  at a time (`model_ops.predict_in_parts`), so that a chunk's pass holds
  one part's activations; its metrics still update once per chunk, on the
  same predictions. A TFF Keras model's forward pass predicts through its
  `predict_on_batch` attribute; a model without one is left as it is."""
  if not hasattr(model, 'predict_on_batch'):
    return
  whole = _method(model, 'predict_on_batch')

  def in_parts(x, training=True):
    if training:  # A gradient's sums would be grouped by part.
      return whole(x, training)
    return model_ops.predict_in_parts(whole, x, training)

  model.predict_on_batch = in_parts


def _method(model, name):
  """model.name, a tf.function method, as its Python function bound to
  `model` (traced inline, without AutoGraph); model.name itself otherwise."""
  function = getattr(type(model), name, None)
  python_function = getattr(function, 'python_function', None)
  if python_function is None:
    return getattr(model, name)
  return functools.partial(python_function, model)


def _evaluate_client(model, weights, data):
  """`model_ops.evaluate_client` (the model's metrics over all of `data`
  as unfinalized sums, forward passes of up to CHUNK_SIZE examples) without
  AutoGraph: the same ops, built in a fraction of the time."""
  model_ops.assign_weights(model, weights)
  forward_pass = _method(model, 'forward_pass')
  size = model_ops.num_examples(data)

  def body(start):
    forward_pass(model_ops.chunk(data, start), training=False)
    return (start + model_ops.CHUNK_SIZE,)

  tf.while_loop(lambda start: start < size, body, (tf.constant(0),))
  return _method(model, 'report_local_unfinalized_metrics')()


def _accuracy_metric(model):
  """The model's Keras metric named 'accuracy', or None.

  Each client's accuracy can be taken from it when it is a plain Keras
  SparseCategoricalAccuracy (its per-example matches are
  `tf.keras.metrics.sparse_categorical_accuracy` of the labels and the
  forward pass's predictions, which can be summed by client from one pass
  over all clients' examples; a subclass may weigh them otherwise, as the
  char-LSTM's masks padding), or, when clients are evaluated one by one,
  any Keras mean (state [total, count], result total / count: a client's
  accuracy from its own state)."""
  get_metrics = getattr(model, 'get_metrics', None)
  for metric in get_metrics() if get_metrics is not None else ():
    if metric.name == 'accuracy':
      return metric
  return None


def _evaluate_with_matches(model, weights, data, splits):
  """`_evaluate_client` over all clients' concatenated `data`, with each
  client's (correct, counted): its per-example accuracy matches from the
  same forward passes, summed by client (`tf.math.unsorted_segment_sum`).

  The forward passes and metric updates are `_evaluate_client`'s, in the
  same order: only reads of their predictions are added."""
  model_ops.assign_weights(model, weights)
  forward_pass = _method(model, 'forward_pass')
  size = model_ops.num_examples(data)
  num_clients = tf.size(splits) - 1
  client_of_row = tf.repeat(tf.range(num_clients), splits[1:] - splits[:-1])

  def body(start, correct, counted):
    batch = model_ops.chunk(data, start)
    predictions = forward_pass(batch, training=False).predictions
    matches = tf.keras.metrics.sparse_categorical_accuracy(
      model_ops.labels(batch), predictions
    )
    rows = tf.shape(matches)[0]
    per_row = tf.reshape(matches, [rows, -1])  # Sequences: matches per row.
    clients = client_of_row[start : start + rows]
    correct += tf.math.unsorted_segment_sum(
      tf.cast(tf.reduce_sum(per_row, axis=1), tf.int64), clients, num_clients
    )
    counted += tf.math.unsorted_segment_sum(
      tf.fill([rows], tf.cast(tf.shape(per_row)[1], tf.int64)),
      clients,
      num_clients,
    )
    return start + model_ops.CHUNK_SIZE, correct, counted

  zeros = tf.zeros([num_clients], tf.int64)
  _, correct, counted = tf.while_loop(
    lambda start, *_: start < size, body, (tf.constant(0), zeros, zeros)
  )
  return (
    _method(model, 'report_local_unfinalized_metrics')(),
    tf.cast(correct, tf.float64),
    tf.cast(counted, tf.float64),
  )


@dataclasses.dataclass(frozen=True)
class ClientAccuracy:
  """Each evaluated client's own accuracy under the model, by client index.

  Attributes:
    correct: float64[num_clients], the accuracy's numerator: the client's
      correct predictions.
    counted: float64[num_clients], what its accuracy averages over: the
      client's examples, or for a model whose accuracy skips some targets
      (the char-LSTM's padding) the targets it counts. The pooled accuracy
      is Σ correct / Σ counted: the counted-weighted mean of the clients'.
    num_examples: int64[num_clients], the client's examples (n_k).
  """

  correct: np.ndarray
  counted: np.ndarray
  num_examples: np.ndarray

  @property
  def accuracy(self) -> np.ndarray:
    """correct / counted per client; NaN where nothing was counted."""
    with np.errstate(invalid='ignore', divide='ignore'):
      return np.where(self.counted > 0, self.correct / self.counted, np.nan)


# The distribution of the clients' test accuracy: metrics.csv's columns.
_STATISTICS = collections.OrderedDict(
  p10='10th percentile',
  p50='median',
  p90='90th percentile',
  min='minimum',
  std='standard deviation (population)',
)
CLIENT_ACCURACY_COLUMNS = collections.OrderedDict(
  (
    f'client_test_accuracy_{name}',
    f"{what} of the clients' own test "
    'accuracy (unweighted over the clients with test data)',
  )
  for name, what in _STATISTICS.items()
)


def client_accuracy_summary(
  accuracy, counted, prefix: str = 'client_test_accuracy'
):
  """The spread of accuracy across clients: OrderedDict of `prefix` +
  '_p10', '_p50', '_p90', '_min', '_std' over the clients with data.

  Args:
    accuracy: each client's accuracy (`ClientAccuracy.accuracy`).
    counted: what each accuracy averages over (`ClientAccuracy.counted`,
      or the clients' numbers of examples): a client with 0 has no data and
      is left out (its accuracy is undefined).
    prefix: the statistics' names start with it.

  Every client with data counts once (unweighted: each client is one
  user of the model, whatever its number of examples). Percentiles are
  numpy's default 'linear' method (type 7 of Hyndman & Fan, also R's and
  pandas' default): continuous in the data, p50 is the usual median, and
  anyone recomputes them from a list of accuracies with the default
  `np.percentile`. The standard deviation is the population one (ddof = 0):
  the clients evaluated are all the clients there are, not a sample of a
  larger population whose spread is being estimated; it is also defined
  (0) for a single client. With no client with data every statistic is NaN.
  """
  accuracy = np.asarray(accuracy, np.float64)
  counted = np.asarray(counted)
  if accuracy.ndim != 1 or accuracy.shape != counted.shape:
    raise ValueError(
      'accuracy and counted must be 1-D arrays of one value '
      f'per client, got shapes {accuracy.shape} and '
      f'{counted.shape}'
    )
  if np.any(counted < 0):
    raise ValueError('counted must be >= 0 for every client')
  with_data = accuracy[counted > 0]
  if not np.all(np.isfinite(with_data)):
    raise ValueError('a client with data has an accuracy that is not finite')
  names = tuple(_STATISTICS)
  if not with_data.size:
    return collections.OrderedDict(
      (f'{prefix}_{n}', float('nan')) for n in names
    )
  p10, p50, p90 = np.percentile(with_data, [10, 50, 90], method='linear')
  values = (p10, p50, p90, with_data.min(), with_data.std(ddof=0))
  return collections.OrderedDict(
    (f'{prefix}_{n}', float(v)) for n, v in zip(names, values)
  )


def _client_gradient(model, weights, data):
  """(∇F_k(w), ‖∇F_k(w)‖², n_k) of one client."""
  gradient = model_ops.client_gradient(model, weights, data)
  return (
    gradient,
    measurements.squared_norm(gradient),
    tf.cast(model_ops.num_examples(data), tf.float32),
  )


class Evaluation:
  """`evaluate(weights, [client data])` → OrderedDict of the model's metrics
  over all clients' data; `evaluate.with_clients(weights, [client data])` →
  (the same OrderedDict, `ClientAccuracy`), from the same single pass.
  `per_client_accuracy` says whether the model allows the latter."""

  def __init__(self, run, finalize, per_client_accuracy):
    self._run = run
    self._finalize = finalize
    self.per_client_accuracy = per_client_accuracy

  def __call__(self, weights, data):
    total, _, _ = self._run(weights, data)
    return self._finalize(total)

  def with_clients(self, weights, data):
    if not self.per_client_accuracy:
      raise ValueError(
        "this model's accuracy is not one per-client accuracy can be "
        "taken from: it must be named 'accuracy' and be a Keras "
        'SparseCategoricalAccuracy, or a Keras mean for a model evaluated '
        'client by client (per_client_metrics)'
      )
    total, correct, counted = self._run(weights, data)
    num_examples = np.asarray(
      [len(next(iter(client.values()))) for client in data], np.int64
    )
    return self._finalize(total), ClientAccuracy(
      correct.numpy(), counted.numpy(), num_examples
    )


# Rows of a pass of predictions across clients for a model evaluated by
# client (`_across_clients`): of 256 to 4,096, the fewest CPU-seconds for
# the char-LSTM over Shakespeare's test split (docs/PERFORMANCE.md).
ROWS_PER_PASS = 1024


def build_evaluation(
  model_fn,
  across_clients: bool = True,
  rows_per_pass: int = ROWS_PER_PASS,
  client_tensors: ClientTensors | None = None,
  compiled: bool = True,
) -> Evaluation:
  """(weights, [client data]) → OrderedDict of the model's metrics over all
  clients' data ('loss', 'accuracy', 'num_examples', 'num_batches' for the
  tasks here), computed in this process (an `Evaluation`, whose
  `with_clients` also gives each client's accuracy from the same pass).

  The forward passes take up to `model_ops.CHUNK_SIZE` examples at a time
  across clients: the metrics are sums over examples, so they add up to
  the same values as client by client (what the TFF computation does), in
  fewer and larger passes (`num_batches` counts the passes), each
  predicting `model_ops.PREDICT_ROWS` rows at a time. A model whose
  metrics are not sums over examples says so with a `per_client_metrics`
  attribute on its model_fn (the char-LSTM: its loss is a mean over each
  batch's non-pad characters); its metrics take each client's batches,
  client by client, and (`across_clients`, for a Keras model) its
  predictions are made for several clients at once (`_across_clients`),
  equal to client by client to float32 rounding.

  With `compiled` and `across_clients`, a dense Keras classifier
  (`compiled_evaluation.compilable`: no convolution or recurrent layer,
  which XLA's CPU code runs slower) is evaluated in one XLA program over
  all clients' examples, in the same chunks (`compiled_evaluation.
  sums_of`): the same metrics to float32 rounding and the same per-client
  accuracies, in fewer CPU-seconds (benchmarks/evaluation_passes.py times
  the two). Otherwise the passes above (the reference: the TFF
  computation's TF code).

  Each client's accuracy costs no extra pass: from the forward passes'
  per-example matches summed by client (a Keras SparseCategoricalAccuracy),
  or each client's own accuracy state (a Keras mean, client by client);
  other models have the global metrics only.

  `client_tensors`: where the clients' data is held as tensors, shared
  with others that read the same clients (default: its own).
  """
  local = _InProcess(model_fn, client_tensors)
  model = local.model
  # Keras finalizers are tf.functions that build a metric (variables)
  # whenever they run: their Python functions, traced into one function
  # that builds them once (`_finalizing_function`).
  finalizers = collections.OrderedDict(
    (name, getattr(finalize, 'python_function', finalize))
    for name, finalize in model.metric_finalizers().items()
  )
  compiled_run = (
    compiled and across_clients and compiled_evaluation.run_of(model_fn, local)
  )
  if compiled_run:
    run, totals = compiled_run
    return Evaluation(run, _finalize(finalizers, totals), True)
  _predict_in_parts(model)
  per_client = getattr(model_fn, 'per_client_metrics', False)
  accuracy = _accuracy_metric(model)
  by_matches = (
    not per_client
    and type(accuracy) is tf.keras.metrics.SparseCategoricalAccuracy
  )
  by_state = per_client and isinstance(accuracy, tf.keras.metrics.Mean)
  across_clients = (
    per_client
    and across_clients
    and hasattr(model, 'get_metrics')
    and hasattr(model, 'predict_on_batch')
  )

  def summed_metrics(flat_weights, data, splits):
    """(Σ_k client k's unfinalized metrics (what TFF's federated_sum
    gives), each client's correct, each client's counted); the last two
    are zeros for a model without per-client accuracy.

    Traced without AutoGraph (its AST conversions of these functions and
    of TFF's Keras wrapper were most of the build's time): the loops are
    written as tf.while_loop, the ops are those of `model_ops.
    evaluate_client` (tests/simulation/test_evaluation.py compares the two
    bit for bit)."""
    weights = local.weights(flat_weights)
    num_clients = tf.size(splits) - 1
    zeros = tf.zeros([num_clients], tf.float64)
    if not per_client:
      local.reset_metrics()
      if by_matches:
        return _evaluate_with_matches(model, weights, data, splits)
      return _evaluate_client(model, weights, data), zeros, zeros
    if across_clients:
      total, states = _across_clients(
        local, weights, data, splits, by_state, rows_per_pass
      )
    else:
      total, states = _client_by_client(local, weights, data, splits, by_state)
    if not by_state:
      return total, zeros, zeros
    return total, states[:, 0], states[:, 1]

  summed_metrics = local.function(summed_metrics, autograph=False)
  return Evaluation(
    functools.partial(local, summed_metrics),
    _finalize(finalizers, summed_metrics.structured_outputs[0]),
    by_matches or by_state,
  )


def _client_by_client(local, weights, data, splits, by_state):
  """(Σ_k client k's unfinalized metrics, each client's accuracy state
  [total, count] as float64 (zeros without `by_state`)), evaluating the
  clients one at a time (models whose metrics are not sums over
  examples)."""
  model = local.model
  num_clients = tf.size(splits) - 1
  total = tf.nest.map_structure(
    tf.zeros_like, _method(model, 'report_local_unfinalized_metrics')()
  )
  accuracy_states = tf.TensorArray(
    tf.float64, size=num_clients, element_shape=[2]
  )

  def body(k, total, accuracy_states):
    local.reset_metrics()
    metrics = _evaluate_client(model, weights, local.client(data, splits, k))
    if by_state:  # A Keras mean's state: [total, count].
      accuracy_states = accuracy_states.write(
        k, tf.cast(tf.stack(metrics['accuracy']), tf.float64)
      )
    return (
      k + 1,
      tf.nest.map_structure(tf.add, total, metrics),
      accuracy_states,
    )

  _, total, accuracy_states = tf.while_loop(
    lambda k, *_: k < num_clients,
    body,
    (tf.constant(0), total, accuracy_states),
  )
  return total, tf.reshape(accuracy_states.stack(), [-1, 2])


def _client_chunks(splits):
  """The chunks `_evaluate_client` cuts each client's rows into (up to
  `model_ops.CHUNK_SIZE`), in order: (start, end, client, is its client's
  first, is its client's last), one element per chunk; a client without
  examples has none."""
  sizes = splits[1:] - splits[:-1]
  counts = (sizes + model_ops.CHUNK_SIZE - 1) // model_ops.CHUNK_SIZE
  client = tf.repeat(tf.range(tf.size(sizes)), counts)
  index = tf.range(tf.reduce_sum(counts)) - tf.gather(
    tf.cumsum(counts, exclusive=True), client
  )
  start = tf.gather(splits, client) + index * model_ops.CHUNK_SIZE
  end = tf.minimum(start + model_ops.CHUNK_SIZE, tf.gather(splits, client + 1))
  return (
    start,
    end,
    client,
    tf.equal(index, 0),
    tf.equal(index, tf.gather(counts, client) - 1),
  )


def _across_clients(local, weights, data, splits, by_state, rows_per_pass):
  """`_client_by_client`'s results, with the model's predictions made for
  several clients at once: passes of whole chunks of up to `rows_per_pass`
  rows (or one larger chunk), each chunk's slice of them then given to
  the model's metrics as that client's forward pass gives them (a metric
  that is a mean over each batch, like the char-LSTM's loss, sees the
  same batches). The metrics are reset at a client's first chunk and
  summed after its last, as client by client; only the predictions'
  batch shapes differ, so the results agree to float32 rounding."""
  model = local.model
  model_ops.assign_weights(model, weights)
  predict = _method(model, 'predict_on_batch')
  report = _method(model, 'report_local_unfinalized_metrics')
  fresh = [tf.constant(v) for v in local.fresh_metrics]
  starts, ends, clients, firsts, lasts = _client_chunks(splits)
  inputs, labels = model_ops.features(data), model_ops.labels(data)
  slice_rows = lambda t, a, b: tf.nest.map_structure(lambda x: x[a:b], t)

  def one_chunk(i, offset, predictions, total, states):
    for variable, value in zip(model.local_variables, fresh):
      variable.assign(tf.where(firsts[i], value, variable))
    for metric in model.get_metrics():  # TFF's Keras forward pass's call.
      metric.update_state(
        y_true=slice_rows(labels, starts[i], ends[i]),
        y_pred=slice_rows(predictions, starts[i] - offset, ends[i] - offset),
      )
    metrics = report()
    total = tf.nest.map_structure(
      lambda t, m: t + tf.where(lasts[i], m, tf.zeros_like(m)), total, metrics
    )
    if by_state:  # A Keras mean's state: [total, count].
      state = tf.cast(tf.stack(metrics['accuracy']), tf.float64)
      states = tf.tensor_scatter_nd_add(
        states,
        [[clients[i]]],
        [tf.where(lasts[i], state, tf.zeros_like(state))],
      )
    return total, states

  def one_pass(i, total, states):
    start = starts[i]
    end_chunk = tf.maximum(
      i + 1, tf.searchsorted(ends, [start + rows_per_pass], side='right')[0]
    )
    predictions = predict(
      slice_rows(inputs, start, ends[end_chunk - 1]), training=False
    )
    _, total, states = tf.while_loop(
      lambda j, *_: j < end_chunk,
      lambda j, total, states: (
        j + 1,
        *one_chunk(j, start, predictions, total, states),
      ),
      (i, total, states),
    )
    return end_chunk, total, states

  total = tf.nest.map_structure(tf.zeros_like, report())
  states = tf.zeros([tf.size(splits) - 1, 2], tf.float64)
  _, total, states = tf.while_loop(
    lambda i, *_: i < tf.size(starts), one_pass, (tf.constant(0), total, states)
  )
  return total, states


def _finalize(finalizers, totals):
  """total (summed unfinalized metrics) → OrderedDict of final metrics as
  numpy values: one traced function of all finalizers where it can be
  (`_finalizing_function`), else each in turn."""
  finalize_all = _finalizing_function(finalizers, totals)

  def finalize(total):
    if finalize_all is None:
      return collections.OrderedDict(
        (name, tf.convert_to_tensor(finalizer(total[name])).numpy())
        for name, finalizer in finalizers.items()
      )
    return collections.OrderedDict(
      (name, value.numpy()) for name, value in finalize_all(total).items()
    )

  return finalize


def _finalizing_function(finalizers, totals):
  """The metric finalizers (their Python functions) as one tf.function of
  the summed metrics `totals` (their structure): each Keras finalizer
  builds a new Keras metric, variables and all, whenever it runs (4 per
  evaluation eagerly, most of a small model's evaluation time). Traced,
  the metrics' variables are created on the first trace and handed back,
  in the order they are asked for, on tf.function's second trace (which
  refuses new variables), so that every evaluation only assigns them and
  computes `result()`, the same ops as eagerly. None if the finalizers
  cannot be traced so (then they are called eagerly)."""
  specs = tf.nest.map_structure(
    lambda t: tf.TensorSpec(t.shape, t.dtype), totals
  )
  created, asked = [], 0

  def reuse_variables(next_creator, **kwargs):
    nonlocal asked
    if asked == len(created):
      created.append(next_creator(**kwargs))
    variable, asked = created[asked], asked + 1
    shape, dtype = kwargs.get('shape'), kwargs.get('dtype')
    if (shape is not None and not variable.shape.is_compatible_with(shape)) or (
      dtype is not None and tf.as_dtype(dtype) != variable.dtype
    ):
      raise ValueError('a finalizer asked for other variables when retraced')
    return variable

  def finalize_all(total):
    nonlocal asked
    asked = 0
    with tf.variable_creator_scope(reuse_variables):
      return collections.OrderedDict(
        (name, tf.convert_to_tensor(finalize(list(total[name]))))
        for name, finalize in finalizers.items()
      )

  try:
    return tf.function(
      finalize_all, input_signature=[specs], autograph=False
    ).get_concrete_function()
  except (TypeError, ValueError):
    return None


def build_dissimilarity(model_fn, client_tensors: ClientTensors | None = None):
  """(weights, [client data]) → OrderedDict(grad_variance,
  grad_dissimilarity), computed in this process (`client_tensors`: as
  `build_evaluation`'s). The clients' gradients are held at once (as the
  TFF computation holds them in its worker) for the two-pass variance."""
  local = _InProcess(model_fn, client_tensors)
  shapes = [v.shape for v in local.model.trainable_variables]

  def dissimilarity_fn(flat_weights, data, splits):
    # The arithmetic of build_federated_dissimilarity: weighted means are
    # Σ_k n_k v_k / Σ_k n_k, summed in client order from zero.
    weights = local.weights(flat_weights)
    num_clients = tf.size(splits) - 1
    gradients = [
      tf.TensorArray(tf.float32, size=num_clients, element_shape=shape)
      for shape in shapes
    ]
    weighted_sum = [tf.zeros(shape) for shape in shapes]
    n_sum, norms_sum = tf.constant(0.0), tf.constant(0.0)
    for k in tf.range(num_clients):
      gradient, squared_norm, n = _client_gradient(
        local.model, weights, local.client(data, splits, k)
      )
      gradient = tf.nest.flatten(gradient)
      gradients = [a.write(k, g) for a, g in zip(gradients, gradient)]
      weighted_sum = [s + g * n for s, g in zip(weighted_sum, gradient)]
      n_sum += n
      norms_sum += squared_norm * n
    global_gradient = [s / n_sum for s in weighted_sum]
    distances_sum = tf.constant(0.0)
    for k in tf.range(num_clients):
      distances_sum += measurements.squared_norm(
        [a.read(k) - g for a, g in zip(gradients, global_gradient)]
      ) * tf.cast(splits[k + 1] - splits[k], tf.float32)
    return collections.OrderedDict(
      grad_variance=distances_sum / n_sum,
      grad_dissimilarity=tf.sqrt(
        (norms_sum / n_sum) / measurements.squared_norm(global_gradient)
      ),
    )

  dissimilarity_fn = local.function(dissimilarity_fn)

  def dissimilarity(weights, data):
    return collections.OrderedDict(
      (k, v.numpy()) for k, v in local(dissimilarity_fn, weights, data).items()
    )

  return dissimilarity
