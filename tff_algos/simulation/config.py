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

`Config`, made from the declarations, is a run's flat record: the flags'
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

from collections.abc import Callable, Iterator, Mapping
import dataclasses
import json
from typing import Any

from tasks import partitions
from tasks.validate import FLOAT32_MAX  # Rates and weights run in float32.
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.privacy import budget
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
CLIENT_EXECUTIONS = ('auto', 'compiled', 'per_client')
SAMPLING = tuple(scheme.value for scheme in SamplingScheme)
ALGORITHM_DEFAULT = '{algorithm default}'  # In a help: the algorithms'.


class ConfigError(ValueError):
  """An invalid combination of settings (reported as a usage error)."""


# The checks of numbers: (what a value must satisfy, what the error says
# it must be).
ROUNDS = (lambda v: 1 <= v <= MAX_ROUNDS, f'in 1..{MAX_ROUNDS}')
SEED = (lambda v: 0 <= v <= MAX_SEED, f'in 0..{MAX_SEED}')
AT_LEAST_1 = (lambda v: v >= 1, '>= 1')
# A client's minibatch schedule counts its examples over all E epochs in
# int32 (`learning.ScheduledInput`'s example_order and batch_ends).
MAX_EPOCHS = 2**31 - 1
EPOCHS = (lambda v: 1 <= v <= MAX_EPOCHS, f'in 1..{MAX_EPOCHS}')
BATCH = (lambda v: v == -1 or v >= 1, '>= 1 or -1 (B = ∞)')
FRACTION = (lambda v: 0 < v <= 1, 'in (0, 1]')
SHARE = (lambda v: 0 <= v <= 1, 'in [0, 1]')
OPEN_UNIT = (lambda v: 0 < v < 1, 'in (0, 1)')
POSITIVE = (lambda v: 0 < v < FLOAT32_MAX, 'a positive number')
RATE = (POSITIVE[0], "a positive number (below 3.4e38, float32's largest)")
NON_NEGATIVE = (lambda v: 0 <= v < FLOAT32_MAX, 'a number >= 0')


@dataclasses.dataclass(frozen=True)
class Setting:
  """One run setting's declaration.

  Attributes:
    name: its flag (--NAME) and config.json key.
    kind: int, float, str, bool, or list (a repeatable flag; `multi`
      False: absl's comma-separated list).
    default: the flag's default, and config.json's when no flag gives it
      (None: the algorithm's, or one derived in `resolve`).
    help: the flag's help ('{default}' and ALGORITHM_DEFAULT filled in).
    section: its group in --help.
    group: the `Settings` group it resolves into (None: not part of a
      run's settings: outputs, sweeps, task options).
    choices: the values it may take (an enum flag).
    check: (what a value, not None, must satisfy, what it must be:
      '--NAME must be MUST, got VALUE'); `error_text`, a message of its
      own.
    needs: (setting, value) it needs, e.g. ('aggregator', 'dp').
    flag: whether it is a flag (else only a record of the run).
    optional: None is a value config.json may hold (besides a None
      default); `unset`: the flag defaults to None, not `default`.
    key: its config.json key where other than the flag's name.
    checked: whether `resolve` checks its choices here (the optimizers'
      are checked by `optimizers.resolve`).
    users: the algorithms that take it (a hyper-parameter's flag; not
      those that hold it fixed).
  """

  name: str
  kind: type
  default: Any
  help: str = ''
  section: str = 'run'
  group: str | None = 'run'
  choices: tuple = ()
  check: tuple[Callable[[Any], bool], str] | None = None
  error_text: str = ''
  needs: tuple[str, str] | None = None
  flag: bool = True
  unset: bool = False
  key: str = ''
  multi: bool = True
  checked: bool = True
  users: str = ''

  @property
  def record_key(self) -> str | None:
    """Its key in config.json (None: none)."""
    return (self.key or self.name) if self.group else None

  @property
  def attr(self) -> str:
    """Its attribute in its `Settings` group."""
    if self.name == 'client_sampling':
      return 'scheme'
    return (self.key or self.name).removeprefix('dp_')

  def accepts(self, value) -> bool:
    """Whether a config.json value has this setting's type."""
    if value is None:
      return self.default is None or self.unset
    if self.kind is list:
      return isinstance(value, (list, tuple)) and all(
        isinstance(v, str) for v in value
      )
    if isinstance(value, bool) or self.kind is bool:
      return isinstance(value, bool) and self.kind is bool
    number = (int, float) if self.kind is float else self.kind
    return isinstance(value, number)

  def error(self, value) -> str | None:
    """Why `value` is not one this setting takes, or None."""
    if value is None:
      return None
    if self.choices and self.checked and value not in self.choices:
      listed = (
        ' or '.join(self.choices)
        if len(self.choices) == 2
        else 'one of ' + ', '.join(self.choices)
      )
      return f'--{self.name} must be {listed}, got {value!r}'
    if self.check is None or self.check[0](value):
      return None
    return self.error_text.format(value) or (
      f'--{self.name} must be {self.check[1]}, got {value}'
    )


