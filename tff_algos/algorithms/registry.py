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

from tasks.validate import FLOAT32_MAX  # Rates and weights run in float32.
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

# The optimizers an algorithm may declare in `uses`: their flags
# (`optimizers.flag_names`: --client_optimizer, --client_momentum, ...,
# the learning-rate schedule) reach its builder, at the rate of
# --client_lr / --server_lr, which it then uses too. An optimizer it does
# not declare is plain SGD at that rate and a constant schedule (a builder
# that makes its own reads the rate there), and a flag giving it another
# value is an error: a flag is applied or refused.
OPTIMIZER_FIELDS = ('client_optimizer', 'server_optimizer')

# Run settings an algorithm may also fix (`Algorithm.fixed`): a run that
# gives another value than the flag's default is refused (the centralized
# baseline trains one client, with no sampling scheme, stragglers or
# aggregator).
RUN_FIELDS = (
  'clients_per_round',
  'straggler_fraction',
  'client_sampling',
  'aggregator',
)

# The algorithm of a run that names none: the default run is FedProx on
# Synthetic(1,1) (Li et al. 2020, §5.2).
DEFAULT = 'fedprox'

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
class HyperParameter:
  """A hyper-parameter of an algorithm's own. Its flag (`--NAME`), parse-time
  check, `--sweep`, config.json entry, header entry and (with `column`) its
  metrics.csv column and plot label all come from this declaration.

  Attributes:
    name: the flag and config.json key (an identifier).
    default: its value when a run does not give one; its type (bool, int
      or float) is the flag's.
    help: the flag's help.
    minimum: the least value a number may take (ints and floats; below
      float32's largest either way).
    column: what its metrics.csv column holds, or None for no column. The
      column holds the value each round used (a callback may change it
      between rounds, e.g. adaptive μ).
    symbol: its name in the run's header and plot legends (default: name).
    fixed: the algorithm implies `default` (FedAvg: μ = 0); another value
      is an error.
    simulation_only: a callback of the simulation acts on it between
      rounds; a production build has no such setting.
    formerly: the name older config.json and metrics.csv files give it.
  """

  name: str
  default: bool | int | float
  help: str = ''
  minimum: float | None = None
  column: str | None = None
  symbol: str = ''
  fixed: bool = False
  simulation_only: bool = False
  formerly: str | None = None

  @property
  def kind(self) -> type:
    """bool, int or float: the type its values take."""
    return (
      type(self.default) if isinstance(self.default, (bool, int)) else float
    )

  def fixed_at(self, value) -> HyperParameter:
    """This hyper-parameter held at `value` by an algorithm."""
    return dataclasses.replace(self, default=value, fixed=True)

  def error(self, value) -> str | None:
    """Why `value` is not one this hyper-parameter takes, or None."""
    if self.kind is bool:
      if isinstance(value, bool):
        return None
      return f'--{self.name} must be true or false, got {value!r}'
    what = 'a whole number' if self.kind is int else 'a number'
    if self.minimum is not None:
      what += f' >= {self.minimum:g}'
    ok = (
      isinstance(value, (int, float))
      and not isinstance(value, bool)
      and abs(value) < FLOAT32_MAX
      and (self.kind is not int or value == int(value))
      and (self.minimum is None or value >= self.minimum)
    )
    if ok:
      return None
    return (
      f"--{self.name} must be {what} (below 3.4e38, float32's largest), "
      f'got {value}'
    )

  def value(self, given):
    """`given` (a valid value) as this hyper-parameter's type."""
    return self.kind(given)

  def describe(self, value) -> str:
    """Its header entry: `symbol=value` (a switch: its symbol when on)."""
    if self.kind is bool:
      return self.symbol or self.name
    text = f'{value:g}' if isinstance(value, float) else str(value)
    return f'{self.symbol or self.name}={text}'


