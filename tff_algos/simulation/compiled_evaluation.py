"""A dense Keras classifier's evaluation over every client in one
XLA-compiled program (`simulation.evaluation` uses it where it can,
`run_of`): the model as a function of its weights, each example's loss
and accuracy match, summed by client. Its per-op costs were most of a
small model's round with evaluation every round; compiled, the metrics
are the same to float32 rounding and the per-client accuracies the
same."""

import collections
import functools

import numpy as np
import tensorflow as tf

from tff_algos.learning import model_ops
from tff_algos.simulation import compiled

# The metrics of a Keras classifier as TFF's `from_keras_model` makes it
# with a plain Keras SparseCategoricalAccuracy: what the compiled pass
# computes (`sums_of`), by name.
_COMPILED_METRICS = ['accuracy', 'loss', 'num_examples', 'num_batches']


def compilable(model_fn, model) -> bool:
  """Whether `model_fn`'s evaluation can be one XLA program over all
  clients' examples (`sums_of`) with the metrics computed as
  today: a `model_ops.KerasModelFn` (its model a function of its weights)
  without non-trainable weights (`predict` takes the trainable ones only)
  or layers XLA runs slower (`compiled.unpaying`: convolutions, recurrent
  layers), a loss that is the mean of its examples' and TFF's metrics
  with a plain Keras SparseCategoricalAccuracy (sums over examples, which
  the program adds up itself; none of them the model's own: TFF adds the
  last three only when `metrics_fn` has no metric of their names)."""
  if (
    not isinstance(model_fn, model_ops.KerasModelFn)
    or getattr(model_fn, 'per_client_metrics', False)
    or model.non_trainable_variables
  ):
    return False
  metrics = model.get_metrics()
  reduction = getattr(model_fn.loss_fn(), 'reduction', None)
  return (
    [metric.name for metric in metrics] == _COMPILED_METRICS
    and type(metrics[0]) is tf.keras.metrics.SparseCategoricalAccuracy
    and reduction
    in (
      tf.keras.losses.Reduction.AUTO,
      tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE,
    )
    # Built eagerly: a model built in a graph would swap Keras' base
    # classes under the eager model (`_InProcess`).
    and compiled.unpaying(model_fn.keras_model_fn().submodules) is None
  )