def _optimizer_settings(role: str) -> list[Setting]:
  """The flags of `role`'s optimizer (`optimizers.flag_names`)."""

  def declare(suffix, kind, text, **more):
    return Setting(
      f'{role}_{suffix}',
      kind,
      None,
      text,
      'algorithm',
      'algorithm',
      checked=False,
      **more,
    )

  server = role == 'server'
  presets = "; fedadam, fedyogi, fedadagrad: Reddi et al. 2021's presets"
  return [
    declare(
      'optimizer',
      str,
      f'The {role} optimizer (default sgd: plain SGD'
      + (presets if server else '')
      + ').',
      choices=(
        optimizers.SERVER_OPTIMIZERS if server else optimizers.CLIENT_OPTIMIZERS
      ),
    ),
    declare(
      'momentum', float, f'--{role}_optimizer=sgdm: momentum (default 0.9).'
    ),
    declare('beta1', float, f'Adam/Yogi ({role}): β1 (default 0.9).'),
    declare(
      'beta2',
      float,
      f'Adam/Yogi ({role}): β2 (default 0.999; the Fed presets 0.99).',
    ),
    declare(
      'epsilon', float, f"Adam/Adagrad/Yogi ({role}): ε (Reddi et al.'s τ)."
    ),
    declare(
      'lr_schedule',
      str,
      f'The {role} learning rate per round t: constant, step '
      '(η·decay^⌊t/every⌋) or inverse_time (η/(1 + decay·⌊t/every⌋))'
      + (
        ' (default constant; FedISGD: step)'
        if server
        else ' (default constant)'
      )
      + '.',
      choices=optimizers.SCHEDULES,
    ),
    declare('lr_decay', float, f"The {role} schedule's decay (default 1)."),
    declare(
      'lr_decay_every',
      int,
      f"Rounds between the {role} schedule's decays (default 1).",
    ),
  ]


def _dp(name, kind, text, **more):
  """A --dp_* setting: it needs --aggregator=dp."""
  return Setting(
    f'dp_{name}',
    kind,
    None,
    f'--aggregator=dp{text}',
    'aggregation',
    'privacy',
    needs=('aggregator', 'dp'),
    **more,
  )


