"""What the command lines share: absl flags, one error style, --help, flag
files and users' modules. Imports no TensorFlow.

Flags are specified once (`_groups`, and each program's own) and defined
into a fresh `absl.flags.FlagValues` per parse (`flag_values`), so a sweep
parses each run's flags without global state. `config_from_flags` turns
parsed flags into a `Config`; a flag that was not given stays None there
("the algorithm's default"). Every entry point reports bad input as one
line, `PROGRAM: error: …`, and exit code 2 (`fail`): the help is a flag
away.
"""

import contextlib
import dataclasses
import io
import os
import sys
import textwrap
from typing import NoReturn

from absl import flags

import tasks
from tff_algos import user_modules
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.privacy import flags as privacy_flags
from tff_algos.simulation import config as config_lib

_DEFAULTS = config_lib.Config()


class UsageError(Exception):
  """Bad input: one line on stderr, exit code 2."""


def fail(program: str, message, code: int = 2) -> NoReturn:
  """One line on stderr, `PROGRAM: error: message` (exit code 2: bad
  input) or `PROGRAM: message` (a run that stopped), then exit `code`."""
  text = ' '.join(str(message).split())  # One line, whatever it holds.
  prefix = 'error: ' if code == 2 else ''
  print(f'{program}: {prefix}{text}', file=sys.stderr, flush=True)
  sys.exit(code)


def exit_on_ctrl_c(program: str, main, *args):
  """`main(*args)`'s exit, Ctrl-C being one line and exit code 130 (a
  command's import of TensorFlow, before any run of its own)."""
  try:
    return main(*args)
  except KeyboardInterrupt:
    fail(program, 'interrupted', code=130)


# ----------------------------------------------------------------- flags
@dataclasses.dataclass(frozen=True)
class Flag:
  define: str  # the absl DEFINE_ function's name
  name: str
  default: object
  help: str
  args: tuple = ()  # e.g. an enum's values


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


_DEFINE = {bool: 'DEFINE_bool', int: 'DEFINE_integer', float: 'DEFINE_float'}


def _hyperparameter_flags():
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
    found.append(
      Flag(
        _DEFINE[first.kind],
        name,
        None,
        f'{first.help.rstrip(".")} ({notes}).',
      )
    )
  return found


def _optimizer_flags(role):
  names = (
    optimizers.CLIENT_OPTIMIZERS
    if role == 'client'
    else optimizers.SERVER_OPTIMIZERS
  )
  return [
    Flag(
      'DEFINE_enum',
      f'{role}_optimizer',
      None,
      f'The {role} optimizer (default sgd: plain SGD'
      + (
        "; fedadam, fedyogi, fedadagrad: Reddi et al. 2021's presets"
        if role == 'server'
        else ''
      )
      + ').',
      (list(names),),
    ),
    Flag(
      'DEFINE_float',
      f'{role}_momentum',
      None,
      f'--{role}_optimizer=sgdm: momentum (default 0.9).',
    ),
    Flag(
      'DEFINE_float',
      f'{role}_beta1',
      None,
      f'Adam/Yogi ({role}): β1 (default 0.9).',
    ),
    Flag(
      'DEFINE_float',
      f'{role}_beta2',
      None,
      f'Adam/Yogi ({role}): β2 (default 0.999; the Fed presets 0.99).',
    ),
    Flag(
      'DEFINE_float',
      f'{role}_epsilon',
      None,
      f"Adam/Adagrad/Yogi ({role}): ε (Reddi et al.'s τ).",
    ),
    Flag(
      'DEFINE_enum',
      f'{role}_lr_schedule',
      None,
      f'The {role} learning rate per round t: constant, step '
      '(η·decay^⌊t/every⌋) or inverse_time (η/(1 + decay·⌊t/every⌋))'
      + (
        ' (default constant; FedISGD: step)'
        if role == 'server'
        else ' (default constant)'
      )
      + '.',
      (list(optimizers.SCHEDULES),),
    ),
    Flag(
      'DEFINE_float',
      f'{role}_lr_decay',
      None,
      f"The {role} schedule's decay (default 1).",
    ),
    Flag(
      'DEFINE_integer',
      f'{role}_lr_decay_every',
      None,
      f"Rounds between the {role} schedule's decays (default 1).",
    ),
  ]


