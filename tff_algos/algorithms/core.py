"""What the builders share: their arguments, checked once with a clear
error, and the local-SGD process FedAvg, FedProx and FedISGD are built on.

A builder takes either the paper's learning rate (plain SGD, the papers'
local and server solvers) or TFF's `client_optimizer_fn` /
`server_optimizer_fn` (any `tff.learning.optimizers.Optimizer`: Adam,
Yogi, ...), never both; μ also as TFF's `proximal_strength`. Imports no
TensorFlow until a process is built.
"""

from __future__ import annotations

import functools
import math
import numbers

from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry

# The proximal weight of the local objective F_k(w) + μ/2‖w − w_t‖² that
# FedAvg, FedProx and FedISGD's clients minimize (FedAvg at μ = 0).
MU = registry.HyperParameter(
  'mu',
  1.0,
  help="FedProx's proximal weight μ of the local objective "
  'F_k(w) + μ/2‖w − w_t‖² (Li et al. eq. 2).',
  minimum=0.0,
  column='μ of the local objective (0: none)',
  symbol='μ',
)


def _is_number(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive(name: str, value) -> float:
  """`value` as a float; ValueError unless it is a finite number > 0."""
  if not _is_number(value) or not 0 < value < math.inf:
    raise ValueError(f'{name} must be a positive finite number, got {value!r}')
  return float(value)


def non_negative(name: str, value) -> float:
  """`value` as a float; ValueError unless it is a finite number >= 0."""
  if not _is_number(value) or not 0 <= value < math.inf:
    raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
  return float(value)


def optimizer(
  role: str, learning_rate, optimizer_fn, default_rate=None, rate_name=None
):
  """The `role` ('client' or 'server') optimizer: TFF's
  `{role}_optimizer_fn`, or SGD at `{role}_learning_rate` (`rate_name`;
  else at `default_rate`); ValueError for both or neither, TypeError for an
  `optimizer_fn` that is not a `tff.learning.optimizers.Optimizer`."""
  import tensorflow_federated as tff

  rate_name = rate_name or f'{role}_learning_rate'
  fn_name = f'{role}_optimizer_fn'
  if optimizer_fn is not None:
    if learning_rate is not None:
      raise ValueError(f'give {rate_name} (plain SGD) or {fn_name}, not both')
    if not isinstance(optimizer_fn, tff.learning.optimizers.Optimizer):
      raise TypeError(
        f'{fn_name} must be a tff.learning.optimizers.Optimizer '
        f'(e.g. tff.learning.optimizers.build_adam(0.01)), got '
        f'{type(optimizer_fn).__name__}'
      )
    return optimizer_fn
  if learning_rate is None:
    if default_rate is None:
      raise ValueError(f'give {rate_name} (plain SGD) or {fn_name}')
    learning_rate = default_rate
  return tff.learning.optimizers.build_sgdm(positive(rate_name, learning_rate))


def proximal_weight(name: str, value, proximal_strength) -> float:
  """μ (FedProx eq. 2; FedISGD's λ), given as `name` or as TFF's
  `proximal_strength` (the same number, with the paper's sign: the local
  gradient is ∇F_k(w) + μ(w − w_t))."""
  if proximal_strength is not None:
    if value is not None:
      raise ValueError(
        f"give {name} or proximal_strength (TFF's name for it), not both"
      )
    value = proximal_strength
  if value is None:
    raise ValueError(f'give {name} (or proximal_strength)')
  return non_negative(name, value)


def check_loop_implementation(loop_implementation) -> None:
  """TFF's `loop_implementation`, accepted so that a TFF builder call works
  unchanged: our local loop is the same sequence of steps either way."""
  import tensorflow_federated as tff

  if loop_implementation is not None and not isinstance(
    loop_implementation, tff.learning.LoopImplementation
  ):
    raise TypeError(
      'loop_implementation must be a tff.learning.'
      f'LoopImplementation, got {loop_implementation!r}'
    )


def local_sgd_process(
  model_fn,
  *,
  mu: float,
  client_learning_rate,
  client_optimizer_fn,
  server_optimizer,
  loop_implementation,
  **production,
):
  """FedProx's client work (proximal local SGD, μ >= 0; FedAvg: μ = 0)
  with `server_optimizer`, through `learning.build_process` (`production`:
  its keyword arguments)."""
  from tff_algos import learning

  check_loop_implementation(loop_implementation)
  return learning.build_process(
    model_fn,
    functools.partial(
      learning.build_proximal_sgd_client_work,
      mu=mu,
      optimizer=optimizer('client', client_learning_rate, client_optimizer_fn),
    ),
    server_optimizer,
    **production,
  )


def model_aggregator(settings, client_input):
  """The run's model aggregator (`--aggregator`: None for TFF's weighted
  mean) for a builder's `model_aggregator`, from an algorithm's resolved
  settings: a simulation's DP noise seeded, a production build's unseeded
  (`aggregators.build`). An algorithm that builds its own process passes
  it on, so that DP, compression and robust aggregation reach it."""
  from tff_algos import learning

  production = isinstance(client_input, learning.DatasetInput)
  return aggregators.build(settings.aggregator, seeded=not production)


def arguments(settings, client_input, server_scale: float = 1.0) -> dict:
  """A builder's keyword arguments from an algorithm's resolved settings
  (`registry.AlgorithmSettings`, in a registry entry's `build`): its
  optimizers (the server's times `server_scale`, e.g. FedISGD's λ), the
  client weighting, the model aggregator (a production build's DP noise
  unseeded: `aggregators.build`), the client input and whether to report
  the update spread."""
  built = dict(
    server_optimizer_fn=optimizers.build(
      settings.server_optimizer, scale=server_scale, server=True
    ),
    client_weighting=settings.client_weighting,
    client_input=client_input,
    model_aggregator=model_aggregator(settings, client_input),
    report_update_spread=settings.report_update_spread,
  )
  if settings.client_optimizer is not None:
    built['client_optimizer_fn'] = optimizers.build(settings.client_optimizer)
  return built
