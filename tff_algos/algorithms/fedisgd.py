"""FedISGD: Dou & Yuan, CAAI Trans. Intell. Syst. 2022, Algorithm 1.

Clients run FedProx's local solver with λ = μ (eq. 2). The server takes an
implicit-SGD step (eq. 6) on the pseudo-gradient λ(w_t − w̄),
w̄ = (1/K)Σ_k w_k^{t+1}:

    w_{t+1} = w_t − η_g(t) · λ · (w_t − w̄),

i.e. SGD on TFF's averaged update (w_t − w̄) with learning rate η_g(t)·λ.
η_g "decays by a fixed number of rounds" from η_gi (§2.2): here
η_g(t) = η_gi · decay^⌊t / decay_every⌋, t counting server steps from 0,
the `step` schedule of `algorithms.optimizers` (--server_lr_decay,
--server_lr_decay_every; docs/REPRODUCTION.md states how we read the
paper's garbled formula).
The mean is unweighted (1/K), as eq. 6; `client_weighting='num_examples'`
weights it by n_k instead. With `report_update_spread` (always in the
simulation) the process reports update_spread = (1/K)Σ_k‖u_k − ū‖² of the
updates u_k = w_t − w_k; the paper's VLG (eq. 8) is λ² · update_spread.
"""

from __future__ import annotations

import typing

from tff_algos.algorithms import callbacks
from tff_algos.algorithms import core
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry

if typing.TYPE_CHECKING:  # In annotations only.
  import tensorflow_federated as tff

  from tff_algos import learning


def build_server_optimizer(
  lam: float,
  server_learning_rate: float,
  server_lr_decay: float = 1.0,
  server_lr_decay_every: int = 1,
) -> tff.learning.optimizers.Optimizer:
  """FedISGD's server step (eq. 6) as a TFF optimizer: SGD at η_g(t)·λ on
  the mean update w_t − w̄, η_g(t) = η_gi · decay^⌊t / decay_every⌋ (the
  `step` schedule of `algorithms.optimizers`)."""
  try:
    settings = optimizers.OptimizerSettings(
      'sgd',
      core.positive('server_learning_rate', server_learning_rate),
      schedule=optimizers.Schedule(
        'step', server_lr_decay, server_lr_decay_every
      ),
    )
  except optimizers.SettingsError as e:
    raise ValueError(str(e).replace('--lr_', 'server_lr_')) from None
  return optimizers.build(
    settings, scale=core.non_negative('lam', lam), server=True
  )


def _server_optimizer(lam, learning_rate, decay, decay_every, optimizer_fn):
  """`optimizer_fn` as given (checked by `learning.build_process`), or
  FedISGD's scheduled step; ValueError for both or neither."""
  if optimizer_fn is not None:
    given = [
      name
      for name, value in (
        ('server_learning_rate', learning_rate),
        ('server_lr_decay', decay),
        ('server_lr_decay_every', decay_every),
      )
      if value is not None
    ]
    if given:
      raise ValueError(
        f'give server_optimizer_fn or {", ".join(given)} '
        "(FedISGD's scheduled step), not both"
      )
    return optimizer_fn
  if learning_rate is None:
    raise ValueError('give server_learning_rate (η_gi) or server_optimizer_fn')
  return build_server_optimizer(
    lam,
    learning_rate,
    1.0 if decay is None else decay,
    1 if decay_every is None else decay_every,
  )


