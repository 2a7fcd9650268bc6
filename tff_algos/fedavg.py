"""FedAvg: McMahan et al., AISTATS 2017, Algorithm 1 (FederatedAveraging).

Each selected client runs E epochs of minibatch SGD (batch B) from w_t; the
server takes the mean of the client models weighted by n_k. The server step
is SGD on the averaged update w_t − Σ p_k w_k, so server_learning_rate = 1 is
plain model averaging.
"""

import tensorflow_federated as tff

from tff_algos import composition
from tff_algos import local_training


def build_fed_avg(model_fn, client_learning_rate: float,
                  server_learning_rate: float = 1.0,
                  client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES):
  return composition.compose(
      model_fn,
      local_training.build_proximal_sgd_client_work(
          model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
          mu=0.0,
          client_weighting=client_weighting),
      tff.learning.optimizers.build_sgdm(server_learning_rate))
