"""A run's settings, each declared once (`SETTINGS`), resolved once into
the typed groups every layer takes (`Settings`). Imports no TensorFlow.

A `Setting` is one run setting: its absl flag (name, type, default, help,
choices, its --help section), its config.json key, its check (a range, or
which aggregator it needs) and the typed group it resolves into. The
groups, one per concern: `run` (task and data, seeds, rounds, runtime),
`sampling` (the clients of a round), `algorithm` (local training and the
server: `registry.AlgorithmSettings`, with the optimizers), `privacy`
(aggregation and DP), `measurement` (evaluation); the outputs and sweeps
(`group=None`) are the command's own, not config.json's. An algorithm's
own hyper-parameters are declared by it (`registry.HyperParameter`).

The declarations are `simulation.declarations`' table. `Config`, made
from them, is a run's flat record: the flags'
values (None: "the algorithm's default") and, resolved, config.json's
content. `resolve(config)` checks it once where a run starts (each
setting's own check in `Setting.error`, those across groups in
`_across`), fills in the algorithm's and DP's defaults and returns the
frozen `Settings`. config.json records `Settings.to_json()`, flat as the
flags are, every default filled in and None for what the algorithm does
not use, so that two runs of the same settings have the same config.json
however their flags were written. `reference()` describes every setting
(what --help and the flag reference show).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
import dataclasses
import json
from typing import Any

from tasks import partitions
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.privacy import budget

# The declarations (what cli.py and tools/reference.py read from here too).
from tff_algos.simulation.declarations import BY_NAME
from tff_algos.simulation.declarations import ConfigError
from tff_algos.simulation.declarations import help_text
from tff_algos.simulation.declarations import RECORDED
from tff_algos.simulation.declarations import Setting
from tff_algos.simulation.declarations import SETTINGS
from tff_algos.simulation.sampling import StragglerPolicy

_OPTIMIZER = {r: optimizers.flag_names(r) for r in ('client', 'server')}


def _hint(setting: Setting):
  hint = tuple[str, ...] if setting.kind is list else setting.kind
  return hint | None if setting.default is None or setting.unset else hint


def _field(setting: Setting):
  default = setting.default
  if setting.kind is list:
    return dataclasses.field(default=tuple(default))
  return dataclasses.field(default=default)


def _from_json(cls, values: dict[str, Any]) -> Config:
  """A Config from config.json (settings it lacks take their defaults;
  its record of the code, `provenance`, is not a setting); ConfigError
  for settings this version does not know or values of the wrong type."""
  if not isinstance(values, dict):
    raise ConfigError(
      f'expected an object of settings, got {type(values).__name__}'
    )
  values = {k: v for k, v in values.items() if k != 'provenance'}
  # Runs recorded before clients trained in this process trained one by
  # one; lockstep lanes are gone, and compiled clients compute what they
  # computed (to float32 rounding).
  values.setdefault('client_execution', 'per_client')
  if values['client_execution'] == 'lockstep':
    values['client_execution'] = 'compiled'

  return cls.create(**values)


def _create(cls, **values) -> Config:
  """A Config of flat settings, as config.json and the flags hold them:
  the algorithm's hyper-parameters by name (`mu=0.5`), the others by
  key. ConfigError for a name that is neither, or a value of the wrong
  type (checked against the settings' declarations)."""
  keys = {s.record_key: s for s in RECORDED}
  hparams = dict(values.pop('hparams', None) or {})
  declared = _declared(values.get('algo', registry.DEFAULT))
  for name in [k for k in values if k not in keys]:
    value = values.pop(name)
    if declared is not None:
      name = declared.get(name, name)
      if name not in declared.values() and value is not None:
        raise ConfigError(f'unknown settings {[name]}')
    if value is not None:  # None: older files' flag of another algorithm.
      hparams[name] = value
  for name, value in values.items():
    if not keys[name].accepts(value):
      raise ConfigError(f'{name} = {value!r} is not a {_hint(keys[name])}')
  for name, value in hparams.items():
    if not isinstance(name, str) or not isinstance(value, (int, float)):
      raise ConfigError(f'hparams = {hparams!r} is not a dict[str, float]')
  if 'imports' in values:
    values['imports'] = tuple(values['imports'])
  return cls(**values, hparams=hparams)


Config = dataclasses.make_dataclass(
  'Config',
  [(s.record_key, _hint(s), _field(s)) for s in RECORDED]
  + [('hparams', dict, dataclasses.field(default_factory=dict))],
  frozen=True,
  namespace={
    '__doc__': "A run's flat settings (`SETTINGS`), config.json's form; "
    "None: the algorithm's default; `hparams`: the algorithm's own.",
    '__module__': __name__,
    'create': classmethod(_create),
    'from_json': classmethod(_from_json),
  },
)


def _group(name: str, doc: str, **namespace):
  """The typed group `name` of `Settings`: its settings' fields."""
  return dataclasses.make_dataclass(
    f'{name.capitalize()}Settings',
    [(s.attr, _hint(s)) for s in RECORDED if s.group == name],
    frozen=True,
    namespace={'__doc__': doc, '__module__': __name__, **namespace},
  )


RunSettings = _group(
  'run', 'The task and data, rounds, seeds, imports and client execution.'
)
SamplingSettings = _group(
  'sampling', 'K clients a round (`scheme`), a fraction of them stragglers.'
)
MeasurementSettings = _group(
  'measurement', 'What is measured besides training.'
)
PrivacySettings = _group(
  'privacy',
  "A DP run's privacy settings (--dp_*), resolved.",
  adaptive_clipping=property(lambda self: self.clip is None),
)


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
class Settings:
  """A run's settings, resolved once (`resolve`), in groups, as every
  layer takes them: `algorithm` (what its builder and callbacks take),
  `run`, `sampling`, `measurement` and `privacy` (None without
  --aggregator=dp). `record` is the same settings flat, as config.json
  records them (`to_json`); nothing else reads it."""

  algorithm: registry.AlgorithmSettings
  run: Any
  sampling: Any
  measurement: Any
  privacy: Any
  record: Any = dataclasses.field(repr=False)

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
    values = dataclasses.asdict(self.record)
    values.update(values.pop('hparams'))
    return json.loads(json.dumps(values))


# ------------------------------------------------------------- the flags
def from_flags(values: Mapping[str, Any], hparams, imports=()) -> Config:
  """The Config of parsed flag values by name (a flag a program does not
  define takes its default); ConfigError for flags that do not go
  together. With --client_fraction, K is None until the task's clients
  are known (`run.RunPlan.settings_for`)."""
  given = {s.name: values.get(s.name, s.default) for s in SETTINGS if s.flag}
  given['import'] = tuple(imports)
  if given['client_fraction'] is not None:
    if given['clients_per_round'] is not None:
      raise ConfigError(
        'give --clients_per_round or --client_fraction, not both'
      )
    _check(BY_NAME['client_fraction'], given['client_fraction'])
  elif given['clients_per_round'] is None:
    given['clients_per_round'] = BY_NAME['clients_per_round'].default
  if given['stop_at_target'] and given['target_accuracy'] is None:
    raise ConfigError('--stop_at_target needs --target_accuracy')
  if given['stop_at_target']:
    given['stop_at_accuracy'] = given['target_accuracy']
  return Config(
    **{s.record_key: given.get(s.name, s.default) for s in RECORDED},
    hparams=hparams,
  )


def _check(setting: Setting, value):
  message = setting.error(value)
  if message is not None:
    raise ConfigError(message)


def check_options(values: Mapping[str, Any]):
  """ConfigError for a command's option (not a run setting) out of range."""
  for name, value in values.items():
    if name in BY_NAME and BY_NAME[name].group is None:
      _check(BY_NAME[name], value)


def _hyperparameter_settings() -> list[Setting]:
  """A flag for each hyper-parameter the registered algorithms declare
  (one per name, shared by the algorithms that declare it): its help is
  the first free declaration's, then which algorithms take it and their
  defaults, and which hold it fixed."""
  found = []
  for name, declared in registry.hyperparameters().items():
    by_value = {}
    for algo, h in declared:
      text = f'{h.default:g}' if h.kind is float else str(h.default)
      by_value.setdefault((h.fixed, text), []).append(algo)
    notes = '; '.join(
      f'{", ".join(algos)}: {"fixed at" if fixed else "default"} {text}'
      for (fixed, text), algos in sorted(by_value.items())
    )
    first = next((h for _, h in declared if not h.fixed), declared[0][1])
    minimum = '' if first.minimum is None else f'>= {first.minimum:g}'
    found.append(
      Setting(
        name,
        first.kind,
        None,
        f'{first.help.rstrip(".")} ({notes}).',
        'algorithm',
        None,
        check=(lambda v, h=first: h.error(v) is None, minimum),
        users=', '.join(algo for algo, h in declared if not h.fixed),
      )
    )
  return found


def flags() -> list[Setting]:
  """Every setting that is a flag, in --help's order, the registered
  algorithms' hyper-parameters before the optimizers' flags. ConfigError
  for a hyper-parameter named as another flag."""
  own = _hyperparameter_settings()
  for setting in own:
    if setting.name in BY_NAME:
      owners = [a for a, _ in registry.hyperparameters()[setting.name]]
      raise ConfigError(
        f'{", ".join(owners)}: the hyper-parameter {setting.name} is named as '
        f'the flag --{setting.name}; rename it'
      )
  ordered = [s for s in SETTINGS if s.flag]
  at = [s.name for s in ordered].index('client_optimizer')
  return ordered[:at] + own + ordered[at:]


def reference() -> Iterator[dict[str, Any]]:
  """Every flag of a run (`flags()`), as --help and the flag reference
  show it: its --help section, `Settings` group (None: not a setting of
  config.json), flag, type, default, help, range or choices, and which
  algorithms (or aggregator) use it ('': every run)."""
  for s in flags():
    yield dict(
      section=s.section,
      group=s.group,
      flag=s.name,
      type=s.kind.__name__,
      default=None if s.unset else s.default,
      help=help_text(s),
      range=s.check and s.check[1],
      choices=s.choices,
      used_by=_users(s),
    )


def _users(s: Setting) -> str:
  """Which algorithms (or aggregator) read `s` ('' for every run)."""
  if s.users or s.needs:
    return s.users or f'--{s.needs[0]}={s.needs[1]}'
  field = next(
    (f'{r}_optimizer' for r in ('client', 'server') if s.name in _OPTIMIZER[r]),
    s.name,
  )
  if field not in registry.ALGORITHM_FIELDS + registry.OPTIMIZER_FIELDS:
    return ''
  return ', '.join(n for n in registry.names() if field in registry.get(n).uses)


# ------------------------------------------------------------ resolving
def resolve(config: Config, num_clients: int | None = None) -> Settings:
  """The run's `Settings`: `config` checked, the algorithm's and DP's
  defaults filled in. ConfigError for values no run can use (before
  anything runs); with `num_clients` (the task's N), also for K,
  --eval_clients or --dp_noise_cohort above N. The run settings the
  algorithm fixes (`registry.RUN_FIELDS`) take its values."""
  try:
    algorithm = registry.get(config.algo)
  except ValueError as e:
    raise ConfigError(f'--algo: {e}') from None
  config = _run_values(config, algorithm)
  values = _algorithm_values(config, algorithm)
  hparams = _hyperparameters(config, algorithm)
  _needs(config)
  checked = dataclasses.replace(config, **values)
  for setting in RECORDED:
    _check(setting, getattr(checked, setting.record_key))
  try:
    partitions.parse(config.partition)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  _across(checked, config.client_weighting, num_clients)
  values.update(_privacy(checked, num_clients))
  if 'client_weighting' in algorithm.uses and (
    config.aggregator == 'dp'
    or (config.client_sampling, config.client_weighting)
    == ('proportional', None)  # FedProx App. C.3.4's scheme.
  ):
    values['client_weighting'] = 'uniform'
  client, server = _optimizers(config, algorithm, values)
  optimizer_values = {
    **optimizers.flags_of(client, 'client'),
    **optimizers.flags_of(server, 'server'),
  }
  if values['server_lr'] is not None:  # A preset's rate when none given.
    values['server_lr'] = server.learning_rate
  record = dataclasses.replace(
    config, hparams=hparams, **values, **optimizer_values
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
      aggregator=_aggregator(record),
    ),
    run=_in_group(RunSettings, 'run', record),
    sampling=_in_group(SamplingSettings, 'sampling', record),
    measurement=_in_group(MeasurementSettings, 'measurement', record),
    privacy=(
      None
      if record.dp_noise_multiplier is None
      else _in_group(PrivacySettings, 'privacy', record)
    ),
    record=record,
  )