def _declare_settings() -> tuple[Setting, ...]:
  """Every run setting, in --help's order."""
  S = Setting
  return (
    # --- run
    S(
      'rounds',
      int,
      200,
      f'Communication rounds T, 1 to {MAX_ROUNDS:,} (2^31 - 1: '
      "the server optimizer's round counter is int32).",
      check=ROUNDS,
    ),
    S(
      'clients_per_round',
      int,
      10,
      'Clients K selected per round (default {default}).',
      group='sampling',
      unset=True,
      check=AT_LEAST_1,
    ),
    S(
      'client_fraction',
      float,
      None,
      "FedAvg's C: select max(⌊C·N⌋, 1) of the N clients per "
      'round (instead of --clients_per_round).',
      group=None,
      check=FRACTION,
    ),
    S(
      'straggler_fraction',
      float,
      0.0,
      'Fraction of the selected clients that straggle each round: '
      'they run x ~ U{1..E-1} epochs, fewer than E.',
      group='sampling',
      check=SHARE,
    ),
    S(
      'seed',
      int,
      0,
      'Seed of the initial model, client selection, stragglers '
      'and minibatch order (0..2^32-1).',
      check=SEED,
    ),
    S(
      'workers',
      str,
      '',
      'Spread the client work over remote TFF workers, '
      'host:port,... (python -m tff_algos.worker; '
      'docs/guide/remote-workers.md: their protocol is unauthenticated; the '
      'clients '
      'then train per client). Empty: the local runtime only.',
      group=None,
    ),
    S(
      'client_execution',
      str,
      'auto',
      "How the clients' local training runs: compiled (the "
      "round's clients one after another in one XLA-compiled loop "
      'in this process), per_client (a TFF call per client, its '
      'data sent: the reference) or auto (compiled where it is '
      'the faster: models without convolutions or recurrent '
      'layers). The header says which ran, and why not compiled. '
      'Unless per_client, clients trained per client read their '
      'data in the TFF worker (the same models), and a model '
      'evaluated '
      'client by client (the char-LSTM) has its predictions made '
      'across clients.',
      choices=CLIENT_EXECUTIONS,
    ),
    S(
      'import',
      list,
      [],
      'A module (my_pkg.my_module) or file (path/to/my_task.py) '
      'that registers tasks or algorithms of your own; '
      'repeatable, recorded in config.json (docs/TASKS.md).',
      key='imports',
    ),
    # --- algorithm
    S(
      'algo',
      str,
      registry.DEFAULT,
      'The federated algorithm (listed above).',
      'algorithm',
      'algorithm',
    ),
    S(
      'epochs',
      int,
      None,
      f'Local epochs E{ALGORITHM_DEFAULT}.',
      'algorithm',
      'algorithm',
      check=EPOCHS,
    ),
    S(
      'batch_size',
      int,
      None,
      'Local minibatch size B; -1 = the whole local dataset '
      f'(B = ∞){ALGORITHM_DEFAULT}.',
      'algorithm',
      'algorithm',
      check=BATCH,
    ),
    S(
      'client_lr',
      float,
      None,
      f'Client learning rate η{ALGORITHM_DEFAULT}'
      "; FedSGD's η unless --server_lr is given.",
      'algorithm',
      'algorithm',
      check=RATE,
    ),
    S(
      'server_lr',
      float,
      None,
      'Server learning rate on the mean update: 1 = model '
      "averaging (FedAvg/FedProx); FedSGD's η; FedISGD's initial "
      'η_gi; 0.01 for the Fed* optimizer presets.',
      'algorithm',
      'algorithm',
      check=RATE,
    ),
    S(
      'straggler_policy',
      str,
      None,
      "drop: discard stragglers' updates (FedAvg, FedSGD); "
      'partial: aggregate their partial work (FedProx, FedISGD).',
      'algorithm',
      'algorithm',
      choices=('drop', 'partial'),
    ),
    S(
      'client_weighting',
      str,
      None,
      'Weights of the mean of the client models: n_k (default) or '
      "1/K (FedISGD's default).",
      'algorithm',
      'algorithm',
      choices=('num_examples', 'uniform'),
    ),
    S(
      'hparam',
      list,
      [],
      "NAME=VALUE: a hyper-parameter of the algorithm's own, as its "
      'flag --NAME=VALUE gives it; repeatable.',
      'algorithm',
      None,
    ),
    *_optimizer_settings('client'),
    *_optimizer_settings('server'),
    # --- aggregation
    S(
      'client_sampling',
      str,
      'uniform',
      "How each round's clients are drawn: uniform (K of N "
      'without replacement), poisson (each client with q = K/N: '
      'the cohort size varies, what DP analyses assume) or '
      'proportional (K clients with probability ∝ n_k and a '
      'uniform mean, FedProx App. C.3.4). Every draw a function of '
      '(seed, round, client).',
      'aggregation',
      'sampling',
      choices=SAMPLING,
    ),
    S(
      'aggregator',
      str,
      'mean',
      'The model aggregator: mean (n_k-weighted), dp (clipping and '
      'Gaussian noise, seeded; the mean becomes uniform), '
      "compression (TFF's quantization) or robust (TFF's zeroing "
      'and clipping).',
      'aggregation',
      'algorithm',
      choices=aggregators.KINDS,
    ),
    _dp(
      'noise_multiplier',
      float,
      ': z, the noise stddev on the clipped sum over the clip norm.',
      check=NON_NEGATIVE,
    ),
    _dp(
      'clip',
      float,
      ': clip every update to this L2 norm C (fixed '
      'clipping); without it, adaptive clipping.',
      check=POSITIVE,
    ),
    _dp(
      'target_quantile',
      float,
      ', adaptive clipping: the quantile of the '
      "update norms the clip follows (default 0.5, TFF's).",
      check=OPEN_UNIT,
    ),
    _dp(
      'noise_cohort',
      int,
      ': calibrate the noise as if M clients (K <= '
      "M <= N) took part each round (pfl-research's noise cohort). "
      "The trained model's noise multiplier is then z·K/M, and "
      "its ε is the epsilon column; the M-client deployment's is "
      'deployment_epsilon.',
      check=AT_LEAST_1,
    ),
    _dp(
      'initial_clip',
      float,
      ', adaptive clipping: the clip norm before the '
      "first round (default 0.1, TFF's). The clip moves by at most "
      'a factor e^0.1 a round, so start it near the update norms.',
      check=POSITIVE,
    ),
    _dp(
      'noise_seed',
      int,
      ': the seed of the DP noise alone (default '
      '--seed): the sampling and the initial model stay those of '
      "--seed, so runs that differ only in it show the noise's "
      'own variance.',
      check=SEED,
    ),
    _dp(
      'delta',
      float,
      ": δ of the ε reported (default 0.1/N, N the task's clients).",
      check=OPEN_UNIT,
    ),
    _dp(
      'accountant',
      str,
      ': rdp (default) or pld (--client_sampling=poisson only) for ε.',
      choices=('rdp', 'pld'),
    ),
    _dp('adjacency', str, ': the relation its ε is under.', flag=False),
    # --- data
    S(
      'task',
      str,
      'synthetic_1_1',
      'The task: data and model (listed above).',
      'data',
    ),
    S(
      'data_dir',
      str,
      None,
      'Dataset tasks: the folder holding their files (default '
      '$TFF_DATA_DIR, else ~/.tff). Synthetic tasks generate their '
      'data: give it only for a LEAF folder with train/ and test/ '
      'JSON to read instead.',
      'data',
    ),
    S(
      'data_seed',
      int,
      0,
      'Seed of generated data and random splits (fixed by default, '
      'so runs of every --seed share the data).',
      'data',
      check=SEED,
    ),
    S(
      'train_fraction',
      float,
      None,
      "Each device's share of training examples, for tasks that "
      'split devices themselves (default 0.9; FedISGD used 0.8).',
      'data',
      check=OPEN_UNIT,
    ),
    S(
      'partition',
      str,
      None,
      'dirichlet:α: repartition the training examples over the '
      "task's clients with Dirichlet(α) label proportions (small α: "
      'few labels per client), seeded by --data_seed; the per-'
      'client label counts go to label_histogram.csv.',
      'data',
    ),
    S(
      'num_clients',
      int,
      None,
      'Dataset tasks that support it: a seeded random subset of '
      'this many clients (quick runs on a CPU).',
      'data',
      None,
    ),
    S(
      'embeddings',
      str,
      None,
      'Sent140: a GloVe-format text file of word embeddings (else '
      'embeddings are trained).',
      'data',
      None,
    ),
    # --- output
    S(
      'output_dir',
      str,
      None,
      'The run folder: metrics.csv, config.json, summary.json, '
      'checkpoints/, tensorboard/ (default runs/ALGO_TASK_seedSEED, '
      'found again by the same command).',
      'output',
      None,
    ),
    S(
      'overwrite',
      bool,
      False,
      'Replace the results in an existing --output_dir (a sweep: '
      'only the runs whose folders hold other settings).',
      'output',
      None,
    ),
    S(
      'replace_other_run',
      bool,
      False,
      'Replace the run in --output_dir only if it was run with '
      "other settings (what a sweep's --overwrite passes to its "
      'runs).',
      'output',
      None,
    ),
    S(
      'accept_package_change',
      bool,
      False,
      "Let a run in --output_dir that this package's code of "
      'another version started go on (resume) or stand (finished) '
      'under this one; config.json records both versions. Your own '
      'code, the data and the settings must be the same.',
      'output',
      None,
    ),
    S(
      'resume',
      bool,
      False,
      'Continue the unfinished run in --output_dir (an error if '
      'there is none; the same command without --resume also '
      'continues it).',
      'output',
      None,
    ),
    S(
      'checkpoint_every',
      int,
      10,
      'Save the program state every N rounds (and after the last).',
      'output',
      None,
      check=AT_LEAST_1,
      error_text='--checkpoint_every must be >= 1',
    ),
    S(
      'eval_every',
      int,
      1,
      'Evaluate f(w) and accuracy on all clients every N rounds '
      '(and after the last).',
      'output',
      'measurement',
      check=AT_LEAST_1,
      error_text='--eval_every must be >= 1',
    ),
    S(
      'eval_clients',
      int,
      None,
      'Estimate the training loss and accuracy on a fixed random '
      'subset of this many clients (seeded by --seed; the output '
      'says so), for tasks with many clients; the test split is '
      'always evaluated in full (default: all clients).',
      'output',
      'measurement',
      check=AT_LEAST_1,
    ),
    S(
      'dissimilarity_every',
      int,
      0,
      'Write the gradient variance and dissimilarity B(w) every N '
      'rounds (0: never).',
      'output',
      'measurement',
      check=(lambda v: v >= 0, '>= 0'),
      error_text='--dissimilarity_every must be >= 0',
    ),
    S(
      'update_spread',
      bool,
      False,
      'Write the spread of the client updates (1/K)Σ‖u_k − ū‖² '
      'every round (FedISGD always does: its VLG).',
      'output',
      'measurement',
    ),
    S(
      'target_accuracy',
      float,
      None,
      'Report the rounds to reach this test accuracy (FedAvg §3), e.g. 0.99.',
      'output',
      None,
      check=FRACTION,
    ),
    S(
      'stop_at_target',
      bool,
      False,
      'End the run at the first evaluated round whose test '
      'accuracy reaches --target_accuracy (all that rounds-to-'
      'target tables need).',
      'output',
      None,
    ),
    S(
      'stop_at_accuracy',
      float,
      None,
      '--stop_at_target: the --target_accuracy the run stops at.',
      'output',
      'measurement',
      flag=False,
      check=FRACTION,
      error_text='--stop_at_target needs a --target_accuracy in (0, 1], got {}',
    ),
    S('progress', bool, True, 'Show a progress bar on stderr.', 'output', None),
    S(
      'dry_run',
      bool,
      False,
      "Validate the flags and print the run's settings (a sweep: "
      "every run's); run nothing.",
      'output',
      None,
    ),
    # --- sweep
    S(
      'variant',
      list,
      [],
      'One run per variant, "NAME: --flag=value ..." (a table row '
      'or curve; the first is the baseline of the speedup '
      'column).',
      'sweep',
      None,
    ),
    S(
      'sweep',
      list,
      [],
      'Every variant for each value, "FLAG=V1,V2,..."; repeatable '
      '(cartesian product).',
      'sweep',
      None,
    ),
    S(
      'only',
      list,
      [],
      'Run only these variants (names); the summary still covers '
      'every run of the plan that has results.',
      'sweep',
      None,
      multi=False,
    ),
  )


