"""What the client works and the evaluation do to a model and its data.

Plain TensorFlow on a `tff.learning.models.VariableModel`, usable inside a
TFF computation and outside one (the in-process evaluation); and the model
argument the builders take, TFF's: a no-argument callable returning a
VariableModel, or a `tff.learning.models.FunctionalModel`
(`variable_model_fn`).
"""

import collections.abc
from collections.abc import Callable
import dataclasses

import tensorflow as tf
import tensorflow_federated as tff

CHUNK_SIZE = 4096  # Examples per forward pass when a client's whole data is
# processed "as one batch" (gradients, evaluation).
# Rows a model predicts at once in `predict_in_parts`: a CNN's activations
# for CHUNK_SIZE images are about 0.9 GB, for this many an eighth of that.
PREDICT_ROWS = 512

VariableModelFn = Callable[[], tff.learning.models.VariableModel]
# What the builders take as `model_fn`, as TFF 0.87's builders do.
ModelFn = VariableModelFn | tff.learning.models.FunctionalModel


class _FunctionalVariableModel(tff.learning.models.VariableModel):
  """A `tff.learning.models.FunctionalModel` as a VariableModel, so that the
  client works have one code path for both kinds of model.

  Its weights are variables holding the functional model's initial weights;
  a forward pass is the functional model's prediction and loss at their
  values, as TFF's functional client work computes them. Its metrics are the
  functional model's own (`tff.learning.models.model_from_functional` would
  replace them with the mean loss): their state lives in local variables,
  is updated by `update_metrics_state` and finalized whole by
  `finalize_metrics`, which `metric_finalizers` returns, as TFF's builders
  hand it to the metrics aggregator (TFF's aggregators take either form).
  """

  def __init__(self, functional_model: tff.learning.models.FunctionalModel):
    self._model = functional_model
    trainable, non_trainable = functional_model.initial_weights
    self._trainable = tuple(tf.Variable(w) for w in trainable)
    self._non_trainable = tuple(
      tf.Variable(w, trainable=False) for w in non_trainable
    )
    self._metrics = tf.nest.map_structure(
      lambda t: tf.Variable(t, trainable=False),
      functional_model.initialize_metrics_state(),
    )

  @property
  def trainable_variables(self):
    return self._trainable

  @property
  def non_trainable_variables(self):
    return self._non_trainable

  @property
  def local_variables(self):
    return tuple(tf.nest.flatten(self._metrics))

  @property
  def input_spec(self):
    return self._model.input_spec

  def _weights(self):
    return (
      tuple(v.read_value() for v in self._trainable),
      tuple(v.read_value() for v in self._non_trainable),
    )

  @tf.function
  def forward_pass(self, batch_input, training=True):
    if isinstance(batch_input, collections.abc.Mapping):
      x, y = batch_input['x'], batch_input['y']
    else:
      x, y = batch_input
    output = self._model.predict_on_batch(self._weights(), x, training)
    batch_output = tff.learning.models.BatchOutput(
      loss=self._model.loss(output=output, label=y),
      predictions=output,
      num_examples=tf.shape(tf.nest.flatten(output)[0])[0],
    )
    state = self._model.update_metrics_state(
      self.report_local_unfinalized_metrics(),
      labels=y,
      batch_output=batch_output,
    )
    for variable, value in zip(
      tf.nest.flatten(self._metrics), tf.nest.flatten(state)
    ):
      variable.assign(value)
    return batch_output

  @tf.function
  def predict_on_batch(self, x, training=True):
    return self._model.predict_on_batch(self._weights(), x, training)

  def report_local_unfinalized_metrics(self):
    return tf.nest.map_structure(lambda v: v.read_value(), self._metrics)

  def metric_finalizers(self):
    return self._model.finalize_metrics

  def reset_metrics(self):
    for variable, value in zip(
      tf.nest.flatten(self._metrics),
      tf.nest.flatten(self._model.initialize_metrics_state()),
    ):
      variable.assign(value)


@dataclasses.dataclass(frozen=True)
class KerasModelFn:
  """A model_fn of a Keras model: called, the VariableModel that TFF's
  `tff.learning.models.from_keras_model` makes of a new
  `keras_model_fn()` with `loss_fn()`, `input_spec` and `metrics_fn()`.

  Its parts also let a simulation compile clients' training
  (`simulation.compiled`): the model with its weights given
  as tensors, and the loss of each example. `loss_fn()` must be a
  `tf.keras.losses.Loss` whose batch value is the mean of its examples'
  (Keras's default reduction)."""

  keras_model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  input_spec: object
  metrics_fn: Callable[[], list] = list

  def __call__(self) -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
      self.keras_model_fn(),
      loss=self.loss_fn(),
      input_spec=self.input_spec,
      metrics=self.metrics_fn(),
    )

  def predict(self, trainable, x, training=True):
    """The model's output for inputs `x` at the trainable weights
    `trainable` (tensors, in the order of the model's trainable
    variables), and its regularization losses: the Keras model is built
    with those tensors in place of its trainable variables (the way TFF's
    `functional_model_from_keras` makes a model functional)."""
    weights = list(trainable)

    def with_given_weights(next_creator, **kwargs):
      if kwargs.get('trainable', True):
        return weights.pop(0)
      return next_creator(**kwargs)

    with tf.variable_creator_scope(with_given_weights):
      model = self.keras_model_fn()
    if weights:
      raise ValueError(
        f'the Keras model takes {len(trainable) - len(weights)}'
        f' trainable weights, not {len(trainable)}'
      )
    return model(x, training=training), list(model.losses)

  def example_losses(self, y_true, y_pred):
    """Each example's loss (the mean over its elements for a sequence
    output): the loss with no reduction, then averaged within examples, so
    that their mean is the loss of the batch."""
    loss = self.loss_fn()
    config = dict(loss.get_config(), reduction='none')
    per_element = type(loss).from_config(config)(y_true, y_pred)
    rank = per_element.shape.rank
    return (
      per_element
      if rank == 1
      else tf.reduce_mean(per_element, axis=list(range(1, rank)))
    )


