"""FedSGD: McMahan et al., AISTATS 2017, §2 (the FederatedSGD baseline).

Each selected client computes one full-batch gradient g_k = ∇F_k(w_t)
(E = 1, B = ∞); the server steps w_{t+1} = w_t − η Σ_k (n_k/n) g_k.
"""

from __future__ import annotations

from tff_algos import lazy
from tff_algos.algorithms import registry

learning = lazy.module('tff_algos.learning')
tff = lazy.module('tensorflow_federated')


def build_fed_sgd(
    model_fn: learning.ModelFn,
    learning_rate: float,
    client_weighting: str = 'num_examples',
    client_input: learning.ClientInput | None = None,
    report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedSGD as a TFF learning process.

  Args:
    model_fn: builds the model.
    learning_rate: η of the server's step on the mean gradient.
    client_weighting: 'num_examples' (n_k, §2) or 'uniform'.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=1)` (a tf.data.Dataset per client).
    report_update_spread: also measure the spread of the gradients.

  Returns:
    A LearningProcess; `next(state, client_data)`.
  """
  return learning.compose(
      model_fn,
      learning.build_gradient_client_work(
          model_fn, client_weighting,
          client_input or learning.ScheduledInput(), report_update_spread),
      tff.learning.optimizers.build_sgdm(learning_rate))


def _build(model_fn, config, client_input):
  return build_fed_sgd(model_fn, config.server_lr, config.client_weighting,
                       client_input, config.update_spread)


ALGORITHM = registry.register(registry.Algorithm(
    name='fedsgd',
    label='FedSGD',
    summary='one full-batch gradient per client (E = 1, B = ∞), server SGD '
            'step with η',
    paper='McMahan et al., AISTATS 2017, §2',
    build=_build,
    hparams=('client_lr', 'server_lr', 'client_weighting'),
    # η: --server_lr, else --client_lr (the paper calls both η).
    defaults=dict(client_lr=registry.LOCAL_SGD_DEFAULTS['client_lr'],
                  server_lr=lambda config: config.client_lr,
                  client_weighting='num_examples'),
    fixed=dict(epochs=1, batch_size=-1, mu=0.0, straggler_policy='drop')))
