"""Each run setting's declaration (`Setting`), in one table (`SETTINGS`):
its flag, type, default, help, check, config.json key and typed group.
Adding a run setting is adding its `Setting` here; `simulation.config`
makes the flags, `Config`, the checks and the reference from the table.
Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from typing import Any

from tasks.validate import FLOAT32_MAX  # Rates and weights run in float32.
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.simulation.sampling import SamplingScheme

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
    label: how a plot names its value where runs differ (a format:
      'K={}'); '' = plots leave it out.
    in_title: whether a plot's title names it when all runs share it.
    plain: the value a title leaves unsaid (what a reader assumes).
    in_computation: it shapes the built computation (`tff_algos.export`
      records it beside it), besides the algorithm's `uses`.
    simulation_only: a callback of the simulation acts on it between
      rounds; a production build has no such setting.
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
  label: str = ''
  in_title: bool = True
  plain: Any = None
  in_computation: bool = False
  simulation_only: bool = False

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
      in_computation=True,
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
      label=f'{role} {{}}',
      plain='sgd',
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
      label='{} rounds',
      in_title=False,
    ),
    S(
      'clients_per_round',
      int,
      10,
      'Clients K selected per round (default {default}).',
      group='sampling',
      unset=True,
      check=AT_LEAST_1,
      label='K={}',
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
      label='{:.0%} stragglers',
      plain=0.0,
    ),
    S(
      'seed',
      int,
      0,
      'Seed of the initial model, client selection, stragglers '
      'and minibatch order (0..2^32-1).',
      check=SEED,
      in_computation=True,
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
      label='E={}',
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
      label='B={}',
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
      label='η={:g}',
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
      label='η_s={:g}',
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
      label='stragglers {}',
      in_title=False,
      simulation_only=True,
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
      label='{} weights',
      in_title=False,
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
      label='{} sampling',
      plain='uniform',
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
      label='{} aggregator',
      plain='mean',
      in_computation=True,
    ),
    _dp(
      'noise_multiplier',
      float,
      ': z, the noise stddev on the clipped sum over the clip norm.',
      check=NON_NEGATIVE,
      label='z={:g}',
      in_computation=True,
    ),
    _dp(
      'clip',
      float,
      ': clip every update to this L2 norm C (fixed '
      'clipping); without it, adaptive clipping.',
      check=POSITIVE,
      label='C={:g}',
      in_computation=True,
    ),
    _dp(
      'target_quantile',
      float,
      ', adaptive clipping: the quantile of the '
      "update norms the clip follows (default 0.5, TFF's).",
      check=OPEN_UNIT,
      label='clip at quantile {:g}',
      in_computation=True,
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
      label='noise cohort {}',
      in_computation=True,
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
      label='δ={:.2g}',
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
      label='{}',
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
      label='data seed {}',
      in_title=False,
    ),
    S(
      'train_fraction',
      float,
      None,
      "Each device's share of training examples, for tasks that "
      'split devices themselves (default 0.9; FedISGD used 0.8).',
      'data',
      check=OPEN_UNIT,
      label='train {:g}',
      in_title=False,
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
      label='{}',
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
      in_computation=True,
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