SETTINGS = _declare_settings()
BY_NAME = {s.name: s for s in SETTINGS}
RECORDED = tuple(s for s in SETTINGS if s.record_key)
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


def help_text(s: Setting) -> str:
  """`s`'s help, its placeholders filled in (the algorithms' defaults)."""
  text = s.help.replace('{default}', str(s.default))
  return text.replace(ALGORITHM_DEFAULT, _algorithm_default(s.name))


def _algorithm_default(name):
  """' (default 20; fedsgd: 1)' for --epochs: the registered algorithms'."""
  values = {}
  for algo in registry.names():
    entry = registry.get(algo)
    value = entry.fixed.get(name, entry.defaults.get(name))
    if value is not None and not callable(value):
      values.setdefault(value, []).append(algo)
  if not values:
    return ''
  common = max(values, key=lambda v: len(values[v]))
  others = '; '.join(
    f'{", ".join(algos)}: {v}' for v, algos in values.items() if v != common
  )
  return f' (default {common}' + (f'; {others}' if others else '') + ')'


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
      raise ConfigError(
        f'--{flag}: {algorithm.name} has {name}={value} ({algorithm.paper})'
      )
  return dataclasses.replace(c, **fixed)


def _owned(algorithm: registry.Algorithm) -> str:
  """The settings and hyper-parameters `algorithm` has, for an error."""
  owned = ', '.join((*algorithm.uses, *(h.name for h in algorithm.hparams)))
  return owned or 'none'


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
        raise ConfigError(
          f'--{name}={given}: {algorithm.name} has {name}='
          f'{values[name]} ({algorithm.paper})'
        )
    elif name in algorithm.uses:
      values[name] = algorithm.defaults[name] if given is None else given
    elif given is not None:
      raise ConfigError(
        f'--{name} is not a {algorithm.name} hyper-parameter (it has '
        f'{_owned(algorithm)})'
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
  for name, value in config.hparams.items():
    declared = algorithm.hyperparameter(name)
    if declared is None:
      raise ConfigError(
        f'--{name} is not a {algorithm.name} hyper-parameter (it has '
        f'{_owned(algorithm)})'
      )
    error = declared.error(value)
    if error is None and declared.fixed and value != declared.default:
      error = (
        f'--{name}={value:g}: {algorithm.name} has {name}='
        f'{declared.default:g} ({algorithm.paper})'
      )
    if error is not None:
      raise ConfigError(error)
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
          raise ConfigError(_not_taken(algorithm, name, role))
      found.append(plain)
  except optimizers.SettingsError as e:
    raise ConfigError(str(e)) from None
  return found


def _not_taken(algorithm, flag, role) -> str:
  """The error for `--flag` of a `role` optimizer `algorithm` does not
  declare: what it has instead."""
  why = (
    'its clients run no optimizer'
    if role == 'client' and not algorithm.client_optimizer
    else f'its {role} optimizer is its own'
  )
  return (
    f'--{flag} is not a {algorithm.name} hyper-parameter: {why} (it has '
    f'{_owned(algorithm)})'
  )


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
