"""FedAvg: McMahan et al., AISTATS 2017, Algorithm 1 (FederatedAveraging).

Each selected client runs E epochs of minibatch SGD (batch B) from w_t; the
server takes the mean of the client models weighted by n_k (eq. in §2:
w_{t+1} = Σ_k (n_k/n) w^k_{t+1}). The server step is SGD on the averaged
update w_t − Σ_k p_k w_k, so server_learning_rate = 1 is plain model
averaging. Stragglers (FedProx §5.2) are dropped.
"""

from __future__ import annotations

import typing

from tff_algos.algorithms import core
from tff_algos.algorithms import registry

if typing.TYPE_CHECKING:  # In annotations only.
  import tensorflow_federated as tff

  from tff_algos import learning


def build_fed_avg(
  model_fn: learning.ModelFn,
  client_learning_rate: float | None = None,
  *,
  client_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
  server_learning_rate: float | None = None,
  server_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
  client_weighting: str | tff.learning.ClientWeighting | None = None,
  model_distributor: tff.learning.templates.DistributionProcess | None = None,
  model_aggregator: learning.ModelAggregator | None = None,
  metrics_aggregator: learning.MetricsAggregator | None = None,
  loop_implementation: tff.learning.LoopImplementation | None = None,
  client_input: learning.ClientInput | None = None,
  report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedAvg as a TFF learning process: FedProx's client work at μ = 0.

  Takes the arguments of `tff.learning.algorithms.build_weighted_fed_avg`
  by keyword (a pipeline switches by changing the import); an unweighted
  `model_aggregator` gives `build_unweighted_fed_avg`.

  Args:
    model_fn: builds a `tff.learning.models.VariableModel`; or a
      `tff.learning.models.FunctionalModel`.
    client_learning_rate: η of the clients' SGD; or `client_optimizer_fn`,
      any `tff.learning.optimizers.Optimizer`.
    server_learning_rate: the server's SGD step on the mean update (default
      1: w_{t+1} is the weighted mean of the client models); or
      `server_optimizer_fn` (e.g. FedAdam: `build_adam`).
    client_weighting: 'num_examples' (n_k, Algorithm 1, the default) or
      'uniform' (or a `tff.learning.ClientWeighting`).
    model_distributor, model_aggregator, metrics_aggregator: TFF's (see
      `learning.build_process`).
    loop_implementation: accepted for TFF's signature; the local steps are
      the same either way.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=E)` (a tf.data.Dataset per client).
    report_update_spread: also measure (1/K)Σ_k‖u_k − ū‖² of the updates.

  Returns:
    A LearningProcess; `next(state, client_data)`.
  """
  return core.local_sgd_process(
    model_fn,
    mu=0.0,
    client_learning_rate=client_learning_rate,
    client_optimizer_fn=client_optimizer_fn,
    server_optimizer=core.optimizer(
      'server', server_learning_rate, server_optimizer_fn, default_rate=1.0
    ),
    loop_implementation=loop_implementation,
    client_weighting=client_weighting,
    client_input=client_input,
    model_distributor=model_distributor,
    model_aggregator=model_aggregator,
    metrics_aggregator=metrics_aggregator,
    report_update_spread=report_update_spread,
  )


def _build(model_fn, settings, client_input):
  return build_fed_avg(model_fn, **core.arguments(settings, client_input))


ALGORITHM = registry.register(
  registry.Algorithm(
    name='fedavg',
    label='FedAvg',
    summary='local SGD for E epochs, n_k-weighted model average; stragglers '
    'dropped',
    paper='McMahan et al., AISTATS 2017, Algorithm 1',
    build=_build,
    uses=(
      'epochs',
      'batch_size',
      'client_lr',
      'server_lr',
      'client_weighting',
      'straggler_policy',
      'client_optimizer',
      'server_optimizer',
    ),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='drop'),
    hparams=(core.MU.fixed_at(0.0),),
  )
)
