"""The in-process evaluation and dissimilarity as TFF computations: the
reference that tests/simulation/test_evaluation.py compares
`tff_algos.simulation.evaluation` against, and the evaluation through
the TFF runtime that benchmarks/round_profile.py times beside it: it ships
every client's data to the worker, 2.5 s per MNIST 2NN evaluation against
0.31–0.39 s in process (docs/PERFORMANCE.md, "Where a round's time
goes"). The same TF code (`model_ops.evaluate_client`, the evaluation's
client gradient) under TFF's federated sums and means.
"""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import measurements
from tff_algos.learning import model_ops
from tff_algos.simulation.evaluation import _client_gradient


def _types(model_fn):
  with tf.Graph().as_default():
    model = model_fn()
    return (
      model,
      tff.learning.models.weights_type_from_model(model),
      model_ops.dataset_type(model.input_spec),
    )


def build_federated_evaluation(model_fn):
  """`build_evaluation` as a TFF computation (the reference):
  (weights@SERVER, data@CLIENTS) → the model's metrics over all data."""
  model, weights_type, data_type = _types(model_fn)
  aggregate = tff.learning.metrics.sum_then_finalize(model.metric_finalizers())

  @tff.tensorflow.computation(weights_type, data_type)
  def evaluate_client(weights, data):
    return model_ops.evaluate_client(model_fn(), weights, data)

  @tff.federated_computation(
    tff.FederatedType(weights_type, tff.SERVER),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def evaluate(weights, data):
    return aggregate(
      tff.federated_map(
        evaluate_client, (tff.federated_broadcast(weights), data)
      )
    )

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
    squared_distance, (values, tff.federated_broadcast(mean))
  )
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
        mean_squared_norm / measurements.squared_norm(global_gradient)
      ),
    )

  @tff.federated_computation(
    tff.FederatedType(weights_type, tff.SERVER),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def dissimilarity(weights, data):
    gradients, squared_norms, n = tff.federated_map(
      client_gradient, (tff.federated_broadcast(weights), data)
    )
    global_gradient, variance = _federated_spread(gradients, n)
    return tff.federated_map(
      summarize,
      (global_gradient, variance, tff.federated_mean(squared_norms, weight=n)),
    )

  return dissimilarity
