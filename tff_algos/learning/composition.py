"""Wires a client work and a server optimizer into a TFF learning process.

Every algorithm here is `tff.learning.templates.compose_learning_process`
with TFF's broadcast distributor, a weighted-mean aggregator and an
apply-optimizer finalizer; algorithms differ only in the client work and the
server optimizer they pass in (and, where a paper says so, the aggregator).
"""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning.client_work import ModelFn


def compose(
    model_fn: ModelFn,
    client_work: tff.learning.templates.ClientWorkProcess,
    server_optimizer: tff.learning.optimizers.Optimizer,
    aggregator: tff.aggregators.WeightedAggregationFactory | None = None,
) -> tff.learning.templates.LearningProcess:
  """Distributor → client work → weighted mean → server optimizer step."""

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  aggregator = aggregator or tff.aggregators.MeanFactory()
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      aggregator.create(weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(
          server_optimizer, weights_type))


def initial_model_weights(model_fn: ModelFn, seed: int):
  """The model's freshly initialized weights, a function of `seed` only."""
  tf.keras.utils.set_random_seed(seed)
  model = model_fn()
  return tf.nest.map_structure(
      lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model))
