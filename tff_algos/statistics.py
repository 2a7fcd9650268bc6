"""Federated second moments of client-placed values (used by metrics)."""

import tensorflow as tf
import tensorflow_federated as tff


def squared_norm(tensors):
  return tf.add_n([tf.reduce_sum(tf.square(t))
                   for t in tf.nest.flatten(tensors)])


def federated_spread(values, weight=None):
  """(v̄, Σ_k p_k ‖v_k − v̄‖²) of `values`@CLIENTS, p_k ∝ weight (or 1/K).

  Two passes (mean, then distances to the broadcast mean) rather than
  E‖v‖² − ‖v̄‖², which loses all precision when the v_k nearly agree.
  """
  value_type = values.type_signature.member

  @tff.tensorflow.computation(value_type, value_type)
  def squared_distance(a, b):
    return squared_norm(tf.nest.map_structure(tf.subtract, a, b))

  mean = tff.federated_mean(values, weight=weight)
  distances = tff.federated_map(
      squared_distance, (values, tff.federated_broadcast(mean)))
  return mean, tff.federated_mean(distances, weight=weight)
