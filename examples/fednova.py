"""FedNova: Wang et al., NeurIPS 2020, "Tackling the Objective
Inconsistency Problem in Heterogeneous Federated Optimization" (vanilla
SGD on the clients).

Client k runs τ_k local SGD steps from w_t (τ_k varies with its n_k, E, B
and whether it straggles) and reports its normalized update
d_k = (w_t − w_k)/τ_k; the server steps by τ_eff · Σ_k p_k d_k, where
τ_eff = Σ_k p_k τ_k and p_k = n_k/n. FedAvg's Σ_k p_k (w_t − w_k) =
Σ_k p_k τ_k d_k weights a client's direction by its steps too, and so
minimizes a surrogate whose weights are p_k τ_k / Σ_j p_j τ_j: the
inconsistency FedNova removes. With every τ_k equal the two coincide.

An algorithm of your own in one file: its clients' work defined once
(`learning.ClientDefinition`), from which the per-client process and the
compiled clients are both built, and a registry entry.

τ_eff is a second weighted mean over the clients, with the same weights
p_k as the updates': `final` gives τ_k as its `scale`; the process
aggregates the scales beside the updates and multiplies the model
aggregator's Σ_k p_k d_k by their mean τ_eff, on which the server
optimizer (SGD at --server_lr, 1: the paper's) steps. Both means are
aggregations of one round, so the round still compiles to TFF's
MapReduceForm. τ_eff is the column update_scale.

  python -m tff_algos --import=examples/fednova.py --algo=fednova ...
"""

import dataclasses

import tensorflow as tf

from tff_algos import learning
from tff_algos.algorithms import core
from tff_algos.algorithms import registry


def init(shared):
  """The client's state: its weights, from w_t, and its learning rate."""
  return list(shared.weights), shared.hparams['learning_rate']


def step(state, batch):
  """One SGD step on the batch's mean loss."""
  weights, rate = state
  _, gradients = batch.loss_and_gradients(weights)
  return [w - rate * g for w, g in zip(weights, gradients)], rate


def final(shared, state, client):
  """d_k = (w_t − w_k)/τ_k, with τ_k the scale the server's mean takes."""
  steps = tf.cast(client.steps, tf.float32)
  # A client without a step this round did not move: d_k = 0, not 0/0.
  normalized = [
    tf.math.divide_no_nan(w_t - w, steps)
    for w_t, w in zip(shared.weights, state[0])
  ]
  return learning.ClientOutput(normalized, scale=steps)


FEDNOVA = learning.ClientDefinition(
  init, step, final, hparams={'learning_rate': 0.01}
)


def build_fed_nova(model_fn, settings, client_input):
  """FedNova's learning process, at the run's client learning rate."""
  arguments = core.arguments(settings, client_input)
  arguments.pop('client_optimizer_fn', None)  # Plain SGD, in `step`.
  clients = dataclasses.replace(
    FEDNOVA,
    hparams={'learning_rate': settings.client_optimizer.learning_rate},
  )
  return learning.build_process(
    model_fn,
    clients.client_work,
    arguments.pop('server_optimizer_fn'),
    **arguments,
  )


ALGORITHM = registry.register(
  registry.Algorithm(
    name='fednova',
    label='FedNova',
    summary='local SGD, each update normalized by its steps τ_k; the server '
    'steps by τ_eff times their n_k-weighted mean',
    paper='Wang et al., NeurIPS 2020, §4 (FedNova, vanilla SGD)',
    build=build_fed_nova,
    uses=(
      'epochs',
      'batch_size',
      'client_lr',
      'server_lr',
      'client_weighting',
      'straggler_policy',
    ),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='partial'),
    metrics={
      'update_scale': "τ_eff: the clients' weighted mean local steps, the "
      "factor of the server's update"
    },
  )
)