def _in_group(cls, group: str, record: Config):
  return cls(
    **{
      s.attr: getattr(record, s.record_key)
      for s in RECORDED
      if s.group == group
    }
  )


def _run_values(c: Config, algorithm: registry.Algorithm) -> Config:
  """`c` with the run settings `algorithm` fixes; ConfigError for one given
  another value than its flag's default."""
  fixed = {n: v for n, v in algorithm.fixed.items() if n in registry.RUN_FIELDS}
  for name, value in fixed.items():
    given = getattr(c, name)
    if given not in (value, BY_NAME[name].default):
      flag = f'{name}={given}' if given is not None else 'client_fraction'
      raise _fixed(algorithm, flag, f'{name}={value}')
  return dataclasses.replace(c, **fixed)


def _fixed(algorithm: registry.Algorithm, flag: str, fixed: str):
  """The error for `--flag`, other than the `fixed` value the algorithm
  has."""
  return ConfigError(
    f'--{flag}: {algorithm.name} has {fixed} ({algorithm.paper})'
  )


def _not_its(algorithm: registry.Algorithm, flag: str, why: str = ''):
  """The error for `--flag`, which `algorithm` has not (`why`: more):
  what it has instead."""
  owned = ', '.join((*algorithm.uses, *(h.name for h in algorithm.hparams)))
  return ConfigError(
    f'--{flag} is not a {algorithm.name} hyper-parameter{why} (it has '
    f'{owned or "none"})'
  )


