"""The papers' models, as TFF `VariableModel` factories."""

import collections

import tensorflow as tf

from tff_algos.learning import model_ops


def _classifier(keras_model_fn, input_spec):
  return model_ops.KerasModelFn(
    keras_model_fn,
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True
    ),
    input_spec=input_spec,
    metrics_fn=lambda: [
      tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')
    ],
  )


def multinomial_logistic_regression(num_features: int, num_classes: int):
  """MLR: softmax(Wx + b), the model of FedProx's Synthetic and MNIST."""
  input_spec = collections.OrderedDict(
    x=tf.TensorSpec([None, num_features], tf.float32),
    y=tf.TensorSpec([None], tf.int32),
  )
  return _classifier(
    lambda: tf.keras.Sequential(
      [tf.keras.layers.Dense(num_classes, input_shape=(num_features,))]
    ),
    input_spec,
  )