def _groups():
  """The flags of every group, in help order (built on first use: the
  algorithms' defaults and hyper-parameters come from the registry).
  UsageError for a hyper-parameter named as another flag."""
  groups = _run_groups()
  names = {f.name for group in groups.values() for f in group}
  own = _hyperparameter_flags()
  for flag in own:
    if flag.name in names:
      owners = [a for a, _ in registry.hyperparameters()[flag.name]]
      raise UsageError(
        f'{", ".join(owners)}: the hyper-parameter {flag.name} is named as '
        f'the flag --{flag.name}; rename it'
      )
  algorithm = groups['algorithm']
  at = [f.name for f in algorithm].index('client_optimizer')
  algorithm[at:at] = own  # Before the optimizers' flags.
  return groups


def _run_groups():
  """The flags of every group but the algorithms' hyper-parameters."""
  return {
    'run': [
      Flag(
        'DEFINE_integer',
        'rounds',
        _DEFAULTS.rounds,
        f'Communication rounds T, 1 to {config_lib.MAX_ROUNDS:,} (2^31 - 1: '
        "the server optimizer's round counter is int32).",
      ),
      Flag(
        'DEFINE_integer',
        'clients_per_round',
        None,
        f'Clients K selected per round (default '
        f'{_DEFAULTS.clients_per_round}).',
      ),
      Flag(
        'DEFINE_float',
        'client_fraction',
        None,
        "FedAvg's C: select max(⌊C·N⌋, 1) of the N clients per "
        'round (instead of --clients_per_round).',
      ),
      Flag(
        'DEFINE_float',
        'straggler_fraction',
        _DEFAULTS.straggler_fraction,
        'Fraction of the selected clients that straggle each round: '
        'they run x ~ U{1..E-1} epochs, fewer than E.',
      ),
      Flag(
        'DEFINE_integer',
        'seed',
        _DEFAULTS.seed,
        'Seed of the initial model, client selection, stragglers '
        'and minibatch order (0..2^32-1).',
      ),
      Flag(
        'DEFINE_string',
        'workers',
        '',
        'Spread the client work over remote TFF workers, '
        'host:port,... (python -m tff_algos.worker; README "Remote '
        'workers": their protocol is unauthenticated; the clients '
        'then train per client). Empty: the local runtime only.',
      ),
      Flag(
        'DEFINE_enum',
        'client_execution',
        _DEFAULTS.client_execution,
        "How the clients' local training runs: compiled (the "
        "round's clients one after another in one XLA-compiled loop "
        'in this process), lockstep (many clients at once in this '
        'process), both the same computation summed in another '
        'order; per_client (a TFF call per client, its data sent: '
        'the reference) or auto (compiled or lockstep where it is '
        'the faster: models without convolutions). The header says '
        'which ran, and why not in this process. Unless '
        'per_client, clients trained per client read their data '
        'in the TFF worker (the same models), and a model evaluated '
        'client by client (the char-LSTM) has its predictions made '
        'across clients.',
        (list(config_lib.CLIENT_EXECUTIONS),),
      ),
      Flag(
        'DEFINE_multi_string',
        'import',
        [],
        'A module (my_pkg.my_module) or file (path/to/my_task.py) '
        'that registers tasks or algorithms of your own; '
        'repeatable, recorded in config.json (docs/TASKS.md).',
      ),
    ],
    'algorithm': [
      Flag(
        'DEFINE_string',
        'algo',
        _DEFAULTS.algo,
        'The federated algorithm (listed above).',
      ),
      Flag(
        'DEFINE_integer',
        'epochs',
        None,
        'Local epochs E' + _algorithm_default('epochs') + '.',
      ),
      Flag(
        'DEFINE_integer',
        'batch_size',
        None,
        'Local minibatch size B; -1 = the whole local dataset '
        '(B = ∞)' + _algorithm_default('batch_size') + '.',
      ),
      Flag(
        'DEFINE_float',
        'client_lr',
        None,
        'Client learning rate η'
        + _algorithm_default('client_lr')
        + "; FedSGD's η unless --server_lr is given.",
      ),
      Flag(
        'DEFINE_float',
        'server_lr',
        None,
        'Server learning rate on the mean update: 1 = model '
        "averaging (FedAvg/FedProx); FedSGD's η; FedISGD's initial "
        'η_gi; 0.01 for the Fed* optimizer presets.',
      ),
      Flag(
        'DEFINE_enum',
        'straggler_policy',
        None,
        "drop: discard stragglers' updates (FedAvg, FedSGD); "
        'partial: aggregate their partial work (FedProx, FedISGD).',
        (['drop', 'partial'],),
      ),
      Flag(
        'DEFINE_enum',
        'client_weighting',
        None,
        'Weights of the mean of the client models: n_k (default) or '
        "1/K (FedISGD's default).",
        (['num_examples', 'uniform'],),
      ),
      Flag(
        'DEFINE_multi_string',
        'hparam',
        [],
        "NAME=VALUE: a hyper-parameter of the algorithm's own, as its "
        'flag --NAME=VALUE gives it; repeatable.',
      ),
      *_optimizer_flags('client'),
      *_optimizer_flags('server'),
    ],
    'aggregation': [
      Flag(
        'DEFINE_enum',
        'client_sampling',
        _DEFAULTS.client_sampling,
        "How each round's clients are drawn: uniform (K of N "
        'without replacement), poisson (each client with q = K/N: '
        'the cohort size varies, what DP analyses assume) or '
        'proportional (K clients with probability ∝ n_k and a '
        'uniform mean, FedProx App. C.3.4). Every draw a function of '
        '(seed, round, client).',
        (list(config_lib.SAMPLING),),
      ),
      Flag(
        'DEFINE_enum',
        'aggregator',
        _DEFAULTS.aggregator,
        'The model aggregator: mean (n_k-weighted), dp (clipping and '
        'Gaussian noise, seeded; the mean becomes uniform), '
        "compression (TFF's quantization) or robust (TFF's zeroing "
        'and clipping).',
        (list(aggregators.KINDS),),
      ),
      Flag(
        'DEFINE_float',
        'dp_noise_multiplier',
        None,
        '--aggregator=dp: z, the noise stddev on the clipped sum over '
        'the clip norm.',
      ),
      Flag(
        'DEFINE_float',
        'dp_clip',
        None,
        '--aggregator=dp: clip every update to this L2 norm C (fixed '
        'clipping); without it, adaptive clipping.',
      ),
      Flag(
        'DEFINE_float',
        'dp_target_quantile',
        None,
        '--aggregator=dp, adaptive clipping: the quantile of the '
        "update norms the clip follows (default 0.5, TFF's).",
      ),
      Flag(
        'DEFINE_integer',
        'dp_noise_cohort',
        None,
        '--aggregator=dp: calibrate the noise as if M clients (K <= '
        "M <= N) took part each round (pfl-research's noise cohort). "
        "The trained model's noise multiplier is then z·K/M, and "
        "its ε is the epsilon column; the M-client deployment's is "
        'deployment_epsilon.',
      ),
      Flag(
        'DEFINE_float',
        'dp_initial_clip',
        None,
        '--aggregator=dp, adaptive clipping: the clip norm before the '
        "first round (default 0.1, TFF's). The clip moves by at most "
        'a factor e^0.1 a round, so start it near the update norms.',
      ),
      Flag(
        'DEFINE_integer',
        'dp_noise_seed',
        None,
        '--aggregator=dp: the seed of the DP noise alone (default '
        '--seed): the sampling and the initial model stay those of '
        "--seed, so runs that differ only in it show the noise's "
        'own variance.',
      ),
      Flag(
        'DEFINE_float',
        'dp_delta',
        None,
        '--aggregator=dp: δ of the ε reported (default 0.1/N, N the '
        "task's clients).",
      ),
      Flag(
        'DEFINE_enum',
        'dp_accountant',
        None,
        '--aggregator=dp: rdp (default) or pld (--client_sampling='
        'poisson only) for ε.',
        (['rdp', 'pld'],),
      ),
    ],
    'data': [
      Flag(
        'DEFINE_string',
        'task',
        _DEFAULTS.task,
        'The task: data and model (listed above).',
      ),
      Flag(
        'DEFINE_string',
        'data_dir',
        None,
        'Dataset tasks: the folder holding their files (default '
        '$TFF_DATA_DIR, else ~/.tff). Synthetic tasks generate their '
        'data: give it only for a LEAF folder with train/ and test/ '
        'JSON to read instead.',
      ),
      Flag(
        'DEFINE_integer',
        'data_seed',
        _DEFAULTS.data_seed,
        'Seed of generated data and random splits (fixed by default, '
        'so runs of every --seed share the data).',
      ),
      Flag(
        'DEFINE_float',
        'train_fraction',
        None,
        "Each device's share of training examples, for tasks that "
        'split devices themselves (default 0.9; FedISGD used 0.8).',
      ),
      Flag(
        'DEFINE_string',
        'partition',
        None,
        'dirichlet:α: repartition the training examples over the '
        "task's clients with Dirichlet(α) label proportions (small α: "
        'few labels per client), seeded by --data_seed; the per-'
        'client label counts go to label_histogram.csv.',
      ),
      Flag(
        'DEFINE_integer',
        'num_clients',
        None,
        'Dataset tasks that support it: a seeded random subset of '
        'this many clients (quick runs on a CPU).',
      ),
      Flag(
        'DEFINE_string',
        'embeddings',
        None,
        'Sent140: a GloVe-format text file of word embeddings (else '
        'embeddings are trained).',
      ),
    ],
    'output': [
      Flag(
        'DEFINE_string',
        'output_dir',
        None,
        'The run folder: metrics.csv, config.json, summary.json, '
        'checkpoints/, tensorboard/ (default runs/ALGO_TASK_seedSEED, '
        'found again by the same command).',
      ),
      Flag(
        'DEFINE_bool',
        'overwrite',
        False,
        'Replace the results in an existing --output_dir (a sweep: '
        'only the runs whose folders hold other settings).',
      ),
      Flag(
        'DEFINE_bool',
        'replace_other_run',
        False,
        'Replace the run in --output_dir only if it was run with '
        "other settings (what a sweep's --overwrite passes to its "
        'runs).',
      ),
      Flag(
        'DEFINE_bool',
        'accept_package_change',
        False,
        "Let a run in --output_dir that this package's code of "
        'another version started go on (resume) or stand (finished) '
        'under this one; config.json records both versions. Your own '
        'code, the data and the settings must be the same.',
      ),
      Flag(
        'DEFINE_bool',
        'resume',
        False,
        'Continue the unfinished run in --output_dir (an error if '
        'there is none; the same command without --resume also '
        'continues it).',
      ),
      Flag(
        'DEFINE_integer',
        'checkpoint_every',
        10,
        'Save the program state every N rounds (and after the last).',
      ),
      Flag(
        'DEFINE_integer',
        'eval_every',
        _DEFAULTS.eval_every,
        'Evaluate f(w) and accuracy on all clients every N rounds '
        '(and after the last).',
      ),
      Flag(
        'DEFINE_integer',
        'eval_clients',
        None,
        'Estimate the training loss and accuracy on a fixed random '
        'subset of this many clients (seeded by --seed; the output '
        'says so), for tasks with many clients; the test split is '
        'always evaluated in full (default: all clients).',
      ),
      Flag(
        'DEFINE_integer',
        'dissimilarity_every',
        0,
        'Write the gradient variance and dissimilarity B(w) every N '
        'rounds (0: never).',
      ),
      Flag(
        'DEFINE_bool',
        'update_spread',
        False,
        'Write the spread of the client updates (1/K)Σ‖u_k − ū‖² '
        'every round (FedISGD always does: its VLG).',
      ),
      Flag(
        'DEFINE_float',
        'target_accuracy',
        None,
        'Report the rounds to reach this test accuracy (FedAvg §3), e.g. 0.99.',
      ),
      Flag(
        'DEFINE_bool',
        'stop_at_target',
        False,
        'End the run at the first evaluated round whose test '
        'accuracy reaches --target_accuracy (all that rounds-to-'
        'target tables need).',
      ),
      Flag('DEFINE_bool', 'progress', True, 'Show a progress bar on stderr.'),
      Flag(
        'DEFINE_bool',
        'dry_run',
        False,
        "Validate the flags and print the run's settings (a sweep: "
        "every run's); run nothing.",
      ),
    ],
    'sweep': [
      Flag(
        'DEFINE_multi_string',
        'variant',
        [],
        'One run per variant, "NAME: --flag=value ..." (a table row '
        'or curve; the first is the baseline of the speedup '
        'column).',
      ),
      Flag(
        'DEFINE_multi_string',
        'sweep',
        [],
        'Every variant for each value, "FLAG=V1,V2,..."; repeatable '
        '(cartesian product).',
      ),
      Flag(
        'DEFINE_list',
        'only',
        [],
        'Run only these variants (names); the summary still covers '
        'every run of the plan that has results.',
      ),
    ],
  }