def variable_model_fn(model_fn: ModelFn) -> VariableModelFn:
  """`model_fn`, TFF's model argument, as a no-argument function that
  returns a `tff.learning.models.VariableModel` or raises a TypeError
  naming what it got.

  A `tff.learning.models.FunctionalModel` becomes a VariableModel with the
  same weights, loss and metrics (`_FunctionalVariableModel`); anything else
  must be a callable returning a VariableModel, checked at each call (the
  builders call it while building the process, so a wrong model_fn fails
  there).
  """
  if isinstance(model_fn, tff.learning.models.FunctionalModel):
    return lambda: _FunctionalVariableModel(model_fn)
  if not callable(model_fn):
    raise TypeError(
      'model_fn is not a callable or a tff.learning.models.'
      f'FunctionalModel, got {type(model_fn).__name__}'
    )

  def checked_model_fn():
    model = model_fn()
    if not isinstance(model, tff.learning.models.VariableModel):
      hint = (
        ' (wrap a Keras model with tff.learning.models.from_keras_model)'
        if isinstance(model, tf.keras.Model)
        else ''
      )
      raise TypeError(
        'model_fn must return a tff.learning.models.'
        'VariableModel, but the callable returned type: '
        f'{type(model).__name__}{hint}'
      )
    return model

  return checked_model_fn


def batched_spec(input_spec):
  """The TensorSpecs of a client's whole dataset, given the model's batch
  spec (any number of examples)."""
  return tf.nest.map_structure(
    lambda s: tf.TensorSpec([None] + list(s.shape[1:]), s.dtype), input_spec
  )


def dataset_type(input_spec):
  """The TFF type of a client's whole dataset, given the model's batch spec."""
  return tff.types.tensorflow_to_type(batched_spec(input_spec))


def num_examples(data):
  return tf.shape(tf.nest.flatten(data)[0])[0]


def take(data, indices):
  return tf.nest.map_structure(lambda t: tf.gather(t, indices), data)


def chunk(data, start):
  """data[start:start + CHUNK_SIZE] (fewer at the end)."""
  end = tf.minimum(start + CHUNK_SIZE, num_examples(data))
  return tf.nest.map_structure(lambda t: t[start:end], data)


def predict_in_parts(predict, x, training=True, rows=PREDICT_ROWS):
  """`predict(x, training)` made `rows` rows at a time and concatenated:
  each row's prediction is its own (a model's layers act row by row in
  inference), so the result is the whole batch's, while only one part's
  activations are held at a time."""
  rows_of = lambda i: tf.nest.map_structure(
    lambda t: t[i * rows : (i + 1) * rows], x
  )
  first = predict(rows_of(0), training)
  parts = [
    tf.TensorArray(t.dtype, size=0, dynamic_size=True, infer_shape=False).write(
      0, t
    )
    for t in tf.nest.flatten(first)
  ]

  def body(i, parts):
    part = tf.nest.flatten(predict(rows_of(i), training))
    return i + 1, [a.write(i, t) for a, t in zip(parts, part)]

  _, parts = tf.while_loop(
    lambda i, _: i * rows < num_examples(x), body, (tf.constant(1), parts)
  )
  whole = [a.concat() for a in parts]
  for t, like in zip(whole, tf.nest.flatten(first)):
    t.set_shape([None, *like.shape[1:]])
  return tf.nest.pack_sequence_as(first, whole)


def assign_weights(model, weights):
  tf.nest.map_structure(
    lambda v, t: v.assign(t),
    tff.learning.models.ModelWeights.from_model(model),
    weights,
  )


def weighted_gradient(model, batch):
  """(n_b · ∇(mean loss over the batch), n_b) at the model's weights."""
  with tf.GradientTape() as tape:
    loss = model.forward_pass(batch, training=True).loss
  n = num_examples(batch)
  return (
    [
      tf.cast(n, tf.float32) * tf.convert_to_tensor(g)  # Embeddings: sparse.
      for g in tape.gradient(loss, model.trainable_variables)
    ],
    n,
  )


def full_batch_gradient(model, data):
  """∇F_k(w) = Σ_c n_c ∇F_c(w) / n_k over chunks c of all of `data`."""
  total = [tf.zeros_like(v) for v in model.trainable_variables]
  for start in tf.range(0, num_examples(data), CHUNK_SIZE):
    gradient, _ = weighted_gradient(model, chunk(data, start))
    total = [t + g for t, g in zip(total, gradient)]
  n = tf.cast(num_examples(data), tf.float32)
  return [t / n for t in total]


@tf.function
def client_gradient(model, weights, data):
  """∇F_k(w) at the given model weights, over all of the client's data."""
  assign_weights(model, weights)
  return full_batch_gradient(model, data)


@tf.function
def evaluate_client(model, weights, data):
  """The model's metrics over all of `data`, as unfinalized sums."""
  assign_weights(model, weights)
  for start in tf.range(0, num_examples(data), CHUNK_SIZE):
    model.forward_pass(chunk(data, start), training=False)
  return model.report_local_unfinalized_metrics()


def labels(batch):
  """The labels of a batch, where TFF's Keras model reads them."""
  return batch['y'] if isinstance(batch, collections.abc.Mapping) else batch[1]


def features(batch):
  """The model's input of a batch, where TFF's Keras model reads it."""
  return batch['x'] if isinstance(batch, collections.abc.Mapping) else batch[0]