@dataclasses.dataclass(frozen=True)
class AlgorithmSettings:
  """An algorithm's settings in a run, resolved: what its builder and its
  callbacks take.

  Attributes:
    name: the algorithm (its `--algo`).
    epochs: local epochs E.
    batch_size: local minibatch size B (-1: the whole local dataset).
    client_optimizer: the clients' optimizer: the run's flags' where the
      algorithm uses 'client_optimizer', else plain SGD at --client_lr (a
      builder that makes its own reads its rate here); None where its
      clients run none (FedSGD's compute one gradient) or it has no
      client_lr.
    server_optimizer: the server's optimizer on the mean update, alike
      ('server_optimizer', --server_lr).
    client_weighting: 'num_examples' (n_k) or 'uniform' (1/K).
    straggler_policy: 'drop' or 'partial'.
    hparams: its own hyper-parameters by name (FedProx's mu and
      adaptive_mu, FedISGD's lam), defaults filled in.
    report_update_spread: whether the process reports the spread of the
      client updates.
    aggregator: the model aggregator (`--aggregator`; None: TFF's weighted
      mean).
  """

  name: str
  epochs: int
  batch_size: int
  client_optimizer: optimizers.OptimizerSettings | None
  server_optimizer: optimizers.OptimizerSettings | None
  client_weighting: str
  straggler_policy: str
  hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  report_update_spread: bool = False
  aggregator: aggregators.AggregatorSettings | None = None