def _algorithm_values(config: Config, algorithm: registry.Algorithm) -> dict:
  """The ALGORITHM_FIELDS of `config` resolved for `algorithm` (None for
  those it has not); ConfigError for a value given for a setting it does
  not have, or other than one it fixes."""
  values = {}
  for name in registry.ALGORITHM_FIELDS:
    given = getattr(config, name)
    if name in algorithm.fixed:
      values[name] = algorithm.fixed[name]
      if given not in (None, values[name]):
        raise _fixed(algorithm, f'{name}={given}', f'{name}={values[name]}')
    elif name in algorithm.uses:
      values[name] = algorithm.defaults[name] if given is None else given
    elif given is not None:
      raise _not_its(algorithm, name)
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
  for name, value in config.hparams.items():
    declared = algorithm.hyperparameter(name)
    if declared is None:
      raise _not_its(algorithm, name)
    error = declared.error(value)
    if error is not None:
      raise ConfigError(error)
    if declared.fixed and value != declared.default:
      raise _fixed(
        algorithm, f'{name}={value:g}', f'{name}={declared.default:g}'
      )
  return {
    h.name: h.value(config.hparams.get(h.name, h.default))
    for h in algorithm.hparams
  }


def _optimizers(config, algorithm, values):
  """(client, server) `OptimizerSettings` of `config` for `algorithm`:
  the run's flags' where it declares them (`registry.OPTIMIZER_FIELDS`),
  at the given rate, else its preset's, else the algorithm's; else plain
  SGD at that rate and a constant schedule, which its flags may only
  repeat (config.json written before records it), or None where it has
  no such optimizer. ConfigError for a flag of an optimizer it does not
  take, or settings that do not fit together."""
  given = dataclasses.asdict(config)
  found = []
  try:
    for role in ('client', 'server'):
      rate = values[f'{role}_lr']
      if algorithm.takes_optimizer(role):
        schedule = (
          'constant' if role == 'client' else algorithm.server_lr_schedule
        )
        found.append(optimizers.resolve(given, role, rate, schedule))
        continue
      absent = rate is None or (
        role == 'client' and not algorithm.client_optimizer
      )
      plain = None if absent else optimizers.OptimizerSettings('sgd', rate)
      runs = optimizers.flags_of(plain, role)
      for name in _OPTIMIZER[role]:
        if given[name] is not None and given[name] != runs[name]:
          raise _not_taken(algorithm, name, role)
      found.append(plain)
  except optimizers.SettingsError as e:
    raise ConfigError(str(e)) from None
  return found


