"""FedISGD: Dou & Yuan, CAAI Trans. Intell. Syst. 2022.

Clients run FedProx's local solver with λ = μ. The server takes an implicit-
SGD step (eq. 6) on the pseudo-gradient λ(w_t − w̄), w̄ = (1/K)Σ_k w_k^{t+1}:

    w_{t+1} = w_t − η_g(t) · λ · (w_t − w̄),

i.e. SGD on TFF's averaged update (w_t − w̄) with learning rate η_g(t)·λ.
η_g decays in steps: η_g(t) = η_gi · decay^⌊t / decay_every⌋, t counting
server updates from 0. The mean is uniform (1/K) by default, as in the
paper; `client_weighting=NUM_EXAMPLES` weights it by n_k instead. The client
work reports update_spread = (1/K)Σ‖(w_t − w_k) − (w_t − w̄)‖², so the
paper's VLG (eq. 8) is λ² · update_spread.
"""

import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import composition
from tff_algos import local_training


def server_learning_rate_schedule(initial: float, decay: float = 1.0,
                                  decay_every: int = 1):
  """η_g(t) = initial · decay^⌊t / decay_every⌋."""

  def schedule(t):
    steps = tf.math.floordiv(tf.cast(t, tf.int32), decay_every)
    return initial * tf.pow(tf.constant(decay, tf.float32),
                            tf.cast(steps, tf.float32))

  return schedule


def build_fed_isgd(model_fn, client_learning_rate: float, lam: float,
                   server_learning_rate: float, server_lr_decay: float = 1.0,
                   server_lr_decay_every: int = 1,
                   client_weighting=tff.learning.ClientWeighting.UNIFORM):
  eta_g = server_learning_rate_schedule(
      server_learning_rate, server_lr_decay, server_lr_decay_every)
  return composition.compose(
      model_fn,
      local_training.build_proximal_sgd_client_work(
          model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
          mu=lam,
          client_weighting=client_weighting, report_update_spread=True),
      tff.learning.optimizers.schedule_learning_rate(
          tff.learning.optimizers.build_sgdm(server_learning_rate * lam),
          lambda t: lam * eta_g(t)))