def sums_of(model_fn, specs, chunk, weights, data, splits, clients):
  """(Σ_k client k's unfinalized metrics, each client's correct, counted)
  as `build_evaluation`'s other passes give them, in one XLA program:
  the model as a function of its `weights` (`KerasModelFn.predict`) over
  chunks of `chunk` rows across clients, each example's loss
  (`KerasModelFn.example_losses`, summed in float64: the other passes'
  sum of the chunks' mean losses times their examples to float32
  rounding) and accuracy matches, summed by client (`clients`: each row's
  client, then `chunk` rows of none, index num_clients). `specs`: the
  metrics' structure, by name (`_COMPILED_METRICS`)."""
  size = model_ops.num_examples(data)
  num_clients = tf.size(splits) - 1
  rows = tf.range(chunk)

  def one_chunk(start, loss, by_client):
    # XLA's shapes are static: the last chunk's rows past the data's end
    # are its last row again, of no client.
    batch = model_ops.take(data, tf.minimum(start + rows, size - 1))
    client = tf.slice(clients, [start], [chunk])
    prediction, _ = model_fn.predict(weights, model_ops.features(batch), False)
    losses = model_fn.example_losses(model_ops.labels(batch), prediction)
    matches = tf.reshape(  # Sequences: matches per row.
      tf.keras.metrics.sparse_categorical_accuracy(
        model_ops.labels(batch), prediction
      ),
      [chunk, -1],
    )
    in_data = client < num_clients
    loss += tf.reduce_sum(tf.where(in_data, tf.cast(losses, tf.float64), 0.0))
    correct_counted = tf.stack(
      [
        tf.reduce_sum(tf.cast(matches, tf.float64), 1),
        tf.fill([chunk], tf.cast(tf.shape(matches)[1], tf.float64)),
      ],
      1,
    )
    by_client = tf.tensor_scatter_nd_add(
      by_client, client[:, None], correct_counted
    )
    return start + chunk, loss, by_client

  _, loss, by_client = tf.while_loop(
    lambda start, *_: start < size,
    one_chunk,
    (
      tf.constant(0),
      tf.constant(0.0, tf.float64),
      tf.zeros([num_clients + 1, 2], tf.float64),
    ),
  )
  correct, counted = tf.unstack(by_client[:-1], axis=1)
  values = dict(
    accuracy=[tf.reduce_sum(correct), tf.reduce_sum(counted)],
    loss=[loss, size],
    num_examples=[size],
    # The chunks, as `_evaluate_client` counts its forward passes.
    num_batches=[(size + chunk - 1) // chunk],
  )
  total = collections.OrderedDict(
    (name, [tf.cast(v, s.dtype) for v, s in zip(values[name], specs[name])])
    for name in _COMPILED_METRICS
  )
  return total, correct, counted


def _unsupported(function, signature) -> bool:
  """Whether XLA cannot compile `function` (asked for one client of one
  row: XLA's IR wants static shapes)."""
  weights, data, *_ = signature
  one_row = tf.nest.map_structure(
    lambda s: tf.TensorSpec([1, *s.shape[1:]], s.dtype), data
  )
  one_client = [
    tf.TensorSpec([2], tf.int32),
    tf.TensorSpec([1 + model_ops.CHUNK_SIZE], tf.int32),
  ]
  # A function of its own: `function`, traced for any shapes already,
  # would hand back that trace for these.
  alone = tf.function(function.python_function, autograph=False)
  traced = alone.get_concrete_function(weights, one_row, *one_client)
  return compiled.unsupported(traced) is not None


def run_of(model_fn, local):
  """(weights, [client data]) → (Σ_k unfinalized metrics, each client's
  correct, counted) as one XLA program (`sums_of`), and the
  metrics' structure; None for a model whose evaluation keeps the other
  passes (`compilable`) or that XLA cannot compile
  (`compiled.unsupported`)."""
  if not compilable(model_fn, local.model):
    return None
  specs = collections.OrderedDict(
    (m.name, [tf.TensorSpec(v.shape, v.dtype) for v in m.variables])
    for m in local.model.get_metrics()
  )
  signature = [*local.input_signature, tf.TensorSpec([None], tf.int32)]
  chunk = model_ops.CHUNK_SIZE
  function = tf.function(
    functools.partial(sums_of, model_fn, specs, chunk),
    jit_compile=True,
    autograph=False,
  )
  sums = function.get_concrete_function(*signature)
  # Runs in one process that evaluate the same model on data of the same
  # shapes (a notebook's, the tests') share the program and XLA's
  # compilations of it, found by the traced graph's content.
  key = compiled.round_key(['evaluation', *signature], sums)
  sums = compiled.remembered(
    key, lambda: None if _unsupported(function, signature) else sums
  )
  if sums is None:
    return None
  totals = sums.structured_outputs[0]

  def run(weights, data):
    concatenated, splits = local.clients(data)
    sizes = np.diff(splits.numpy())
    if not sizes.any():  # No examples: XLA cannot gather from none.
      zeros = tf.zeros([len(sizes)], tf.float64)
      return (
        tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), totals),
        zeros,
        zeros,
      )
    # Each row's client, then a chunk of rows of none (index num_clients).
    clients = np.repeat(
      np.arange(len(sizes) + 1, dtype=np.int32), [*sizes, chunk]
    )
    return sums(
      [tf.constant(w) for w in tf.nest.flatten(weights)],
      concatenated,
      splits,
      tf.constant(clients),
    )

  return run, totals