def build_fed_isgd(
  model_fn: learning.ModelFn,
  client_learning_rate: float | None = None,
  lam: float | None = None,
  server_learning_rate: float | None = None,
  *,
  server_lr_decay: float | None = None,
  server_lr_decay_every: int | None = None,
  proximal_strength: float | None = None,
  client_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
  server_optimizer_fn: tff.learning.optimizers.Optimizer | None = None,
  client_weighting: str | tff.learning.ClientWeighting | None = None,
  model_distributor: tff.learning.templates.DistributionProcess | None = None,
  model_aggregator: learning.ModelAggregator | None = None,
  metrics_aggregator: learning.MetricsAggregator | None = None,
  loop_implementation: tff.learning.LoopImplementation | None = None,
  client_input: learning.ClientInput | None = None,
  report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedISGD as a TFF learning process: FedProx's client work at μ = λ, a
  uniform mean and the scheduled server step of eq. 6.

  Args:
    model_fn: builds a `tff.learning.models.VariableModel`; or a
      `tff.learning.models.FunctionalModel`.
    client_learning_rate: η_c of the clients' SGD (Table 1); or
      `client_optimizer_fn`, any `tff.learning.optimizers.Optimizer`.
    lam: λ >= 0, the proximal weight of the local objective (eq. 2) and the
      scale of the server's pseudo-gradient (eq. 6); or `proximal_strength`.
    server_learning_rate: η_gi, the initial server rate (Table 1), ...
    server_lr_decay: ...multiplied by this (default 1: constant)...
    server_lr_decay_every: ...every this many server steps (default 1).
      Or `server_optimizer_fn` instead of these three (default:
      `build_server_optimizer(lam, η_gi, decay, decay_every)`).
    client_weighting: 'uniform' (1/K, eq. 6, the default) or
      'num_examples' (or a `tff.learning.ClientWeighting`).
    model_distributor, model_aggregator, metrics_aggregator: TFF's (see
      `learning.build_process`).
    loop_implementation: accepted for TFF's signature.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=E)` (a tf.data.Dataset per client).
    report_update_spread: also measure the update spread, whose λ² multiple
      is the paper's VLG (eq. 8); the simulation always measures it.

  Returns:
    A LearningProcess; `next(state, client_data)`.
  """
  lam = core.proximal_weight('lam', lam, proximal_strength)
  return core.local_sgd_process(
    model_fn,
    mu=lam,
    client_learning_rate=client_learning_rate,
    client_optimizer_fn=client_optimizer_fn,
    server_optimizer=_server_optimizer(
      lam,
      server_learning_rate,
      server_lr_decay,
      server_lr_decay_every,
      server_optimizer_fn,
    ),
    loop_implementation=loop_implementation,
    client_weighting=client_weighting,
    default_weighting='uniform',
    client_input=client_input,
    model_distributor=model_distributor,
    model_aggregator=model_aggregator,
    metrics_aggregator=metrics_aggregator,
    report_update_spread=report_update_spread,
  )


LAM = registry.HyperParameter(
  'lam',
  1.0,
  help="FedISGD's λ: the proximal weight of its local objective and the "
  'scale of its server step.',
  minimum=0.0,
  column='λ of FedISGD (its proximal weight and server scale)',
  symbol='λ',
  formerly='mu',  # Files written before λ had a name of its own.
)


def _build(model_fn, settings, client_input):
  # The simulation always measures the VLG (Figure 2); a production build
  # only when asked (--update_spread).
  from tff_algos import learning

  lam = settings.hparams['lam']
  arguments = core.arguments(settings, client_input, server_scale=lam)
  arguments['report_update_spread'] |= not isinstance(
    client_input, learning.DatasetInput
  )
  return build_fed_isgd(model_fn, lam=lam, **arguments)


class VarianceOfLocalGradients(callbacks.RoundCallback):
  """VLG = (1/K)Σ_k‖∇G(w_t) − ∇G_k‖² (eq. 8) with ∇G_k = λ(w_t − w_k):
  λ² times the spread of the updates, on every round that trained."""

  columns = {'vlg': 'VLG = λ²·update spread (FedISGD eq. 8)'}
  requires = ('update_spread',)

  def __init__(self, lam: float):
    self._lam = lam

  def after_round(self, end):
    if end.update_spread is not None:
      end.row['vlg'] = self._lam**2 * end.update_spread


ALGORITHM = registry.register(
  registry.Algorithm(
    name='fedisgd',
    label='FedISGD',
    summary="FedProx's local solver (λ) and a server implicit-SGD step "
    'w − η_g·λ·(w − mean of client models), η_g decaying',
    paper='Dou & Yuan, CAAI TIS 2022, eq. 6',
    build=_build,
    uses=(
      'epochs',
      'batch_size',
      'client_lr',
      'server_lr',
      'client_weighting',
      'straggler_policy',
      'client_optimizer',
      'server_optimizer',  # η_g's step schedule.
    ),
    defaults=dict(
      registry.LOCAL_SGD_DEFAULTS,
      client_weighting='uniform',
      straggler_policy='partial',
    ),
    hparams=(LAM,),
    describe=lambda settings: f'FedISGD λ={settings.hparams["lam"]:g}',
    callbacks=lambda settings: [
      VarianceOfLocalGradients(settings.hparams['lam'])
    ],
    server_lr_schedule='step',
  )
)