def flag_values(groups, extra=()) -> flags.FlagValues:
  """A fresh `FlagValues` holding the flags of `groups` (names of
  `_groups()`) and `extra` (`Flag`s of the program's own)."""
  holder = flags.FlagValues()
  specs = _groups()
  for flag in [f for g in groups for f in specs[g]] + list(extra):
    _define(holder, flag)
  return holder


def _define(holder, flag):
  define = getattr(flags, flag.define)
  if flag.define == 'DEFINE_enum':
    define(flag.name, flag.default, flag.args[0], flag.help, flag_values=holder)
  else:
    define(flag.name, flag.default, flag.help, flag_values=holder)


def usage(program, description, groups, extra=(), arguments=''):
  """The help text: what the program does, the tasks and algorithms (for a
  program with their flags), then the flags by group."""
  width = 79
  lines = [
    f'usage: {program} [--flag=value ...]{arguments}',
    '',
    textwrap.fill(description, width),
  ]

  def item(name, text):
    return textwrap.wrap(
      f'{name:24s}{text}',
      width,
      initial_indent='  ',
      subsequent_indent=' ' * 26,
    )

  if 'data' in groups:
    lines += ['', 'tasks (--task):']
    for name, (_, text) in tasks.CATALOG.items():
      lines += item(name, text)
    for name, text in tasks.registered().items():
      lines += item(name, text)
  if 'algorithm' in groups:
    lines += ['', 'algorithms (--algo):']
    for name in registry.names():
      entry = registry.get(name)
      lines += item(name, f'{entry.summary} ({entry.paper})')
  specs = _groups()
  sections = [(g, specs[g]) for g in groups]
  if extra:
    sections.append(('program', list(extra)))
  for group, group_flags in sections:
    lines += ['', f'{group} flags:' if groups else 'flags:']
    for flag in group_flags:
      default = (
        f' [default: {flag.default}]'
        if flag.default not in (None, '', [])
        else ''
      )
      lines.append(f'  --{flag.name}')
      lines += textwrap.wrap(
        flag.help + default,
        width,
        initial_indent=' ' * 6,
        subsequent_indent=' ' * 6,
      )
  lines += [''] + textwrap.wrap(
    'Flags can also come from a file: --flagfile=FILE (configs/ holds the '
    "papers' experiments); flags after it override it. --helpfull lists "
    "absl's own flags too.",
    width,
  )
  return '\n'.join(lines)


