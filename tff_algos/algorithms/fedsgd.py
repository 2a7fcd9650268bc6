"""FedSGD: McMahan et al., AISTATS 2017, §2 (the FederatedSGD baseline).

Each selected client computes one full-batch gradient g_k = ∇F_k(w_t)
(E = 1, B = ∞); the server steps w_{t+1} = w_t − η Σ_k (n_k/n) g_k.
"""

from __future__ import annotations

import typing

from tff_algos.algorithms import core
from tff_algos.algorithms import registry

if typing.TYPE_CHECKING:  # In annotations only.
  import tensorflow_federated as tff

  from tff_algos import learning


def build_fed_sgd(
  model_fn: learning.ModelFn,
  learning_rate: float | None = None,
  *,
  server_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
  client_weighting: str | tff.learning.ClientWeighting | None = None,
  model_distributor: tff.learning.templates.DistributionProcess | None = None,
  model_aggregator: learning.ModelAggregator | None = None,
  metrics_aggregator: learning.MetricsAggregator | None = None,
  loop_implementation: tff.learning.LoopImplementation | None = None,
  client_input: learning.ClientInput | None = None,
  report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedSGD as a TFF learning process.

  Takes the arguments of `tff.learning.algorithms.build_fed_sgd` by keyword
  (it has no client optimizer: a client computes one gradient).

  Args:
    model_fn: builds a `tff.learning.models.VariableModel`; or a
      `tff.learning.models.FunctionalModel`.
    learning_rate: η of the server's SGD step on the mean gradient; or
      `server_optimizer_fn`, any `tff.learning.optimizers.Optimizer`.
    client_weighting: 'num_examples' (n_k, §2, the default) or 'uniform'
      (or a `tff.learning.ClientWeighting`).
    model_distributor, model_aggregator, metrics_aggregator: TFF's (see
      `learning.build_process`).
    loop_implementation: accepted for TFF's signature; the gradient is the
      same either way.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=1)` (a tf.data.Dataset per client).
    report_update_spread: also measure the spread of the gradients.

  Returns:
    A LearningProcess; `next(state, client_data)`.
  """
  from tff_algos import learning

  core.check_loop_implementation(loop_implementation)
  return learning.build_process(
    model_fn,
    learning.build_gradient_client_work,
    core.optimizer(
      'server', learning_rate, server_optimizer_fn, rate_name='learning_rate'
    ),
    client_weighting=client_weighting,
    client_input=client_input,
    model_distributor=model_distributor,
    model_aggregator=model_aggregator,
    metrics_aggregator=metrics_aggregator,
    report_update_spread=report_update_spread,
  )


def _build(model_fn, settings, client_input):
  return build_fed_sgd(model_fn, **core.arguments(settings, client_input))


ALGORITHM = registry.register(
  registry.Algorithm(
    name='fedsgd',
    label='FedSGD',
    summary='one full-batch gradient per client (E = 1, B = ∞), server SGD '
    'step with η',
    paper='McMahan et al., AISTATS 2017, §2',
    build=_build,
    uses=('client_lr', 'server_lr', 'client_weighting', 'server_optimizer'),
    # η: --server_lr, else --client_lr (the paper calls both η).
    defaults=dict(
      client_lr=registry.LOCAL_SGD_DEFAULTS['client_lr'],
      server_lr=lambda settings: settings['client_lr'],
      client_weighting='num_examples',
    ),
    fixed=dict(epochs=1, batch_size=-1, straggler_policy='drop'),
    hparams=(core.MU.fixed_at(0.0),),
    client_optimizer=False,  # A client computes one gradient.
  )
)
