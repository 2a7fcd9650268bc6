"""FedProx: Li et al., MLSys 2020, Algorithm 2.

FedAvg whose clients minimize the proximal objective
h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (eq. 2), with stragglers' partial
solutions aggregated (§5.2). μ is a hyper-parameter of the process state:
read and change it with `process.get_hparams` / `set_hparams` (key
['client_work']['mu']); `AdaptiveMu` is the paper's rule for changing it
between rounds (§5.3.2).
"""

from __future__ import annotations

import dataclasses
import math

from tff_algos import lazy
from tff_algos.algorithms import registry

learning = lazy.module('tff_algos.learning')
tff = lazy.module('tensorflow_federated')


def build_fed_prox(
    model_fn: learning.ModelFn,
    client_learning_rate: float,
    mu: float,
    server_learning_rate: float = 1.0,
    client_weighting: str = 'num_examples',
    client_input: learning.ClientInput | None = None,
    report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedProx as a TFF learning process.

  Args:
    model_fn: builds the model.
    client_learning_rate: η of the clients' SGD on h_k.
    mu: the proximal weight μ of eq. 2 (μ = 0: FedAvg's local solver).
    server_learning_rate: the server's SGD step on the mean update (1:
      the weighted mean of the client models, as Algorithm 2).
    client_weighting: 'num_examples' (n_k, §5.1 "Implementation") or
      'uniform'.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=E)` (a tf.data.Dataset per client).
    report_update_spread: also measure (1/K)Σ_k‖u_k − ū‖² of the updates.

  Returns:
    A LearningProcess; `next(state, client_data)`.
  """
  return learning.compose(
      model_fn,
      learning.build_proximal_sgd_client_work(
          model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
          mu=mu, client_weighting=client_weighting,
          client_input=client_input or learning.ScheduledInput(),
          report_update_spread=report_update_spread),
      tff.learning.optimizers.build_sgdm(server_learning_rate))


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


def _build(model_fn, config, client_input):
  return build_fed_prox(model_fn, config.client_lr, config.mu,
                        config.server_lr, config.client_weighting,
                        client_input, config.update_spread)


def _describe(config):
  return f'FedProx μ={config.mu:g}' + (' adaptive' if config.adaptive_mu
                                       else '')


ALGORITHM = registry.register(registry.Algorithm(
    name='fedprox',
    label='FedProx',
    summary='FedAvg with a proximal term μ/2‖w − w_t‖² in the local '
            'objective; stragglers\' partial work kept',
    paper='Li et al., MLSys 2020, Algorithm 2',
    build=_build,
    hparams=('epochs', 'batch_size', 'client_lr', 'server_lr', 'mu',
             'adaptive_mu', 'client_weighting', 'straggler_policy'),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, mu=1.0, adaptive_mu=False,
                  straggler_policy='partial'),
    describe=_describe))