def _not_taken(algorithm, flag, role):
  """The error for `--flag` of a `role` optimizer `algorithm` does not
  declare."""
  if role == 'client' and not algorithm.client_optimizer:
    return _not_its(algorithm, flag, ': its clients run no optimizer')
  return _not_its(algorithm, flag, f': its {role} optimizer is its own')


def _needs(c: Config):
  """ConfigError for a setting given without the one it needs (a --dp_*
  flag without --aggregator=dp), or DP without its noise."""
  for s in RECORDED:
    value = getattr(c, s.record_key)
    if s.needs and value is not None and getattr(c, s.needs[0]) != s.needs[1]:
      raise ConfigError(f'--{s.name} needs --{s.needs[0]}={s.needs[1]}')
  if c.aggregator == 'dp' and c.dp_noise_multiplier is None:
    raise ConfigError('--aggregator=dp needs --dp_noise_multiplier (z >= 0)')


def _across(c: Config, weighting, num_clients):
  """ConfigError for the first of the checks across groups that `c` (its
  settings checked one by one) fails; `weighting`: the given
  --client_weighting."""
  k, m, z = c.clients_per_round, c.dp_noise_cohort, c.dp_noise_multiplier or 0
  dp, sampling, n = c.aggregator == 'dp', c.client_sampling, num_clients
  checks = [
    *(
      (
        c.dp_clip is None or getattr(c, name) is None,
        f"--{name} is adaptive clipping's: give it "
        'or --dp_clip (fixed clipping), not both',
      )
      for name in ('dp_target_quantile', 'dp_initial_clip')
    ),
    (
      m is None or k is None or m >= k,
      f'--dp_noise_cohort must be >= --clients_per_round ({k}), got {m}: '
      'the noise of fewer clients than take part is below theirs',
    ),
    (
      m is None or n is None or m <= n,
      f'--dp_noise_cohort={m} is more than the {n} clients of {c.task}: a '
      'round cannot draw more clients than there are',
    ),
    (
      not dp or sampling != 'proportional',
      '--client_sampling=proportional '
      'draws clients by their number of examples, which no DP accountant '
      'here certifies: use uniform or poisson with --aggregator=dp',
    ),
    (
      not dp or c.dp_clip is not None or k is None or z < 0.1 * (m or k),
      f'--dp_noise_multiplier={z:g} with adaptive clipping needs more than '
      f'{10 * z:g} clients per round (TFF gives the clipped count '
      'noise 0.05·K, which must exceed z/2): give --dp_clip, a larger K or '
      'a --dp_noise_cohort',
    ),
    (
      c.dp_accountant != 'pld' or sampling == 'poisson',
      '--dp_accountant=pld needs --client_sampling=poisson (dp_accounting '
      'has no PLD of fixed-size sampling)',
    ),
    (
      not dp or weighting in (None, 'uniform'),
      f'--client_weighting={weighting}: --aggregator=dp takes an unweighted '
      "mean (the clients' weights would leak what DP hides)",
    ),
    (
      n is None or k is None or k <= n,
      f'--clients_per_round={k} is more than the {n} clients of {c.task}'
      + (
        ' (--client_sampling=poisson: q = K/N must be at most 1)'
        if sampling == 'poisson'
        else ''
      ),
    ),
    (
      c.eval_clients is None or n is None or c.eval_clients <= n,
      f'--eval_clients={c.eval_clients} is more than the {n} clients of '
      f'{c.task}',
    ),
  ]
  for ok, message in checks:
    if not ok:
      raise ConfigError(message)


def _privacy(c: Config, num_clients) -> dict:
  """The DP settings' defaults filled in: δ 0.1/N, RDP, adaptive clipping
  at the median unless --dp_clip, and the adjacency the ε is under."""
  if c.aggregator != 'dp':
    return {}
  delta = c.dp_delta
  if delta is None and num_clients is not None:
    delta = 0.1 / num_clients  # Well below 1/N, as a guarantee needs.
  quantile = c.dp_target_quantile
  if c.dp_clip is None and quantile is None:
    quantile = budget.TARGET_UNCLIPPED_QUANTILE
  return dict(
    dp_delta=delta,
    dp_target_quantile=quantile,
    dp_accountant=c.dp_accountant or 'rdp',
    dp_adjacency=budget.ADJACENCY[c.client_sampling],
  )


def _aggregator(c: Config):
  """The model aggregator of the resolved settings `c` (None: the mean)."""
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
