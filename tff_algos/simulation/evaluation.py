"""Evaluation of a global model over ALL clients' data.

`build_evaluation` gives the papers' global objective f(w) = Σ_k p_k F_k(w)
(p_k = n_k / n) and accuracy over every example of every client, not the
running loss of the sampled clients. `build_dissimilarity` gives FedProx's
gradient dissimilarity (Li et al. 2020, §4.1 Def. 3 and §5.3.3):
    grad_variance      = Σ_k p_k ‖∇F_k(w) − ∇f(w)‖²,
    grad_dissimilarity = B(w) = sqrt(Σ_k p_k ‖∇F_k(w)‖² / ‖∇f(w)‖²)
(the paper's B-local dissimilarity; 1 for identical devices).

Both are measurements, not part of any algorithm, so they run in this
process as plain TensorFlow: one `tf.function` (traced once) runs the same
TF code as the TFF computations `build_federated_evaluation` and
`build_federated_dissimilarity` and combines the results with the same sums
and weighted means, in float32: the same numbers to rounding (the tests
compare them at rtol 1e-6). Through the TFF runtime
every evaluation shipped every client's data to the worker over gRPC, which
took most of a round's time on small models (docs/PERFORMANCE.md); the TFF
versions stay here as the reference the tests compare against.
"""

import collections
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks.base import ALIGNMENT
from tasks.base import aligned_empty
from tff_algos.learning import measurements
from tff_algos.learning import model_ops


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
  if all(a.flags.c_contiguous and a.dtype == first.dtype and
         a.shape[1:] == first.shape[1:] and _root(a) is _root(first)
         for a in arrays):
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
          return np.ndarray((sum(len(a) for a in arrays),) + first.shape[1:],
                            first.dtype, buffer=root, offset=offset)
  return np.concatenate(arrays, out=aligned_empty(
      (sum(len(a) for a in arrays),) + first.shape[1:],
      np.result_type(*arrays)))


def _tensor(array):
  """`array` as a tensor that shares its memory (DLPack) when TensorFlow
  can take it so (C-contiguous, 64-byte aligned, a numeric dtype), else a
  copy (tf.constant); the array must not change afterwards. Either way
  the same values: the evaluation's results do not depend on it."""
  if (array.flags.c_contiguous and array.size and
      array.ctypes.data % ALIGNMENT == 0 and
      array.dtype in (np.float32, np.float64, np.int32, np.int64,
                      np.uint8)):
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
  return tf.constant(array)


class _AllClients:
  """All clients' arrays as one tensor per feature plus each client's row
  offsets, kept for the last `size` client lists (by the identity of their
  arrays, which are never modified in place here). Clients that are
  consecutive slices of one aligned array (`tasks.base.packed_clients`)
  cost no memory here: the tensor is that array (`_joined`, `_tensor`)."""

  def __init__(self, size=2):
    self._size = size
    self._entries = collections.OrderedDict()

  def __call__(self, data):
    if not data:
      raise ValueError('evaluation needs at least one client\'s data')
    key = tuple(id(a) for client in data for a in client.values())
    if key not in self._entries:
      if len(self._entries) == self._size:
        self._entries.popitem(last=False)
      sizes = [len(next(iter(client.values()))) for client in data]
      self._entries[key] = (
          list(data),  # Keeps the ids in `key` from being reused.
          collections.OrderedDict(
              (name, _tensor(_joined([c[name] for c in data])))
              for name in data[0]),
          tf.constant(np.cumsum([0] + sizes), tf.int32))
    self._entries.move_to_end(key)
    _, concatenated, splits = self._entries[key]
    return concatenated, splits


_CLIENTS = _AllClients()  # Shared: evaluation and dissimilarity of a run
                          # read the same training clients.


