"""Federated statistics of client-placed values, in one aggregation.

One aggregation keeps a learning process compilable to TFF's production
forms (MapReduceForm, DistributeAggregateForm): a statistic that broadcasts
an aggregate back to the clients and aggregates again is not.
"""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def squared_norm(tensors):
  """Σ of the squares of every element of a structure of tensors."""
  return tf.add_n([tf.reduce_sum(tf.square(t))
                   for t in tf.nest.flatten(tensors)])


def federated_update_spread(updates):
  """(1/K)Σ_k ‖u_k − ū‖², ū = (1/K)Σ_k u_k, of `updates`@CLIENTS.

  The spread of the client updates about their unweighted mean: FedISGD's
  VLG (Dou & Yuan 2022, eq. 8) is λ² times this, since its local gradient
  estimate is λ(w_t − w_k) = λ·u_k. Computed from the sums K, Σu_k and
  Σ‖u_k‖² (one aggregation) as Σ‖u_k‖²/K − ‖ū‖², in float64: the
  cancellation then costs rounding errors of about 1e-16·‖ū‖², far below
  float32's resolution of the spread unless the u_k agree to 1e-4.
  Returns a float32@SERVER.
  """
  update_type = updates.type_signature.member

  @tff.tensorflow.computation(update_type)
  def moments(update):
    flat = [tf.cast(u, tf.float64) for u in tf.nest.flatten(update)]
    return (tf.constant(1.0, tf.float64), flat, squared_norm(flat))

  sums = tff.federated_sum(tff.federated_map(moments, updates))

  @tff.tensorflow.computation(sums.type_signature.member)
  def spread(sums):
    count, total, total_squared_norm = sums
    mean = [t / count for t in total]
    return tf.cast(total_squared_norm / count - squared_norm(mean),
                   np.float32)

  return tff.federated_map(spread, sums)
