"""Federated evaluation of a global model over ALL clients' data.

`build_evaluation` gives the papers' global objective f(w) = Σ_k p_k F_k(w)
(p_k = n_k / n) and accuracy over every example of every client, not the
running loss of the sampled clients. `build_dissimilarity` gives FedProx's
gradient dissimilarity (Li et al. 2020, §4.1 Def. 3 and §5.3.3):
    variance = Σ_k p_k ‖∇F_k(w) − ∇f(w)‖²,
    B(w)     = sqrt(Σ_k p_k ‖∇F_k(w)‖² / ‖∇f(w)‖²).
Both are TFF computations: a broadcast, a per-client map and a (weighted)
federated aggregation.
"""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import local_training
from tff_algos import statistics


def _types(model_fn):
  with tf.Graph().as_default():
    model = model_fn()
    return (model,
            tff.learning.models.weights_type_from_model(model),
            local_training.dataset_type(model.input_spec))


def build_evaluation(model_fn):
  """(weights@SERVER, data@CLIENTS) → the model's metrics over all data."""
  model, weights_type, data_type = _types(model_fn)
  aggregate = tff.learning.metrics.sum_then_finalize(model.metric_finalizers())

  @tff.tensorflow.computation(weights_type, data_type)
  def evaluate_client(weights, data):
    return local_training.evaluate_client(model_fn(), weights, data)

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def evaluate(weights, data):
    return aggregate(tff.federated_map(
        evaluate_client, (tff.federated_broadcast(weights), data)))

  return evaluate


def build_dissimilarity(model_fn):
  """(weights@SERVER, data@CLIENTS) → OrderedDict(grad_variance, B)."""
  _, weights_type, data_type = _types(model_fn)

  @tff.tensorflow.computation(weights_type, data_type)
  def client_gradient(weights, data):
    gradient = local_training.client_gradient(model_fn(), weights, data)
    return (gradient, statistics.squared_norm(gradient),
            tf.cast(local_training.num_examples(data), tf.float32))

  gradient_type = client_gradient.type_signature.result[0]

  @tff.tensorflow.computation(gradient_type, tf.float32, tf.float32)
  def summarize(global_gradient, variance, mean_squared_norm):
    return collections.OrderedDict(
        grad_variance=variance,
        B=tf.sqrt(mean_squared_norm / statistics.squared_norm(global_gradient)))

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def dissimilarity(weights, data):
    gradients, squared_norms, n = tff.federated_map(
        client_gradient, (tff.federated_broadcast(weights), data))
    global_gradient, variance = statistics.federated_spread(gradients, n)
    return tff.federated_map(summarize, (
        global_gradient, variance,
        tff.federated_mean(squared_norms, weight=n)))

  return dissimilarity