class _InProcess:
  """A model built once in this process, and what a tf.function over all
  clients needs: its input signature, the weights' structure, the reset of
  its metrics to a fresh model's (a TFF computation builds a fresh model for
  each client) and each client's slice of the concatenated data.

  `function(f)` traces f at once: Keras swaps the base classes of its models
  whenever a model is built in a graph (as TFF computations build theirs),
  and an eager model traced after such a swap fails.
  """

  def __init__(self, model_fn):
    self.model = model_fn()
    self._template = tff.learning.models.ModelWeights.from_model(self.model)
    self.input_signature = [
        [tf.TensorSpec(v.shape, v.dtype)
         for v in tf.nest.flatten(self._template)],
        model_ops.batched_spec(self.model.input_spec),
        tf.TensorSpec([None], tf.int32)]
    self._fresh_metrics = [v.numpy() for v in self.model.local_variables]
    self.clients = _CLIENTS

  def function(self, python_function, autograph=True):
    function = tf.function(python_function,
                           input_signature=self.input_signature,
                           autograph=autograph)
    function.get_concrete_function()
    return function

  def weights(self, flat_weights):
    return tf.nest.pack_sequence_as(self._template, flat_weights)

  def reset_metrics(self):
    for variable, value in zip(self.model.local_variables,
                               self._fresh_metrics):
      variable.assign(value)

  @staticmethod
  def client(data, splits, k):
    return tf.nest.map_structure(lambda t: t[splits[k]:splits[k + 1]], data)

  def __call__(self, function, weights, data):
    """function(flat weights, concatenated data, splits) on these clients."""
    return function([tf.constant(w) for w in tf.nest.flatten(weights)],
                    *self.clients(data))


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


def _client_gradient(model, weights, data):
  """(∇F_k(w), ‖∇F_k(w)‖², n_k) of one client."""
  gradient = model_ops.client_gradient(model, weights, data)
  return (gradient, measurements.squared_norm(gradient),
          tf.cast(model_ops.num_examples(data), tf.float32))


def build_evaluation(model_fn):
  """(weights, [client data]) → OrderedDict of the model's metrics over all
  clients' data ('loss', 'accuracy', 'num_examples', 'num_batches' for the
  tasks here), computed in this process.

  The forward passes take up to `model_ops.CHUNK_SIZE` examples at a time
  across clients: the metrics are sums over examples, so they add up to
  the same values as client by client (what the TFF computation does), in
  fewer and larger passes (`num_batches` counts the passes). A model whose
  metrics are not sums over examples says so with a `per_client_metrics`
  attribute on its model_fn (the char-LSTM: its loss is a mean over each
  batch's non-pad characters); it is evaluated client by client.
  """
  local = _InProcess(model_fn)
  model = local.model
  # Keras finalizers are tf.functions that build a metric (variables) per
  # trace, which eager tf.function tracing refuses: their Python functions,
  # traced once into one function (`_finalizing_function`).
  finalizers = collections.OrderedDict(
      (name, getattr(finalize, 'python_function', finalize))
      for name, finalize in model.metric_finalizers().items())
  per_client = getattr(model_fn, 'per_client_metrics', False)

  def summed_metrics(flat_weights, data, splits):
    """Σ_k client k's unfinalized metrics (what TFF's federated_sum gives).

    Traced without AutoGraph (its AST conversions of these functions and
    of TFF's Keras wrapper were most of the build's time): the loops are
    written as tf.while_loop, the ops are those of `model_ops.
    evaluate_client` (tests/simulation/test_evaluation.py compares the two
    bit for bit)."""
    weights = local.weights(flat_weights)
    if not per_client:
      local.reset_metrics()
      return _evaluate_client(model, weights, data)
    total = tf.nest.map_structure(
        tf.zeros_like, _method(model, 'report_local_unfinalized_metrics')())

    def body(k, total):
      local.reset_metrics()
      metrics = _evaluate_client(model, weights, local.client(data, splits, k))
      return k + 1, tf.nest.map_structure(tf.add, total, metrics)

    _, total = tf.while_loop(lambda k, _: k < tf.size(splits) - 1, body,
                             (tf.constant(0), total))
    return total

  summed_metrics = local.function(summed_metrics, autograph=False)
  finalize_all = _finalizing_function(
      finalizers, summed_metrics.get_concrete_function().structured_outputs)

  def evaluate(weights, data):
    total = local(summed_metrics, weights, data)
    if finalize_all is None:
      return collections.OrderedDict(
          (name, tf.convert_to_tensor(finalize(total[name])).numpy())
          for name, finalize in finalizers.items())
    return collections.OrderedDict(
        (name, value.numpy()) for name, value in finalize_all(total).items())

  return evaluate


def _finalizing_function(finalizers, totals):
  """The metric finalizers (their Python functions) as one tf.function of
  the summed metrics `totals` (their structure), traced once, here: each
  finalizer builds its Keras metric once (in that trace) and then only
  assigns its variables and computes `result()` per evaluation, the same
  ops as when called eagerly (which built a new Keras metric, variables and
  all, on every call: 4 per evaluation, most of a small model's evaluation
  time). None if they cannot be traced so (then they are called eagerly).
  """
  specs = tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), totals)

  def finalize_all(total):
    return collections.OrderedDict(
        (name, tf.convert_to_tensor(finalize(list(total[name]))))
        for name, finalize in finalizers.items())

  try:
    function = tf.function(finalize_all, input_signature=[specs],
                           autograph=False)
    function.get_concrete_function()
  except (TypeError, ValueError):
    return None
  return function


