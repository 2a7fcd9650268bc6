"""FedSGD: McMahan et al., AISTATS 2017, §2 (the FederatedSGD baseline).

Each selected client computes one full-batch gradient g_k = ∇F_k(w_t)
(E = 1, B = ∞); the server steps w_{t+1} = w_t − η Σ_k (n_k/n) g_k.
"""

import tensorflow_federated as tff

from tff_algos import composition
from tff_algos import local_training


def build_fed_sgd(model_fn, learning_rate: float,
                  client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES):
  return composition.compose(
      model_fn,
      local_training.build_gradient_client_work(model_fn, client_weighting),
      tff.learning.optimizers.build_sgdm(learning_rate))