def wants_help(argv):
  return any(a in ('-h', '--help', '-help', '--helpshort') for a in argv[1:])


def parse(holder: flags.FlagValues, args, positional: bool = False):
  """Parses `args` (flag files already expanded) into `holder`; returns
  the arguments that are not flags (with `positional`; else they are a
  UsageError, as a bad flag is)."""
  try:
    rest = holder(['program', *args])[1:]
  except flags.Error as e:
    raise UsageError(str(e).splitlines()[0]) from None
  if rest and not positional:
    raise UsageError(f'unexpected arguments: {" ".join(rest)}')
  return rest


# ------------------------------------------------------------ flag files
def expand_flagfiles(args) -> tuple[list[str], list[str]]:
  """`args` with every --flagfile=FILE replaced by its flags, by absl's own
  expansion (recursively; blank lines and # or // comments skipped; each
  line one flag, taken whole: `--variant=A: --mu=1`), and the names of the
  flag files given. UsageError (one line, naming the file) for a file that
  cannot be opened (missing, a folder), is not UTF-8 or includes itself
  (absl only warns of that), or a line that is not a flag."""
  names = []
  for arg in args:
    if arg in ('--flagfile', '-flagfile'):
      raise UsageError('write --flagfile=FILE')
    if arg.startswith('--flagfile='):
      names.append(os.path.splitext(os.path.basename(arg.split('=', 1)[1]))[0])
  if not names:
    return list(args), []
  warnings = io.StringIO()
  try:
    with contextlib.redirect_stderr(warnings):
      expanded = flags.FlagValues().read_flags_from_files(list(args))
  except flags.CantOpenFlagFileError as e:
    cause = e.__context__
    if isinstance(cause, OSError):
      raise UsageError(
        f'--flagfile={cause.filename}: {cause.strerror}'
      ) from None
    raise UsageError(str(e)) from None
  except UnicodeDecodeError as e:
    raise UsageError(
      f'a --flagfile is not UTF-8 text (byte {e.start}: {" ".join(args)})'
    ) from None
  if 'circular flagfile' in warnings.getvalue():
    path = warnings.getvalue().rsplit(':', 1)[-1].strip()
    raise UsageError(f'--flagfile={path} includes itself')
  typed = set(args)
  for line in expanded:
    if line not in typed and not line.startswith('-'):
      raise UsageError(
        f'a --flagfile holds {line!r}: expected one --flag=value per line'
      )
  return expanded, names