def build_dissimilarity(model_fn):
  """(weights, [client data]) → OrderedDict(grad_variance,
  grad_dissimilarity), computed in this process. The clients' gradients are
  held at once (as the TFF computation holds them in its worker) for the
  two-pass variance."""
  local = _InProcess(model_fn)
  shapes = [v.shape for v in local.model.trainable_variables]

  def dissimilarity_fn(flat_weights, data, splits):
    # The arithmetic of build_federated_dissimilarity: weighted means are
    # Σ_k n_k v_k / Σ_k n_k, summed in client order from zero.
    weights = local.weights(flat_weights)
    num_clients = tf.size(splits) - 1
    gradients = [tf.TensorArray(tf.float32, size=num_clients,
                                element_shape=shape) for shape in shapes]
    weighted_sum = [tf.zeros(shape) for shape in shapes]
    n_sum, norms_sum = tf.constant(0.0), tf.constant(0.0)
    for k in tf.range(num_clients):
      gradient, squared_norm, n = _client_gradient(
          local.model, weights, local.client(data, splits, k))
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
        grad_dissimilarity=tf.sqrt((norms_sum / n_sum) /
                  measurements.squared_norm(global_gradient)))

  dissimilarity_fn = local.function(dissimilarity_fn)

  def dissimilarity(weights, data):
    return collections.OrderedDict(
        (k, v.numpy())
        for k, v in local(dissimilarity_fn, weights, data).items())

  return dissimilarity


def _types(model_fn):
  with tf.Graph().as_default():
    model = model_fn()
    return (model,
            tff.learning.models.weights_type_from_model(model),
            model_ops.dataset_type(model.input_spec))


def build_federated_evaluation(model_fn):
  """`build_evaluation` as a TFF computation (the reference):
  (weights@SERVER, data@CLIENTS) → the model's metrics over all data."""
  model, weights_type, data_type = _types(model_fn)
  aggregate = tff.learning.metrics.sum_then_finalize(model.metric_finalizers())

  @tff.tensorflow.computation(weights_type, data_type)
  def evaluate_client(weights, data):
    return model_ops.evaluate_client(model_fn(), weights, data)

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def evaluate(weights, data):
    return aggregate(tff.federated_map(
        evaluate_client, (tff.federated_broadcast(weights), data)))

  return evaluate


def _federated_spread(values, weight):
  """(v̄, Σ_k p_k ‖v_k − v̄‖²) of `values`@CLIENTS, p_k ∝ weight.

  Two passes (mean, then distances to the broadcast mean), the arithmetic
  of `build_dissimilarity`.
  """
  value_type = values.type_signature.member

  @tff.tensorflow.computation(value_type, value_type)
  def squared_distance(a, b):
    return measurements.squared_norm(tf.nest.map_structure(tf.subtract, a, b))

  mean = tff.federated_mean(values, weight=weight)
  distances = tff.federated_map(
      squared_distance, (values, tff.federated_broadcast(mean)))
  return mean, tff.federated_mean(distances, weight=weight)


def build_federated_dissimilarity(model_fn):
  """`build_dissimilarity` as a TFF computation (the reference):
  (weights@SERVER, data@CLIENTS) → OrderedDict(grad_variance,
  grad_dissimilarity)."""
  _, weights_type, data_type = _types(model_fn)

  @tff.tensorflow.computation(weights_type, data_type)
  def client_gradient(weights, data):
    return _client_gradient(model_fn(), weights, data)

  gradient_type = client_gradient.type_signature.result[0]

  @tff.tensorflow.computation(gradient_type, tf.float32, tf.float32)
  def summarize(global_gradient, variance, mean_squared_norm):
    return collections.OrderedDict(
        grad_variance=variance,
        grad_dissimilarity=tf.sqrt(
            mean_squared_norm / measurements.squared_norm(global_gradient)))

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def dissimilarity(weights, data):
    gradients, squared_norms, n = tff.federated_map(
        client_gradient, (tff.federated_broadcast(weights), data))
    global_gradient, variance = _federated_spread(gradients, n)
    return tff.federated_map(summarize, (
        global_gradient, variance,
        tff.federated_mean(squared_norms, weight=n)))

  return dissimilarity
