"""FedProx: Li et al., MLSys 2020, Algorithm 2.

FedAvg whose clients minimize the proximal objective
h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (eq. 2), with stragglers' partial
solutions aggregated (the caller's `StragglerPolicy.PARTIAL`). μ is a
hyper-parameter of the process state: read and change it with
`process.get_hparams` / `set_hparams` (key ['client_work']['mu']).
"""

import dataclasses
import math

import tensorflow_federated as tff

from tff_algos import composition
from tff_algos import local_training


def build_fed_prox(model_fn, client_learning_rate: float, mu: float,
                   server_learning_rate: float = 1.0,
                   client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES):
  return composition.compose(
      model_fn,
      local_training.build_proximal_sgd_client_work(
          model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
          mu=mu,
          client_weighting=client_weighting),
      tff.learning.optimizers.build_sgdm(server_learning_rate))


@dataclasses.dataclass
class AdaptiveMu:
  """The heuristic of Li et al. 2020, §5.3.2 (Fig. 3).

  μ grows by `step` whenever the training loss increases, and shrinks by
  `step` (not below 0) once the loss has decreased for `patience`
  consecutive rounds (the count then restarts). Its fields are its whole
  state (checkpointed with the run).
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
