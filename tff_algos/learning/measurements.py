"""The spread of the client updates, from what the aggregators carry.

    update_spread = (1/K)Σ_k ‖u_k − ū‖² = (1/K)Σ_k ‖u_k‖² − ‖ū‖²,
    ū = (1/K)Σ_k u_k,

the spread of the K participants' updates about their unweighted mean
(FedISGD's VLG, Dou & Yuan 2022 eq. 8, is λ² times this). No client value
leaves a client outside the configured aggregators: each client's ‖u_k‖²
and the count K go through the metrics aggregator (the client work's
`update_squared_norm` and `participants`), and ū is the model aggregator's
own result when the clients are weighted uniformly, else a second
aggregation of the updates with weight 1 through the same factory. With a
differentially private model aggregator the spread is measured about the
privatized mean, and Σ‖u_k‖² is exact (not privatized): leave it off in a
private deployment (it is off unless asked for).

Both aggregations are single rounds, so a learning process that measures
the spread still compiles to TFF's production forms.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

UNIFORM_MEAN_SQUARED_NORM = 'uniform_mean_squared_norm'


def squared_norm(tensors):
  """Σ of the squares of every element of a structure of tensors."""
  return tf.add_n(
    [tf.reduce_sum(tf.square(t)) for t in tf.nest.flatten(tensors)]
  )


def _norm_measurement(value):
  """OrderedDict(uniform_mean_squared_norm=‖value‖²)@SERVER, in float64."""

  @tff.tensorflow.computation(value.type_signature.member)
  def norm(value):
    return collections.OrderedDict(
      [
        (
          UNIFORM_MEAN_SQUARED_NORM,
          squared_norm(
            [tf.cast(v, tf.float64) for v in tf.nest.flatten(value)]
          ),
        )
      ]
    )

  return tff.federated_map(norm, value)


def measure_uniform_mean(
  aggregator: tff.aggregators.WeightedAggregationFactory,
  weights_are_uniform: bool,
) -> tff.aggregators.WeightedAggregationFactory:
  """`aggregator`, also measuring ‖ū‖² (float64, `UNIFORM_MEAN_SQUARED_NORM`)
  of the unweighted mean ū of the values it aggregates.

  With uniform weights ū is the aggregate itself; otherwise the values are
  aggregated once more, with weight 1, by a process of the same factory
  that starts from its initial state each round (a stateful aggregator,
  e.g. one with adaptive clipping, then clips ū's values with its initial
  bounds).
  """
  if weights_are_uniform:
    return tff.aggregators.add_measurements(
      aggregator, server_measurement_fn=_norm_measurement
    )

  def uniform_mean(value, weight):
    process = aggregator.create(
      value.type_signature.member, weight.type_signature.member
    )
    return process.next(
      process.initialize(),
      value,
      tff.federated_value(np.float32(1.0), tff.CLIENTS),
    ).result

  return tff.aggregators.add_measurements(
    aggregator,
    client_measurement_fn=lambda value, weight: _norm_measurement(
      uniform_mean(value, weight)
    ),
  )


def with_update_spread(
  process: tff.learning.templates.LearningProcess,
) -> tff.learning.templates.LearningProcess:
  """`process` whose round metrics also hold
  metrics['client_work']['update_spread'] (float32), computed at the server
  from the client work's `update_squared_norm` and `participants` and the
  aggregator's `UNIFORM_MEAN_SQUARED_NORM` (see the module docstring)."""
  metrics_type = process.next.type_signature.result.metrics.member

  @tff.tensorflow.computation(metrics_type)
  def add_spread(metrics):
    work = metrics['client_work']
    count = tf.cast(work['participants'], tf.float64)
    spread = (
      work['update_squared_norm'] / count
      - metrics['aggregator'][UNIFORM_MEAN_SQUARED_NORM]
    )
    work = collections.OrderedDict(
      work, update_spread=tf.cast(spread, tf.float32)
    )
    return collections.OrderedDict(metrics, client_work=work)

  @tff.federated_computation(process.next.type_signature.parameter)
  def next_fn(state, client_data):
    output = process.next(state, client_data)
    return tff.learning.templates.LearningProcessOutput(
      output.state, tff.federated_map(add_spread, output.metrics)
    )

  return tff.learning.templates.LearningProcess(
    process.initialize,
    next_fn,
    process.get_model_weights,
    process.set_model_weights,
    get_hparams_fn=process.get_hparams,
    set_hparams_fn=process.set_hparams,
  )
