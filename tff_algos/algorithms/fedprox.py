"""FedProx: Li et al., MLSys 2020, Algorithm 2.

FedAvg whose clients minimize the proximal objective
h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (eq. 2), with stragglers' partial
solutions aggregated (§5.2). μ is a hyper-parameter of the process state:
read and change it with `process.get_hparams` / `set_hparams` (key
['client_work']['mu']); `AdaptiveMu` is the paper's rule for changing it
between rounds (§5.3.2).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import typing

import numpy as np

from tff_algos.algorithms import callbacks
from tff_algos.algorithms import core
from tff_algos.algorithms import registry

if typing.TYPE_CHECKING:  # In annotations only.
  import tensorflow_federated as tff

  from tff_algos import learning


def build_fed_prox(
  model_fn: learning.ModelFn,
  client_learning_rate: float | None = None,
  mu: float | None = None,
  *,
  proximal_strength: float | None = None,
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
  """FedProx as a TFF learning process: each client minimizes h_k(w; w_t)
  = F_k(w) + μ/2‖w − w_t‖² (eq. 2) from w_t, stepping with ∇F_k(w) +
  μ(w − w_t); the server applies its optimizer to the mean update (SGD at
  1: the mean of the client models, Algorithm 2). Takes the arguments of `tff.learning.algorithms.
  build_weighted_fed_prox` by keyword, so a pipeline switches by changing
  the import; but TFF 0.87's proximal term has the opposite sign
  (μ(w_t − w)): the same `proximal_strength` here is the paper's μ.

  Args:
    model_fn: builds a `tff.learning.models.VariableModel`; or a
      `tff.learning.models.FunctionalModel`.
    client_learning_rate: η of the clients' SGD on h_k; or
      `client_optimizer_fn`, any `tff.learning.optimizers.Optimizer`.
    mu: the proximal weight μ >= 0 (μ = 0: FedAvg's local solver); or
      `proximal_strength`, TFF's name for it.
    server_learning_rate: the server's SGD step on the mean update (default
      1); or `server_optimizer_fn` (e.g. FedAdam: `build_adam`).
    client_weighting: 'num_examples' (n_k, §5.1, the default) or 'uniform'
      (or a `tff.learning.ClientWeighting`).
    model_distributor, model_aggregator, metrics_aggregator: TFF's (see
      `learning.build_process`): e.g. `tff.learning.dp_aggregator(...)` or
      `secure_aggregator()`, and `tff.learning.metrics.
      secure_sum_then_finalize`.
    loop_implementation: accepted for TFF's signature (the same steps).
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=E)` (a tf.data.Dataset per client).
    report_update_spread: also measure (1/K)Σ_k‖u_k − ū‖² of the updates.

  Returns:
    A LearningProcess; `next(state, client_data)`. μ and the client
    optimizer's hyper-parameters are `get_hparams(state)['client_work']`.
  """
  return core.local_sgd_process(
    model_fn,
    mu=core.proximal_weight('mu', mu, proximal_strength),
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


@dataclasses.dataclass
class AdaptiveMu:
  """The heuristic of Li et al. 2020, §5.3.2 (Figure 3, Appendix C.3.3).

  μ grows by `step` whenever the training loss increases, and shrinks by
  `step` (not below 0) once the loss has decreased for `patience`
  consecutive rounds (the count then restarts). Its fields are its whole
  state (checkpointed with a run).
  """

  mu: float
  step: float = 0.1
  patience: int = 5
  previous_loss: float = math.nan  # NaN: no round seen yet.
  decreases: int = 0

  def update(self, loss: float) -> float:
    """Feeds one round's training loss; returns μ for the next round."""
    previous, self.previous_loss = self.previous_loss, loss
    if math.isnan(previous):
      return self.mu
    if loss > previous:
      self.mu += self.step
      self.decreases = 0
    elif loss < previous:
      self.decreases += 1
      if self.decreases == self.patience:
        self.mu = max(0.0, self.mu - self.step)
        self.decreases = 0
    return self.mu


class AdaptiveMuCallback(callbacks.RoundCallback):
  """Sets the client work's μ after each round from the global training
  loss, by `rule` (`AdaptiveMu`); it reads that loss every round. The
  row's `mu` is the μ the round used."""

  name = 'adaptive_mu'
  needs_evaluation = True
  requires = ('training_loss',)
  writes = (core.MU.name,)

  def __init__(self, rule: AdaptiveMu):
    self.rule = rule

  def state(self):
    return collections.OrderedDict(
      (k, np.asarray(v, np.float64))
      for k, v in dataclasses.asdict(self.rule).items()
    )

  def restore(self, state):
    for field in dataclasses.fields(self.rule):
      setattr(
        self.rule,
        field.name,
        type(getattr(self.rule, field.name))(state[field.name]),
      )

  def after_round(self, end):
    end.row[core.MU.name] = self.rule.mu
    if end.round_num == 0:
      return
    if end.training_loss is None:
      raise RuntimeError(
        f'adaptive μ has no training loss at round '
        f'{end.round_num}: the evaluation must run every '
        'round (needs_evaluation)'
      )
    mu = self.rule.update(end.training_loss)
    hparams = end.process.get_hparams(end.state)
    hparams['client_work']['mu'] = np.float32(mu)
    end.state = end.process.set_hparams(end.state, hparams)


ADAPTIVE_MU = registry.HyperParameter(
  'adaptive_mu',
  False,
  help='FedProx: adapt μ by ±0.1 from the training loss (Li et al. '
  '§5.3.2); --mu is the initial value.',
  symbol='adaptive μ',
  simulation_only=True,
)


def _build(model_fn, settings, client_input):
  return build_fed_prox(
    model_fn,
    mu=settings.hparams['mu'],
    **core.arguments(settings, client_input),
  )


def _callbacks(settings):
  """Adaptive μ (§5.3.2) when the run asks for it."""
  if settings.hparams['adaptive_mu']:
    return [AdaptiveMuCallback(AdaptiveMu(settings.hparams['mu']))]
  return []


def _describe(settings):
  return f'FedProx μ={settings.hparams["mu"]:g}' + (
    ' adaptive' if settings.hparams['adaptive_mu'] else ''
  )


ALGORITHM = registry.register(
  registry.Algorithm(
    name='fedprox',
    label='FedProx',
    summary='FedAvg with a proximal term μ/2‖w − w_t‖² in the local '
    "objective; stragglers' partial work kept",
    paper='Li et al., MLSys 2020, Algorithm 2',
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
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='partial'),
    hparams=(core.MU, ADAPTIVE_MU),
    describe=_describe,
    callbacks=_callbacks,
  )
)