# ------------------------------------------------------- users' modules
def import_modules(specs) -> tuple[str, ...]:
  """`user_modules.import_modules`; UsageError (one line) for a module that
  cannot be imported."""
  try:
    return user_modules.import_modules(specs)
  except user_modules.ImportFailed as e:
    raise UsageError(str(e)) from None


imports_in = user_modules.imports_in


# --------------------------------------------------------- the settings
def _hparams(holder):
  """The hyper-parameters given: their flags and --hparam NAME=VALUE
  (UsageError for one given both ways)."""
  values = {
    name: holder[name].value
    for name in registry.hyperparameters()
    if name in holder and holder[name].value is not None
  }
  flagged = set(values)
  for item in holder.hparam:
    name, sep, value = item.partition('=')
    name = name.strip()
    try:
      number = float(value)
    except ValueError:
      sep = ''
    if not sep or not name:
      raise UsageError(f'--hparam={item!r}: expected NAME=NUMBER')
    if name in flagged:
      raise UsageError(f'give --{name} or --hparam={name}=..., not both')
    values[name] = number
  return values


def _value(holder, name, default=None):
  """A flag's value, or `default` where the program does not define it."""
  return holder[name].value if name in holder else default


_AGGREGATION = ('client_sampling', 'aggregator', *privacy_flags.DP_FLAGS)
OPTIMIZER_FIELDS = optimizers.flag_names('client') + optimizers.flag_names(
  'server'
)


