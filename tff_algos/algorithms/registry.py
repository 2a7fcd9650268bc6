"""The algorithms by name: what the CLI, run folders and plots know of each.

An algorithm is one module (one per paper) holding a typed builder and one
`register(Algorithm(...))` call; `tff_algos.algorithms` imports this
package's five (FedAvg, FedSGD, FedProx, FedISGD and the centralized
baseline). A module of your own registers the same way and is then an
`--algo` of `run_experiment.py` (tests/algorithms/test_registry.py adds
FedAvg with server momentum from its test file alone).

Imports no TensorFlow: `run_experiment.py --help` lists the algorithms and
configs are validated before anything heavy loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import dataclasses
from typing import Any

from tff_algos.algorithms import aggregators
from tff_algos.algorithms import callbacks as callbacks_lib
from tff_algos.algorithms import optimizers

# Run settings whose meaning or default depends on the algorithm. A run
# that does not give one gets the algorithm's default (its entry).
ALGORITHM_FIELDS = (
  'epochs',
  'batch_size',
  'client_lr',
  'server_lr',
  'straggler_policy',
  'client_weighting',
)
# Hyper-parameters of the papers' algorithms that have a flag of their own
# (--mu, --lam, --adaptive_mu); any other is --hparam NAME=VALUE.
HPARAM_FLAGS = ('mu', 'lam', 'adaptive_mu')

# FedProx's settings for its synthetic data (Li et al. 2020, §5.2 and
# Appendix C.2), the default run: E = 20, B = 10, learning rate 0.01, and
# FedAvg's n_k-weighted mean with a server step of 1 (model averaging).
LOCAL_SGD_DEFAULTS = dict(
  epochs=20,
  batch_size=10,
  client_lr=0.01,
  server_lr=1.0,
  client_weighting='num_examples',
)


@dataclasses.dataclass(frozen=True)
class AlgorithmSettings:
  """An algorithm's settings in a run, resolved: what its builder and its
  callbacks take.

  Attributes:
    name: the algorithm (its `--algo`).
    epochs: local epochs E.
    batch_size: local minibatch size B (-1: the whole local dataset).
    client_optimizer: the clients' optimizer, or None (FedSGD's clients
      compute one gradient).
    server_optimizer: the server's optimizer on the mean update.
    client_weighting: 'num_examples' (n_k) or 'uniform' (1/K).
    straggler_policy: 'drop' or 'partial'.
    hparams: its own hyper-parameters (FedProx's mu and adaptive_mu,
      FedISGD's lam, an algorithm's --hparam values), defaults filled in.
    report_update_spread: whether the process reports the spread of the
      client updates.
    aggregator: the model aggregator (`--aggregator`; None: TFF's weighted
      mean).
  """

  name: str
  epochs: int
  batch_size: int
  client_optimizer: optimizers.OptimizerSettings | None
  server_optimizer: optimizers.OptimizerSettings
  client_weighting: str
  straggler_policy: str
  hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  report_update_spread: bool = False
  aggregator: aggregators.AggregatorSettings | None = None


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """One algorithm's entry.

  Attributes:
    name: its `--algo` value.
    label: its name in tables and plot legends.
    summary: one line for `--help`.
    paper: where it is defined (paper, algorithm or equation).
    build: `build(model_fn, settings, client_input)` -> a
      `tff.learning.templates.LearningProcess`, given its
      `AlgorithmSettings` and a `tff_algos.learning` client input
      (simulation or production).
    uses: the ALGORITHM_FIELDS it reads; giving it another one is an error.
    defaults: its values for those when a run does not give them (a value,
      or a function of the other resolved settings, by name).
    hparams: its own hyper-parameters and their defaults (`--mu`, `--lam`,
      `--adaptive_mu`, else `--hparam NAME=VALUE`).
    fixed: settings or hyper-parameters the algorithm implies (FedSGD:
      E = 1, B = ∞; FedAvg: μ = 0); giving another value is an error.
    hparam_column: the hyper-parameter metrics.csv reports each round
      (`mu`: FedProx's μ, 0 for FedAvg; `lam`: FedISGD's λ).
    describe: its legend entry for a run's `AlgorithmSettings` (default: the
      label and its own hyper-parameters).
    callbacks: `callbacks(settings)` → the round callbacks of a run
      (`callbacks.RoundCallback`: e.g. FedProx's adaptive μ), or None.
    metrics: the columns its process reports, name → what it holds (found
      by name in a round's metrics, e.g. metrics['client_work'][name]);
      its callbacks declare theirs. They reach metrics.csv, TensorBoard,
      summary.json (their final values) and plots.
    client_optimizer: whether its clients run an optimizer (a
      `--client_optimizer`); FedSGD's compute a gradient.
    server_lr_schedule: the server learning rate's default schedule
      (`algorithms.optimizers`; FedISGD's η_g decays in steps).
    pooled: it trains on all clients' training data pooled as one (a
      centralized baseline): one "client", each round a block of
      `hparams['updates_per_round']` minibatch steps, no sampling.
  """

  name: str
  label: str
  summary: str
  paper: str
  build: Callable[..., Any]
  uses: tuple[str, ...]
  defaults: Mapping[str, Any]
  hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  hparam_column: str = 'mu'
  describe: Callable[[AlgorithmSettings], str] | None = None
  callbacks: (
    Callable[[AlgorithmSettings], Sequence[callbacks_lib.RoundCallback]] | None
  ) = None
  metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
  client_optimizer: bool = True
  server_lr_schedule: str = 'constant'
  pooled: bool = False

  def __post_init__(self):
    unknown = set(self.uses) - set(ALGORITHM_FIELDS)
    if unknown:
      raise ValueError(
        f'{self.name}: {sorted(unknown)} are not settings an '
        f'algorithm can use ({", ".join(ALGORITHM_FIELDS)}); '
        'declare its own in hparams'
      )
    if set(self.uses) & set(self.fixed) or set(self.hparams) & set(self.fixed):
      raise ValueError(f'{self.name}: a setting is either used or fixed')
    if self.pooled and 'updates_per_round' not in self.hparams:
      raise ValueError(
        f'{self.name}: a pooled algorithm needs the '
        'hyper-parameter updates_per_round'
      )
    missing = set(self.uses) - set(self.defaults)
    if missing:
      raise ValueError(f'{self.name}: no default for {sorted(missing)}')
    bad = [m for m in (*self.metrics, *self.hparams) if not m.isidentifier()]
    if bad:
      raise ValueError(
        f'{self.name}: metric and hyper-parameter names must '
        f'be identifiers (letters, digits, _), got {bad}'
      )

  def legend(self, settings: AlgorithmSettings) -> str:
    """The line's name in a plot: label and hyper-parameters that vary."""
    if self.describe is not None:
      return self.describe(settings)
    extras = ' '.join(f'{k}={v:g}' for k, v in settings.hparams.items())
    return f'{self.label} {extras}'.strip()

  def round_callbacks(self, settings: AlgorithmSettings):
    """Its round callbacks for a run of `settings`."""
    return list(self.callbacks(settings)) if self.callbacks else []


_ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
  """Adds (or, under the same name, replaces) an algorithm; returns it."""
  _ALGORITHMS[algorithm.name] = algorithm
  return algorithm


def unregister(name: str) -> None:
  _ALGORITHMS.pop(name, None)


def get(name: str) -> Algorithm:
  """The algorithm `name`; ValueError naming the known ones otherwise."""
  if name not in _ALGORITHMS:
    raise ValueError(
      f'unknown algorithm {name!r}; choose from {", ".join(_ALGORITHMS)}'
    )
  return _ALGORITHMS[name]


def names() -> tuple[str, ...]:
  return tuple(_ALGORITHMS)
