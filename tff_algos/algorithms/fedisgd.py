"""FedISGD: Dou & Yuan, CAAI Trans. Intell. Syst. 2022, Algorithm 1.

Clients run FedProx's local solver with λ = μ (eq. 2). The server takes an
implicit-SGD step (eq. 6) on the pseudo-gradient λ(w_t − w̄),
w̄ = (1/K)Σ_k w_k^{t+1}:

    w_{t+1} = w_t − η_g(t) · λ · (w_t − w̄),

i.e. SGD on TFF's averaged update (w_t − w̄) with learning rate η_g(t)·λ.
η_g "decays by a fixed number of rounds" from η_gi (§2.2): here
η_g(t) = η_gi · decay^⌊t / decay_every⌋, t counting server steps from 0
(docs/REPRODUCTION.md states how we read the paper's garbled formula).
The mean is unweighted (1/K), as eq. 6; `client_weighting='num_examples'`
weights it by n_k instead. The process reports update_spread =
(1/K)Σ_k‖u_k − ū‖² of the updates u_k = w_t − w_k; the paper's VLG (eq. 8)
is λ² · update_spread.
"""

from __future__ import annotations

from tff_algos import lazy
from tff_algos.algorithms import registry

learning = lazy.module('tff_algos.learning')
tf = lazy.module('tensorflow')
tff = lazy.module('tensorflow_federated')


def server_learning_rate_schedule(initial: float, decay: float = 1.0,
                                  decay_every: int = 1):
  """η_g(t) = initial · decay^⌊t / decay_every⌋, as a TF function of t."""

  def schedule(t):
    steps = tf.math.floordiv(tf.cast(t, tf.int32), decay_every)
    return initial * tf.pow(tf.constant(decay, tf.float32),
                            tf.cast(steps, tf.float32))

  return schedule


def build_fed_isgd(
    model_fn: learning.ModelFn,
    client_learning_rate: float,
    lam: float,
    server_learning_rate: float,
    server_lr_decay: float = 1.0,
    server_lr_decay_every: int = 1,
    client_weighting: str = 'uniform',
    client_input: learning.ClientInput | None = None,
) -> tff.learning.templates.LearningProcess:
  """FedISGD as a TFF learning process.

  Args:
    model_fn: builds the model.
    client_learning_rate: η_c of the clients' SGD (Table 1).
    lam: λ, the proximal weight of the local objective (eq. 2) and the
      scale of the server's pseudo-gradient (eq. 6).
    server_learning_rate: η_gi, the initial server rate (Table 1).
    server_lr_decay: η_g is multiplied by this...
    server_lr_decay_every: ...every this many server steps.
    client_weighting: 'uniform' (1/K, eq. 6) or 'num_examples'.
    client_input: `learning.ScheduledInput()` (the default: simulation) or
      `learning.DatasetInput(epochs=E)` (a tf.data.Dataset per client).

  Returns:
    A LearningProcess; `next(state, client_data)`. Its measurements
    include the update spread (VLG / λ², eq. 8).
  """
  eta_g = server_learning_rate_schedule(
      server_learning_rate, server_lr_decay, server_lr_decay_every)
  return learning.compose(
      model_fn,
      learning.build_proximal_sgd_client_work(
          model_fn, tff.learning.optimizers.build_sgdm(client_learning_rate),
          mu=lam, client_weighting=client_weighting,
          client_input=client_input or learning.ScheduledInput(),
          report_update_spread=True),
      tff.learning.optimizers.schedule_learning_rate(
          tff.learning.optimizers.build_sgdm(server_learning_rate * lam),
          lambda t: lam * eta_g(t)))


def _build(model_fn, config, client_input):
  return build_fed_isgd(model_fn, config.client_lr, config.mu,
                        config.server_lr, config.server_lr_decay,
                        config.server_lr_decay_every, config.client_weighting,
                        client_input)


def _vlg(row):
  """VLG = (1/K)Σ_k‖∇G(w_t) − ∇G_k‖² (eq. 8) with ∇G_k = λ(w_t − w_k):
  λ² times the spread of the updates."""
  if row.get('update_spread') is None:
    return {}
  return dict(vlg=row['mu']**2 * row['update_spread'])


ALGORITHM = registry.register(registry.Algorithm(
    name='fedisgd',
    label='FedISGD',
    summary='FedProx\'s local solver (λ) and a server implicit-SGD step '
            'w − η_g·λ·(w − mean of client models), η_g decaying',
    paper='Dou & Yuan, CAAI TIS 2022, eq. 6',
    build=_build,
    hparams=('epochs', 'batch_size', 'client_lr', 'server_lr', 'mu',
             'server_lr_decay', 'server_lr_decay_every', 'client_weighting',
             'straggler_policy'),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, mu=1.0, server_lr_decay=1.0,
                  server_lr_decay_every=1, client_weighting='uniform',
                  straggler_policy='partial'),
    describe=lambda config: f'FedISGD λ={config.mu:g}',
    round_metrics=_vlg))
