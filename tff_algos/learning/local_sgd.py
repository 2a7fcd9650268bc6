"""The package's client works, each defined once (`ClientDefinition`):
proximal local SGD (the clients of FedAvg, FedProx and FedISGD, and the
centralized baseline's one client) and FedSGD's full-batch gradient.

Every engine runs them as it runs a user's definition: TFF's client work
(per client, and production's `DatasetInput`) and the compiled clients.
"""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import client_work as client_work_lib
from tff_algos.learning.client_definition import ClientDefinition
from tff_algos.learning.client_definition import ClientOutput

# The proximal client work's hyper-parameter (its `get_hparams` key) μ.
PROXIMAL_WEIGHT = 'mu'


def proximal_sgd(
  optimizer: tff.learning.optimizers.Optimizer, mu: float = 0.0
) -> ClientDefinition:
  """Local solver of h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (FedProx, eq. 2):
  each minibatch step feeds `optimizer` the gradient ∇F_k(w) + μ(w − w_t).
  Its hyper-parameters: μ (`PROXIMAL_WEIGHT`) and the optimizer's."""
  with tf.Graph().as_default():
    optimizer_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec([], tf.float32))
    )

  def init(shared):
    weights = tuple(shared.weights)
    state = optimizer.set_hparams(
      optimizer.initialize(
        tuple(tf.TensorSpec.from_tensor(w) for w in weights)
      ),
      collections.OrderedDict(
        (k, shared.hparams[k]) for k in optimizer_hparams
      ),
    )
    return weights, state, weights, shared.hparams[PROXIMAL_WEIGHT]

  def step(state, batch):
    weights, optimizer_state, anchor, mu = state
    _, gradients = batch.loss_and_gradients(weights)

    def proximal():
      return tuple(
        g + tf.cast(mu, g.dtype) * (w - w0)
        for g, w, w0 in zip(gradients, weights, anchor)
      )

    # μ = 0 (FedAvg) skips the proximal term per client: three elementwise
    # passes over the weights per step, ~15% of a CNN step's CPU time
    # (docs/PERFORMANCE.md). Compiled, XLA fuses them into the update and
    # the branch would cost more (9-16% of a Synthetic MLR round's XLA
    # time). Same values: g + 0·(w − w_t) = g.
    if batch.compiled:
      gradients = proximal()
    else:
      gradients = tf.cond(tf.equal(mu, 0.0), lambda: tuple(gradients), proximal)
    optimizer_state, weights = optimizer.next(
      optimizer_state, tuple(weights), gradients
    )
    return tuple(weights), optimizer_state, anchor, mu

  def final(shared, state, client):
    del client
    return ClientOutput([w0 - w for w0, w in zip(shared.weights, state[0])])

  hparams = {PROXIMAL_WEIGHT: float(mu)}
  hparams.update((k, float(v)) for k, v in optimizer_hparams.items())
  return ClientDefinition(init, step, final, hparams)


def _gradient_init(shared):
  return tuple(shared.weights), tuple(tf.zeros_like(w) for w in shared.weights)


def _gradient_step(state, batch):
  weights, total = state
  _, gradients = batch.loss_and_gradients(weights)
  return weights, tuple(
    t + tf.cast(batch.examples, g.dtype) * g for t, g in zip(total, gradients)
  )


def _gradient_final(shared, state, client):
  del shared
  return ClientOutput([t / tf.cast(client.examples, t.dtype) for t in state[1]])


# FedSGD's client work: ∇F_k(w_t) = Σ_b n_b ∇F_b / n_k over the client's
# whole data in one pass (McMahan et al. 2017, §2: E = 1, B = ∞).
FULL_BATCH_GRADIENT = ClientDefinition(
  _gradient_init, _gradient_step, _gradient_final, one_pass=True
)


def build_proximal_sgd_client_work(
  model_fn: client_work_lib.ModelFn,
  optimizer: tff.learning.optimizers.Optimizer,
  mu: float = 0.0,
  client_weighting='num_examples',
  client_input: client_work_lib.ClientInput | None = None,
  metrics_aggregator: client_work_lib.MetricsAggregator | None = None,
  report_update_squared_norm: bool = False,
):
  """Local solver of h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (FedProx, eq. 2).

  Each minibatch step feeds `optimizer` (the papers': plain SGD,
  `tff.learning.optimizers.build_sgdm(lr)`) the gradient ∇F_k(w) + μ(w − w_t).
  μ = 0 is FedAvg's local solver (McMahan et al. 2017, Algorithm 1).

  Args:
    model_fn: builds the model (a `tff.learning.models.VariableModel`), or
      a `tff.learning.models.FunctionalModel`.
    optimizer: the client optimizer.
    mu: the proximal weight μ (a hyper-parameter: `set_hparams`).
    client_weighting: 'num_examples' (n_k, the client's number of training
      examples, not of examples processed) or 'uniform' (1).
    client_input: `ScheduledInput()` (None: simulation) or
      `DatasetInput(epochs)`.
    metrics_aggregator: aggregates what the clients report besides their
      update (TFF's argument; default `tff.learning.metrics.
      sum_then_finalize`).
    report_update_squared_norm: also report Σ_k‖u_k‖² (for the update
      spread, `learning.build_process`).

  Returns:
    A ClientWorkProcess whose result is the update w_t − w_k (TFF's
    convention: a pseudo-gradient for the server optimizer) and whose
    hyper-parameters are `mu` and the optimizer's (e.g. `learning_rate`).
  """
  return proximal_sgd(optimizer, mu).client_work(
    model_fn,
    client_weighting,
    client_input,
    metrics_aggregator,
    report_update_squared_norm,
  )


def build_gradient_client_work(
  model_fn: client_work_lib.ModelFn,
  client_weighting='num_examples',
  client_input: client_work_lib.ClientInput | None = None,
  metrics_aggregator: client_work_lib.MetricsAggregator | None = None,
  report_update_squared_norm: bool = False,
):
  """FedSGD's client work (`FULL_BATCH_GRADIENT`): one full-batch gradient
  ∇F_k(w_t), the mean loss's over all of the client's examples (a
  scheduled input's whole dataset in chunks, its schedule unused; a
  `DatasetInput(epochs=1)`'s batches), weighted by n_k ('num_examples') or
  1 ('uniform'); one local step. The other arguments as
  `build_proximal_sgd_client_work`'s."""
  return FULL_BATCH_GRADIENT.client_work(
    model_fn,
    client_weighting,
    client_input,
    metrics_aggregator,
    report_update_squared_norm,
  )
