"""FedAvg: McMahan et al., AISTATS 2017, Algorithm 1 (FederatedAveraging).

Each selected client runs E epochs of minibatch SGD (batch B) from w_t; the
server takes the mean of the client models weighted by n_k (eq. in §2:
w_{t+1} = Σ_k (n_k/n) w^k_{t+1}). The server step is SGD on the averaged
update w_t − Σ_k p_k w_k, so server_learning_rate = 1 is plain model
averaging. Stragglers (FedProx §5.2) are dropped.
"""

from __future__ import annotations

from tff_algos import lazy
from tff_algos.algorithms import registry

learning = lazy.module('tff_algos.learning')
tff = lazy.module('tensorflow_federated')


def build_fed_avg(
    model_fn: learning.ModelFn,
    client_learning_rate: float,
    server_learning_rate: float = 1.0,
    client_weighting: str = 'num_examples',
    client_input: learning.ClientInput | None = None,
    report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedAvg as a TFF learning process.

  Args:
    model_fn: builds the model.
    client_learning_rate: η of the clients' SGD.
    server_learning_rate: the server's SGD step on the mean update (1:
      w_{t+1} is the weighted mean of the client models).
    client_weighting: 'num_examples' (n_k, Algorithm 1) or 'uniform'.
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
          mu=0.0, client_weighting=client_weighting,
          client_input=client_input or learning.ScheduledInput(),
          report_update_spread=report_update_spread),
      tff.learning.optimizers.build_sgdm(server_learning_rate))


def _build(model_fn, config, client_input):
  return build_fed_avg(model_fn, config.client_lr, config.server_lr,
                       config.client_weighting, client_input,
                       config.update_spread)


ALGORITHM = registry.register(registry.Algorithm(
    name='fedavg',
    label='FedAvg',
    summary='local SGD for E epochs, n_k-weighted model average; stragglers '
            'dropped',
    paper='McMahan et al., AISTATS 2017, Algorithm 1',
    build=_build,
    hparams=('epochs', 'batch_size', 'client_lr', 'server_lr',
             'client_weighting', 'straggler_policy'),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='drop'),
    fixed=dict(mu=0.0)))