def config_from_flags(holder, imports=(), check=True) -> config_lib.Config:
  """The Config of the parsed flags; UsageError for a bad combination
  (with `check`: a sweep's common flags are checked as each run's).

  With --client_fraction, K (clients_per_round) is None until the task's
  clients are known (`RunPlan.settings_for`). Flags a program does not
  define (export has no run flags) take the Config's defaults.
  """
  given = {
    name: holder[name].value
    for name in (*registry.ALGORITHM_FIELDS, *OPTIMIZER_FIELDS)
  }
  clients_per_round = _value(holder, 'clients_per_round')
  client_fraction = _value(holder, 'client_fraction')
  if clients_per_round is not None and client_fraction is not None:
    raise UsageError('give --clients_per_round or --client_fraction, not both')
  if client_fraction is not None:
    if not 0 < client_fraction <= 1:
      raise UsageError(
        f'--client_fraction must be in (0, 1], got {client_fraction}'
      )
  elif clients_per_round is None:
    clients_per_round = _DEFAULTS.clients_per_round
  if (
    _value(holder, 'stop_at_target')
    and _value(holder, 'target_accuracy') is None
  ):
    raise UsageError('--stop_at_target needs --target_accuracy')
  config = config_lib.Config(
    algo=holder.algo,
    task=holder.task,
    rounds=_value(holder, 'rounds', _DEFAULTS.rounds),
    clients_per_round=clients_per_round,
    straggler_fraction=_value(
      holder, 'straggler_fraction', _DEFAULTS.straggler_fraction
    ),
    hparams=_hparams(holder),  # The algorithm's own, given.
    update_spread=_value(holder, 'update_spread', False),
    dissimilarity_every=_value(holder, 'dissimilarity_every', 0),
    eval_every=_value(holder, 'eval_every', _DEFAULTS.eval_every),
    eval_clients=_value(holder, 'eval_clients'),
    stop_at_accuracy=(
      _value(holder, 'target_accuracy')
      if _value(holder, 'stop_at_target')
      else None
    ),
    seed=_value(holder, 'seed', _DEFAULTS.seed),
    data_seed=holder.data_seed,
    data_dir=holder.data_dir,
    train_fraction=holder.train_fraction,
    partition=_value(holder, 'partition'),
    imports=tuple(imports),
    client_execution=_value(
      holder, 'client_execution', _DEFAULTS.client_execution
    ),
    **{
      name: _value(holder, name, getattr(_DEFAULTS, name))
      for name in _AGGREGATION
    },
    **given,
  )
  if not tasks.is_known(config.task):
    raise UsageError(
      f'unknown --task={config.task!r}; known: {", ".join(tasks.task_names())}'
    )
  try:
    if check:
      config_lib.resolve(config)
  except config_lib.ConfigError as e:
    raise UsageError(str(e)) from None
  return config


def task_options(holder):
  """The data flags a task loader takes as options."""
  return {
    name: holder[name].value
    for name in ('embeddings', 'num_clients')
    if name in holder and holder[name].value is not None
  }


def load_task(config, options):
  """The task of `config` (with the task `options`); UsageError when its
  data are missing or bad (one line, before anything runs)."""
  try:
    return tasks.load_task(
      config.task,
      seed=config.data_seed,
      data_dir=config.data_dir,
      train_fraction=config.train_fraction,
      partition=config.partition,
      **options,
    )
  except tasks.DataError as e:
    raise UsageError(str(e)) from None