class ClientPlan:
  """Which clients a run of an algorithm trains, and how long a round is:
  the task's clients as they are, K of them a round, E epochs each. An
  algorithm that trains on them otherwise gives its own subclass as
  `Algorithm.clients` (the centralized baseline pools them into one).
  Imports no TensorFlow; the arrays are numpy's."""

  def header(
    self, num_clients: int, clients_per_round: int, settings: AlgorithmSettings
  ) -> list[str]:
    """The run header's words for the clients and their local training."""
    return [
      f'{num_clients} clients, K={clients_per_round}',
      f'E={settings.epochs}, B={settings.batch_size}',
    ]

  def training(
    self, ids: Sequence[str], arrays: Sequence[Mapping[str, Any]]
  ) -> tuple[list[str], list[Mapping[str, Any]]]:
    """The ids and training arrays (by index) of the clients a run trains,
    from the task's."""
    return list(ids), list(arrays)

  def steps_per_round(self, hparams: Mapping[str, Any]) -> int | None:
    """The minibatch steps of a round (fresh permutations of a client's
    data), or None: E epochs."""
    del hparams
    return None


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
    uses: the ALGORITHM_FIELDS it reads, and the OPTIMIZER_FIELDS whose
      flags its builder applies (`core.arguments` builds the run's
      optimizers); giving it another one is an error. An optimizer it does
      not list is plain SGD at a constant rate (`AlgorithmSettings`).
    defaults: its values for its ALGORITHM_FIELDS when a run does not give
      them (a value, or a function of the other resolved settings, by
      name); an optimizer's default is plain SGD.
    hparams: its own hyper-parameters (`HyperParameter`s; a mapping of
      name → default declares numbers with no check or column).
    fixed: ALGORITHM_FIELDS and RUN_FIELDS the algorithm implies (FedSGD:
      E = 1, B = ∞); giving another value is an error. (A hyper-parameter
      it implies is a `HyperParameter.fixed_at`.)
    describe: its legend entry for a run's `AlgorithmSettings` (default: the
      label and its own hyper-parameters).
    callbacks: `callbacks(settings)` → the round callbacks of a run
      (`callbacks.RoundCallback`: e.g. FedProx's adaptive μ), or None.
    metrics: the columns its process reports, name → what it holds (found
      by name in a round's metrics, e.g. metrics['client_work'][name]);
      its callbacks declare theirs. They reach metrics.csv, TensorBoard,
      summary.json (their final values) and plots.
    client_optimizer: whether its clients run an optimizer at all; False
      (FedSGD's compute a gradient, its --client_lr is the server's η):
      `AlgorithmSettings.client_optimizer` is None and every client
      optimizer flag is an error.
    server_lr_schedule: the server learning rate's default schedule
      (`algorithms.optimizers`; FedISGD's η_g decays in steps); another
      than 'constant' needs 'server_optimizer' in `uses`.
    clients: which clients its runs train and how long a round is
      (`ClientPlan`; default: the task's, E epochs a round).
  """

  name: str
  label: str
  summary: str
  paper: str
  build: Callable[..., Any]
  uses: tuple[str, ...]
  defaults: Mapping[str, Any]
  hparams: Sequence[HyperParameter] | Mapping[str, float] = ()
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  describe: Callable[[AlgorithmSettings], str] | None = None
  callbacks: (
    Callable[[AlgorithmSettings], Sequence[callbacks_lib.RoundCallback]] | None
  ) = None
  metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
  client_optimizer: bool = True
  server_lr_schedule: str = 'constant'
  clients: ClientPlan = ClientPlan()

  def __post_init__(self):
    declared = (
      [HyperParameter(k, float(v)) for k, v in self.hparams.items()]
      if isinstance(self.hparams, Mapping)
      else self.hparams
    )
    object.__setattr__(self, 'hparams', tuple(declared))
    names = [h.name for h in self.hparams]
    usable = ALGORITHM_FIELDS + OPTIMIZER_FIELDS
    if len(set(names)) < len(names) or set(names) & set(usable):
      raise ValueError(
        f'{self.name}: hyper-parameter names must be distinct and not '
        f'settings ({", ".join(usable)}), got {names}'
      )
    unknown = set(self.uses) - set(usable)
    if unknown:
      raise ValueError(
        f'{self.name}: {sorted(unknown)} are not settings an '
        f'algorithm can use ({", ".join(usable)}); '
        'declare its own in hparams'
      )
    self._check_optimizers()
    if set(self.uses) & set(self.fixed) or set(self.fixed) - set(
      ALGORITHM_FIELDS + RUN_FIELDS
    ):
      raise ValueError(
        f'{self.name}: fixed holds settings it does not use '
        f'({", ".join(ALGORITHM_FIELDS + RUN_FIELDS)}); a hyper-parameter '
        'is fixed by HyperParameter.fixed_at'
      )
    missing = set(self.uses) - set(self.defaults) - set(OPTIMIZER_FIELDS)
    if missing:
      raise ValueError(f'{self.name}: no default for {sorted(missing)}')
    bad = [m for m in (*self.metrics, *names) if not m.isidentifier()]
    if bad:
      raise ValueError(
        f'{self.name}: metric and hyper-parameter names must '
        f'be identifiers (letters, digits, _), got {bad}'
      )

  def _check_optimizers(self):
    """ValueError for optimizer declarations that contradict each other."""
    for role in ('client', 'server'):
      if self.takes_optimizer(role) and f'{role}_lr' not in self.uses:
        raise ValueError(
          f'{self.name}: uses {role}_optimizer but not {role}_lr, its '
          'learning rate'
        )
    if self.takes_optimizer('client') and not self.client_optimizer:
      raise ValueError(
        f'{self.name}: uses client_optimizer but its clients run none '
        '(client_optimizer=False)'
      )
    if self.server_lr_schedule != 'constant' and not self.takes_optimizer(
      'server'
    ):
      raise ValueError(
        f'{self.name}: a server_lr_schedule of its own needs '
        'server_optimizer in uses'
      )

  def takes_optimizer(self, role: str) -> bool:
    """Whether its builder applies the run's `role` ('client' or 'server')
    optimizer flags (it lists `{role}_optimizer` in `uses`)."""
    return f'{role}_optimizer' in self.uses

  def hyperparameter(self, name: str) -> HyperParameter | None:
    """Its hyper-parameter `name`, or None."""
    return next((h for h in self.hparams if h.name == name), None)

  @property
  def columns(self) -> dict[str, str]:
    """Its hyper-parameters' metrics.csv columns: name → what it holds."""
    return {h.name: h.column for h in self.hparams if h.column is not None}

  def describe_hparams(self, hparams: Mapping[str, Any]) -> list[str]:
    """The header's entries for resolved `hparams`: none for one the
    algorithm fixes or a switch that is off."""
    return [
      h.describe(hparams[h.name])
      for h in self.hparams
      if not h.fixed and hparams.get(h.name) is not False
    ]

  def legend(self, settings: AlgorithmSettings) -> str:
    """The line's name in a plot: label and hyper-parameters that vary."""
    if self.describe is not None:
      return self.describe(settings)
    extras = ' '.join(self.describe_hparams(settings.hparams))
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


def hyperparameters() -> dict[str, list[tuple[str, HyperParameter]]]:
  """Every registered algorithm's hyper-parameters by name: name →
  [(algorithm, its declaration), ...], for the flags they share.
  ValueError when two algorithms give one name different types."""
  found: dict[str, list[tuple[str, HyperParameter]]] = {}
  for algo, entry in _ALGORITHMS.items():
    for h in entry.hparams:
      declared = found.setdefault(h.name, [])
      if declared and declared[0][1].kind is not h.kind:
        raise ValueError(
          f'--{h.name} is a {declared[0][1].kind.__name__} of '
          f'{declared[0][0]} and a {h.kind.__name__} of {algo}: one flag '
          'has one type; rename one'
        )
      declared.append((algo, h))
  return found
