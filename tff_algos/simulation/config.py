"""A run's settings: flat as the flags give them and config.json records
them (`Config`), and, resolved once, in the typed groups every layer takes
(`Settings`). Imports no TensorFlow.

`Config` holds the flags' values; a flag not given is None there ("the
algorithm's default"), and its `hparams` hold the algorithm's own
hyper-parameters that were given (`registry.HyperParameter`).
`resolve(config)`, called once where a run starts, checks them and fills
in the algorithm's defaults, giving the frozen `Settings` of the run:
its algorithm's settings (`registry.AlgorithmSettings`, with nested
optimizer settings), and the run's `RunSettings`, `SamplingSettings`,
`MeasurementSettings` and DP settings (`privacy.flags.DpSettings`).
config.json records `Settings.to_json()`, flat as the flags are
(`--client_beta2` is "client_beta2", `--mu` is "mu"), with every default
filled in and None for the settings the algorithm does not use, so that
two runs of the same settings have the same config.json however their
flags were written.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from tasks import partitions
from tasks.validate import FLOAT32_MAX  # Rates and weights run in float32.
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.privacy import flags as dp_flags
from tff_algos.simulation.sampling import SamplingScheme
from tff_algos.simulation.sampling import StragglerPolicy

MAX_SEED = 2**32 - 1  # numpy's seeds are unsigned 32-bit.
# The last round a process state can count: the server optimizer's round
# counters are int32 (TFF's schedule_learning_rate and our schedules cast
# the round to int32; TFF's Adam, Yogi and AdamW count steps from a Python
# 0, i.e. int32) and would wrap silently past it. The rest holds more:
# sampling seeds are numpy's (any int), TensorBoard steps and the DP noise
# counter int64, checkpoint names and metrics.csv text.
MAX_ROUNDS = 2**31 - 1
CLIENT_EXECUTIONS = ('auto', 'compiled', 'lockstep', 'per_client')
_OPTIMIZER_FLAGS = optimizers.flag_names('client') + optimizers.flag_names(
  'server'
)


def _of_type(value, hint) -> bool:
  """Whether a JSON value fits a field's annotation (int, float, str, bool,
  their `| None`, dict[str, float], tuple[str, ...])."""
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if origin in (types.UnionType, typing.Union):
    return any(_of_type(value, a) for a in args)
  if hint is type(None):
    return value is None
  if hint is bool:
    return isinstance(value, bool)
  if hint is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if hint is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if hint is str:
    return isinstance(value, str)
  if origin is dict:
    return isinstance(value, dict) and all(
      isinstance(k, str) and _of_type(v, args[1]) for k, v in value.items()
    )
  if origin is tuple:
    return isinstance(value, (list, tuple)) and all(
      _of_type(v, args[0]) for v in value
    )
  return True


class ConfigError(ValueError):
  """An invalid combination of settings (reported as a usage error)."""


@dataclasses.dataclass(frozen=True)
class Config:
  """What a run's flags say; None: the algorithm's default.

  The settings of `registry.ALGORITHM_FIELDS`, the hyper-parameters
  (`hparams`: the algorithm's own, by name) and the optimizers' are the
  algorithm's; `resolve` fills them in.
  """

  algo: str = registry.DEFAULT
  task: str = 'synthetic_1_1'  # a name for tasks.load_task, or any
  # name when the caller passes the task
  rounds: int = 200
  clients_per_round: int | None = 10  # None: from --client_fraction, set
  # once the task's clients are known
  straggler_fraction: float = 0.0
  # The algorithm's settings.
  epochs: int | None = None
  batch_size: int | None = None  # -1: the whole local dataset (B = ∞)
  client_lr: float | None = None
  server_lr: float | None = None  # FedSGD's η; FedISGD's η_gi
  straggler_policy: str | None = None  # 'drop' or 'partial'
  client_weighting: str | None = None  # 'num_examples' or 'uniform'
  hparams: dict[str, float | bool] = dataclasses.field(default_factory=dict)
  # Optimizers (algorithms.optimizers; None: plain SGD at a constant rate,
  # and the parameters of the optimizer chosen).
  client_optimizer: str | None = None
  client_momentum: float | None = None
  client_beta1: float | None = None
  client_beta2: float | None = None
  client_epsilon: float | None = None
  client_lr_schedule: str | None = None
  client_lr_decay: float | None = None
  client_lr_decay_every: int | None = None
  server_optimizer: str | None = None
  server_momentum: float | None = None
  server_beta1: float | None = None
  server_beta2: float | None = None
  server_epsilon: float | None = None
  server_lr_schedule: str | None = None  # FedISGD's default: step
  server_lr_decay: float | None = None
  server_lr_decay_every: int | None = None
  # Client sampling, aggregation and privacy.
  client_sampling: str = 'uniform'  # uniform, poisson or proportional
  aggregator: str = 'mean'  # algorithms.aggregators.KINDS
  dp_noise_multiplier: float | None = None  # z (--aggregator=dp)
  dp_clip: float | None = None  # C; None: adaptive clipping
  dp_target_quantile: float | None = None  # adaptive clipping's (0.5)
  dp_noise_cohort: int | None = None  # M >= K: noise as for M clients
  dp_initial_clip: float | None = None  # adaptive clipping's first clip
  dp_noise_seed: int | None = None  # the noise's seed (default: --seed)
  dp_delta: float | None = None  # δ of the ε reported; default 0.1/N
  dp_accountant: str | None = None  # rdp (default) or pld
  dp_adjacency: str | None = None  # set by resolve: the ε's relation
  # Measurements.
  update_spread: bool = False  # (1/K)Σ‖u_k − ū‖² for any algorithm
  dissimilarity_every: int = 0
  eval_every: int = 1
  eval_clients: int | None = None  # None: the training metrics over all
  # clients; N: over a fixed seeded subset
  stop_at_accuracy: float | None = None  # Stop once test accuracy reaches it
  # Randomness and data.
  seed: int = 0
  data_seed: int = 0
  data_dir: str | None = None
  train_fraction: float | None = None  # None: the task's own split
  partition: str | None = None  # e.g. 'dirichlet:0.5' (None: the task's)
  imports: tuple[str, ...] = ()  # modules registering the task/algorithm
  # How the clients' local training runs: 'compiled' (one after another
  # in an XLA-compiled loop in this process, `simulation.compiled`),
  # 'lockstep' (many clients at once in this process), where the run
  # allows it; 'per_client' (a TFF call each, its data sent) or 'auto'
  # (the fastest that the run allows, `lockstep.executions`); unless
  # 'per_client', a client trained per client reads its data where it
  # trains (`simulation.client_store`).
  client_execution: str = 'auto'

  @classmethod
  def from_json(cls, values: dict[str, Any]) -> Config:
    """A Config from config.json (settings it lacks take their defaults;
    its record of the code, `provenance`, is not a setting); ConfigError
    for settings this version does not know or values of the wrong type
    (checked against the fields' annotations, in one place)."""
    if not isinstance(values, dict):
      raise ConfigError(
        f'expected an object of settings, got {type(values).__name__}'
      )
    values = {k: v for k, v in values.items() if k != 'provenance'}
    # Runs recorded before lockstep clients existed trained one by one.
    values.setdefault('client_execution', 'per_client')
    return cls.create(**values)

  @classmethod
  def create(cls, **values) -> Config:
    """A Config of flat settings, as config.json and the flags hold them:
    the algorithm's hyper-parameters by name (`mu=0.5`), the others by
    field. ConfigError for a name that is neither, or a value of the
    wrong type (checked against the fields' annotations, in one place)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    hparams = dict(values.pop('hparams', None) or {})
    declared = _declared(values.get('algo', cls.algo))
    for name in [k for k in values if k not in fields]:
      value = values.pop(name)
      if declared is not None:
        name = declared.get(name, name)
        if name not in declared.values() and value is not None:
          raise ConfigError(f'unknown settings {[name]}')
      if value is not None:  # None: older files' flag of another algorithm.
        hparams[name] = value
    values['hparams'] = hparams
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
      if not _of_type(value, hints[name]):
        raise ConfigError(f'{name} = {value!r} is not a {hints[name]}')
    if 'imports' in values:
      values = dict(values, imports=tuple(values['imports']))
    return cls(**values)


def _declared(algo) -> dict[str, str] | None:
  """The hyper-parameters of the algorithm `algo` by every name they have
  had (`HyperParameter.formerly`) → their names; None when `algo` is not
  registered (`resolve` reports that)."""
  try:
    entry = registry.get(algo)
  except ValueError:
    return None
  names = {h.name: h.name for h in entry.hparams}
  names.update({h.formerly: h.name for h in entry.hparams if h.formerly})
  return names


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """What the run is: its task and data, rounds, seeds, the modules it
  imports and how its clients' local training executes (see `Config`)."""

  task: str
  rounds: int
  seed: int
  data_seed: int
  data_dir: str | None
  train_fraction: float | None
  partition: str | None
  imports: tuple[str, ...]
  client_execution: str


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
  """Which clients take part in a round: K of them (`clients_per_round`),
  drawn by `scheme` (`sampling.SamplingScheme`), `straggler_fraction` of
  them stragglers (what a straggler does is the algorithm's
  `straggler_policy`)."""

  clients_per_round: int
  scheme: str
  straggler_fraction: float


@dataclasses.dataclass(frozen=True)
class MeasurementSettings:
  """What is measured besides training (see `Config`)."""

  update_spread: bool
  dissimilarity_every: int
  eval_every: int
  eval_clients: int | None
  stop_at_accuracy: float | None


@dataclasses.dataclass(frozen=True)
class Settings:
  """A run's settings, resolved once (`resolve`), in groups, as every
  layer takes them: `algorithm` (what its builder and callbacks take),
  `run`, `sampling`, `measurement` and `privacy` (None without
  --aggregator=dp). `record` is the same settings flat, as config.json
  records them (`to_json`); nothing else reads it."""

  algorithm: registry.AlgorithmSettings
  run: RunSettings
  sampling: SamplingSettings
  measurement: MeasurementSettings
  privacy: dp_flags.DpSettings | None
  record: Config = dataclasses.field(repr=False)

  @property
  def algo(self) -> str:
    return self.algorithm.name

  @property
  def entry(self) -> registry.Algorithm:
    """The algorithm's registry entry."""
    return registry.get(self.algorithm.name)

  @property
  def policy(self) -> StragglerPolicy:
    return StragglerPolicy(self.algorithm.straggler_policy)

  @property
  def aggregation(self) -> str:
    """The model aggregator's kind (`aggregators.KINDS`)."""
    aggregator = self.algorithm.aggregator
    return 'mean' if aggregator is None else aggregator.kind

  @property
  def hparam_columns(self) -> dict[str, float]:
    """The hyper-parameters metrics.csv reports each round (name → the
    run's value), in the order the algorithm declares them."""
    return {
      name: float(self.algorithm.hparams[name]) for name in self.entry.columns
    }

  def to_json(self) -> dict[str, Any]:
    """The settings as config.json holds them: flat, the hyper-parameters
    by name where the field `hparams` is, defaults filled in."""
    values = {}
    for name, value in dataclasses.asdict(self.record).items():
      if name == 'hparams':
        values.update(value)
      else:
        values[name] = value
    return json.loads(json.dumps(values))


def _algorithm_values(config: Config, algorithm: registry.Algorithm) -> dict:
  """The ALGORITHM_FIELDS of `config` resolved for `algorithm` (None for
  those it has not); ConfigError for a value given for a setting it does
  not have, or other than one it fixes."""
  given = dataclasses.asdict(config)
  owned = ', '.join((*algorithm.uses, *(h.name for h in algorithm.hparams)))
  for name in registry.ALGORITHM_FIELDS:
    value = given[name]
    if value is None:
      continue
    if name in algorithm.fixed and value != algorithm.fixed[name]:
      raise ConfigError(
        f'--{name}={value}: {algorithm.name} has {name}='
        f'{algorithm.fixed[name]} ({algorithm.paper})'
      )
    if name not in (*algorithm.fixed, *algorithm.uses):
      raise ConfigError(
        f'--{name} is not a {algorithm.name} hyper-parameter (it has {owned})'
      )
  values = {}
  for name in registry.ALGORITHM_FIELDS:
    if name in algorithm.fixed:
      values[name] = algorithm.fixed[name]
    elif name in algorithm.uses:
      values[name] = (
        given[name] if given[name] is not None else algorithm.defaults[name]
      )
    else:
      values[name] = None
  for name, value in list(values.items()):
    if callable(value):  # A default derived from other settings.
      values[name] = value(values)
  return values


def _hyperparameters(config: Config, algorithm: registry.Algorithm) -> dict:
  """The algorithm's own hyper-parameters of `config`, checked by their
  declarations, defaults filled in; ConfigError for one it has not, or a
  value its declaration refuses."""
  owned = ', '.join((*algorithm.uses, *(h.name for h in algorithm.hparams)))
  resolved = {}
  for name, value in config.hparams.items():
    declared = algorithm.hyperparameter(name)
    if declared is None:
      raise ConfigError(
        f'--{name} is not a {algorithm.name} hyper-parameter (it has '
        f'{owned or "none"})'
      )
    error = declared.error(value)
    if error is not None:
      raise ConfigError(error)
    if declared.fixed and value != declared.default:
      raise ConfigError(
        f'--{name}={value:g}: {algorithm.name} has {name}='
        f'{declared.default:g} ({algorithm.paper})'
      )
  for declared in algorithm.hparams:
    resolved[declared.name] = declared.value(
      config.hparams.get(declared.name, declared.default)
    )
  return resolved


def _optimizers(config, algorithm, values):
  """(client, server) `OptimizerSettings` of `config` for `algorithm`
  (`_optimizer`); ConfigError for a flag of an optimizer it does not take,
  or settings that do not fit together."""
  given = dataclasses.asdict(config)
  try:
    return tuple(
      _optimizer(given, algorithm, role, values[f'{role}_lr'])
      for role in ('client', 'server')
    )
  except optimizers.SettingsError as e:
    raise ConfigError(str(e)) from None


def _optimizer(given, algorithm, role, rate):
  """`role`'s optimizer: the run's flags' where `algorithm` declares it
  (`registry.OPTIMIZER_FIELDS`), at the given rate, else its preset's,
  else `rate` (the algorithm's); else plain SGD at `rate` and a constant
  schedule, which its flags may only repeat (config.json written before
  records it), or None where the algorithm has no such optimizer."""
  if algorithm.takes_optimizer(role):
    schedule = algorithm.server_lr_schedule if role == 'server' else 'constant'
    return optimizers.resolve(given, role, rate, schedule)
  absent = rate is None or (role == 'client' and not algorithm.client_optimizer)
  plain = None if absent else optimizers.OptimizerSettings('sgd', rate)
  runs = optimizers.flags_of(plain, role)
  for name in optimizers.flag_names(role):
    if given[name] is not None and given[name] != runs[name]:
      raise optimizers.SettingsError(_not_taken(algorithm, name, role))
  return plain


def _not_taken(algorithm, flag, role) -> str:
  """The error for `--flag` of a `role` optimizer `algorithm` does not
  declare: what it has instead."""
  why = (
    'its clients run no optimizer'
    if role == 'client' and not algorithm.client_optimizer
    else f'its {role} optimizer is its own'
  )
  owned = ', '.join((*algorithm.uses, *(h.name for h in algorithm.hparams)))
  return (
    f'--{flag} is not a {algorithm.name} hyper-parameter: {why} (it has '
    f'{owned or "none"})'
  )


def resolve(config: Config, num_clients: int | None = None) -> Settings:
  """The run's `Settings`: `config` checked, the algorithm's defaults filled
  in. ConfigError for values no run can use (before anything runs); with
  `num_clients` (the task's N), also for K or --eval_clients above N. The
  run settings the algorithm fixes (`registry.RUN_FIELDS`) take its values."""
  try:
    algorithm = registry.get(config.algo)
  except ValueError as e:
    raise ConfigError(f'--algo: {e}') from None
  config = _run_values(config, algorithm)
  values = _algorithm_values(config, algorithm)
  hparams = _hyperparameters(config, algorithm)
  privacy = _privacy(config, num_clients)
  if config.client_sampling == 'proportional' and (
    config.client_weighting is None and 'client_weighting' in algorithm.uses
  ):
    values['client_weighting'] = 'uniform'  # FedProx App. C.3.4's scheme.
  if config.aggregator == 'dp':
    if config.client_weighting not in (None, 'uniform'):
      raise ConfigError(
        f'--client_weighting={config.client_weighting}: '
        '--aggregator=dp takes an unweighted mean (the '
        "clients' weights would leak what DP hides)"
      )
    if 'client_weighting' in algorithm.uses:
      values['client_weighting'] = 'uniform'
  _check(dataclasses.replace(config, **values), num_clients)
  client, server = _optimizers(config, algorithm, values)
  flags = dict(
    values,
    **optimizers.flags_of(client, 'client'),
    **optimizers.flags_of(server, 'server'),
  )
  if values['server_lr'] is not None:  # A preset's rate when none given.
    flags['server_lr'] = server.learning_rate
  resolved = dataclasses.replace(
    config,
    hparams=hparams,
    **flags,
    **privacy,
  )
  return Settings(
    algorithm=registry.AlgorithmSettings(
      name=algorithm.name,
      epochs=values['epochs'],
      batch_size=values['batch_size'],
      client_optimizer=client,
      server_optimizer=server,
      client_weighting=values['client_weighting'],
      straggler_policy=values['straggler_policy'],
      hparams=hparams,
      report_update_spread=config.update_spread,
      aggregator=_aggregator(resolved),
    ),
    run=RunSettings(
      task=config.task,
      rounds=config.rounds,
      seed=config.seed,
      data_seed=config.data_seed,
      data_dir=config.data_dir,
      train_fraction=config.train_fraction,
      partition=config.partition,
      imports=tuple(config.imports),
      client_execution=config.client_execution,
    ),
    sampling=SamplingSettings(
      clients_per_round=config.clients_per_round,
      scheme=config.client_sampling,
      straggler_fraction=config.straggler_fraction,
    ),
    measurement=MeasurementSettings(
      update_spread=config.update_spread,
      dissimilarity_every=config.dissimilarity_every,
      eval_every=config.eval_every,
      eval_clients=config.eval_clients,
      stop_at_accuracy=config.stop_at_accuracy,
    ),
    privacy=dp_flags.DpSettings.of(privacy),
    record=resolved,
  )


# The flags' defaults: a run setting an algorithm fixes may be left at it.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}


def _run_values(c: Config, algorithm: registry.Algorithm) -> Config:
  """`c` with the run settings `algorithm` fixes; ConfigError for one given
  another value than its flag's default."""
  fixed = {n: v for n, v in algorithm.fixed.items() if n in registry.RUN_FIELDS}
  for name, value in fixed.items():
    given = getattr(c, name)
    if given not in (value, _DEFAULTS[name]):
      flag = f'{name}={given}' if given is not None else 'client_fraction'
      raise ConfigError(
        f'--{flag}: {algorithm.name} has {name}={value} ({algorithm.paper})'
      )
  return dataclasses.replace(c, **fixed)


SAMPLING = tuple(scheme.value for scheme in SamplingScheme)


def _privacy(c: Config, num_clients) -> dict:
  """The DP flags resolved (`privacy.flags.resolve`: δ 0.1/N by default,
  RDP, adaptive clipping at the median unless --dp_clip, the adjacency ε
  is under); ConfigError for values no run can use."""
  if c.aggregator not in aggregators.KINDS:
    raise ConfigError(
      f'--aggregator must be one of '
      f'{", ".join(aggregators.KINDS)}, got {c.aggregator!r}'
    )
  if c.client_sampling not in SAMPLING:
    raise ConfigError(
      f'--client_sampling must be one of '
      f'{", ".join(SAMPLING)}, got {c.client_sampling!r}'
    )
  try:
    return dp_flags.resolve(vars(c), num_clients, max_seed=MAX_SEED)
  except ValueError as e:
    raise ConfigError(str(e)) from None


def _aggregator(c: Config):
  """The model aggregator of the resolved flags `c` (None: the mean)."""
  if c.aggregator == 'mean':
    return None
  return aggregators.AggregatorSettings(
    kind=c.aggregator,
    clients_per_round=c.clients_per_round or 1,
    seed=c.seed if c.dp_noise_seed is None else c.dp_noise_seed,
    noise_multiplier=c.dp_noise_multiplier,
    clip=c.dp_clip,
    target_quantile=c.dp_target_quantile,
    noise_cohort=c.dp_noise_cohort,
    initial_clip=c.dp_initial_clip,
  )


def _check(c: Config, num_clients):
  """ConfigError for the first value of the resolved flags `c` that no run
  can use."""
  try:
    partitions.parse(c.partition)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  k = c.clients_per_round
  checks = [
    (
      num_clients is None or k is None or k <= num_clients,
      f'--clients_per_round={k} is more than the {num_clients} clients '
      f'of {c.task}'
      + (
        ' (--client_sampling=poisson: q = K/N must be at most 1)'
        if c.client_sampling == 'poisson'
        else ''
      ),
    ),
    (
      1 <= c.rounds <= MAX_ROUNDS,
      f'--rounds must be in 1..{MAX_ROUNDS}, got {c.rounds}',
    ),
    (k is None or k >= 1, f'--clients_per_round must be >= 1, got {k}'),
    (
      c.epochs is None or c.epochs >= 1,
      f'--epochs must be >= 1, got {c.epochs}',
    ),
    (
      c.batch_size is None or c.batch_size == -1 or c.batch_size >= 1,
      f'--batch_size must be >= 1 or -1 (B = ∞), got {c.batch_size}',
    ),
    (
      c.client_lr is None or 0 < c.client_lr < FLOAT32_MAX,
      f"--client_lr must be a positive number (below 3.4e38, float32's "
      f'largest), got {c.client_lr}',
    ),
    (
      c.server_lr is None or 0 < c.server_lr < FLOAT32_MAX,
      f"--server_lr must be a positive number (below 3.4e38, float32's "
      f'largest), got {c.server_lr}',
    ),
    (
      0 <= c.straggler_fraction <= 1,
      f'--straggler_fraction must be in [0, 1], got {c.straggler_fraction}',
    ),
    (
      c.straggler_policy in (None, 'drop', 'partial'),
      f'--straggler_policy must be drop or partial, got {c.straggler_policy!r}',
    ),
    (
      c.client_weighting in (None, 'uniform', 'num_examples'),
      f'--client_weighting must be uniform or num_examples, got '
      f'{c.client_weighting!r}',
    ),
    (c.eval_every >= 1, '--eval_every must be >= 1'),
    (
      c.eval_clients is None or c.eval_clients >= 1,
      f'--eval_clients must be >= 1, got {c.eval_clients}',
    ),
    (
      c.eval_clients is None
      or num_clients is None
      or c.eval_clients <= num_clients,
      f'--eval_clients={c.eval_clients} is more than the {num_clients} '
      f'clients of {c.task}',
    ),
    (
      c.train_fraction is None or 0 < c.train_fraction < 1,
      f'--train_fraction must be in (0, 1), got {c.train_fraction}',
    ),
    (c.dissimilarity_every >= 0, '--dissimilarity_every must be >= 0'),
    (
      c.stop_at_accuracy is None or 0 < c.stop_at_accuracy <= 1,
      f'--stop_at_target needs a --target_accuracy in (0, 1], got '
      f'{c.stop_at_accuracy}',
    ),
    (0 <= c.seed <= MAX_SEED, f'--seed must be in 0..{MAX_SEED}, got {c.seed}'),
    (
      0 <= c.data_seed <= MAX_SEED,
      f'--data_seed must be in 0..{MAX_SEED}, got {c.data_seed}',
    ),
    (
      c.client_execution in CLIENT_EXECUTIONS,
      f'--client_execution must be one of {", ".join(CLIENT_EXECUTIONS)}, '
      f'got {c.client_execution!r}',
    ),
  ]
  for ok, message in checks:
    if not ok:
      raise ConfigError(message)
