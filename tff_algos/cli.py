"""The command-line flags of run_experiment.py and `python -m tff_algos.export`.

Flags are defined in groups (run, algorithm, data, output, sweep); `usage`
prints them with the tasks and algorithms, one line each, without importing
TensorFlow. `config_from_flags` turns parsed flags into a `Config`; a flag
that was not given stays None there ("the algorithm's default").
Imports no TensorFlow.
"""

import dataclasses
import os
import sys
import textwrap

from absl import flags

import tasks
from tff_algos.algorithms import registry  # Registers the algorithms.
from tff_algos.simulation import config as config_lib

FLAGS = flags.FLAGS
_DEFAULTS = config_lib.Config()
_GROUPS = {}  # group → [flag names], in definition order


class UsageError(Exception):
  """A bad flag value: one line on stderr, exit code 2."""


def _define(group, define, name, *args, **kwargs):
  define(name, *args, **kwargs)
  _GROUPS.setdefault(group, []).append(name)


def _algorithm_default(name):
  """'20; fedsgd: 1' for --epochs: the defaults of the registered algorithms."""
  values = {}
  for algo in registry.names():
    entry = registry.get(algo)
    value = entry.fixed.get(name, entry.defaults.get(name))
    if value is not None and not callable(value):
      values.setdefault(value, []).append(algo)
  if not values:
    return ''
  common = max(values, key=lambda v: len(values[v]))
  others = '; '.join(f'{", ".join(algos)}: {v}' for v, algos in values.items()
                     if v != common)
  return f' (default {common}' + (f'; {others}' if others else '') + ')'


def define_algorithm_flags():
  """--algo and the algorithms' hyper-parameters (None: the algorithm's)."""
  a = 'algorithm'
  _define(a, flags.DEFINE_string, 'algo', _DEFAULTS.algo,
          'The federated algorithm (listed above).')
  _define(a, flags.DEFINE_integer, 'epochs', None,
          'Local epochs E' + _algorithm_default('epochs') + '.')
  _define(a, flags.DEFINE_integer, 'batch_size', None,
          'Local minibatch size B; -1 = the whole local dataset (B = ∞)'
          + _algorithm_default('batch_size') + '.')
  _define(a, flags.DEFINE_float, 'client_lr', None,
          'Client SGD learning rate η' + _algorithm_default('client_lr')
          + '; FedSGD\'s η unless --server_lr is given.')
  _define(a, flags.DEFINE_float, 'server_lr', None,
          'Server SGD learning rate on the mean update: 1 = model averaging '
          '(FedAvg/FedProx); FedSGD\'s η; FedISGD\'s initial η_gi.')
  _define(a, flags.DEFINE_float, 'mu', None,
          'FedProx\'s proximal weight μ, FedISGD\'s λ (default 1; FedAvg '
          'and FedSGD have μ = 0).')
  _define(a, flags.DEFINE_bool, 'adaptive_mu', None,
          'FedProx: adapt μ by ±0.1 from the training loss (Li et al. '
          '§5.3.2); --mu is the initial value.')
  _define(a, flags.DEFINE_float, 'server_lr_decay', None,
          'FedISGD: η_g is multiplied by this every --server_lr_decay_every '
          'rounds (default 1: no decay).')
  _define(a, flags.DEFINE_integer, 'server_lr_decay_every', None,
          'FedISGD: rounds between η_g decays (default 1).')
  _define(a, flags.DEFINE_enum, 'straggler_policy', None, ['drop', 'partial'],
          'drop: discard stragglers\' updates (FedAvg, FedSGD); partial: '
          'aggregate their partial work (FedProx, FedISGD).')
  _define(a, flags.DEFINE_enum, 'client_weighting', None,
          ['num_examples', 'uniform'],
          'Weights of the mean of the client models: n_k (default) or 1/K '
          '(FedISGD\'s default).')
  _define(a, flags.DEFINE_multi_string, 'hparam', [],
          'NAME=VALUE: a hyper-parameter of the algorithm\'s own (an '
          'algorithm registered with extra_hparams); repeatable.')


def define_data_flags():
  d = 'data'
  _define(d, flags.DEFINE_string, 'task', _DEFAULTS.task,
          'The task: data and model (listed above).')
  _define(d, flags.DEFINE_string, 'data_dir', None,
          'Dataset tasks: the folder holding their files (default '
          '$TFF_DATA_DIR, else ~/.tff). Synthetic tasks: a LEAF folder with '
          'train/ and test/ JSON to read instead of generating the data.')
  _define(d, flags.DEFINE_integer, 'data_seed', _DEFAULTS.data_seed,
          'Seed of generated data and random splits (fixed by default, so '
          'runs of every --seed share the data).')
  _define(d, flags.DEFINE_float, 'train_fraction', None,
          'Each device\'s share of training examples, for tasks that split '
          'devices themselves (default 0.9; FedISGD used 0.8).')
  _define(d, flags.DEFINE_integer, 'num_clients', None,
          'Dataset tasks that support it: a seeded random subset of this '
          'many clients (quick runs on a CPU).')
  _define(d, flags.DEFINE_string, 'embeddings', None,
          'Sent140: a GloVe-format text file of word embeddings (else '
          'embeddings are trained).')


def define_run_flags():
  r = 'run'
  _define(r, flags.DEFINE_integer, 'rounds', _DEFAULTS.rounds,
          'Communication rounds T.')
  _define(r, flags.DEFINE_integer, 'clients_per_round', None,
          f'Clients K selected per round (default '
          f'{_DEFAULTS.clients_per_round}).')
  _define(r, flags.DEFINE_float, 'client_fraction', None,
          'FedAvg\'s C: select max(⌊C·N⌋, 1) of the N clients per round '
          '(instead of --clients_per_round).')
  _define(r, flags.DEFINE_float, 'straggler_fraction',
          _DEFAULTS.straggler_fraction,
          'Fraction of the selected clients that straggle each round: they '
          'run x ~ U{1..E-1} epochs, fewer than E.')
  _define(r, flags.DEFINE_integer, 'seed', _DEFAULTS.seed,
          'Seed of the initial model, client selection, stragglers and '
          'minibatch order (0..2^32-1).')
  _define(r, flags.DEFINE_string, 'workers', '',
          'Spread the client work over remote TFF workers, host:port,... '
          '(python -m tff_algos.worker; README "Remote workers": their '
          'protocol is unauthenticated). Empty: the local runtime only.')


def define_output_flags():
  o = 'output'
  _define(o, flags.DEFINE_string, 'output_dir', None,
          'The run folder: metrics.csv, config.json, summary.json, '
          'checkpoints/, tensorboard/ (default runs/ALGO_TASK_seedSEED, '
          'found again by the same command).')
  _define(o, flags.DEFINE_bool, 'overwrite', False,
          'Replace the results in an existing --output_dir (a sweep: only '
          'the runs whose folders hold other settings).')
  _define(o, flags.DEFINE_bool, 'replace_other_run', False,
          'Replace the run in --output_dir only if it was run with other '
          'settings (what a sweep\'s --overwrite passes to its runs).')
  _define(o, flags.DEFINE_bool, 'resume', False,
          'Continue the unfinished run in --output_dir (an error if there is '
          'none; the same command without --resume also continues it).')
  _define(o, flags.DEFINE_integer, 'checkpoint_every', 10,
          'Save the program state every N rounds (and after the last).')
  _define(o, flags.DEFINE_integer, 'eval_every', _DEFAULTS.eval_every,
          'Evaluate f(w) and accuracy on all clients every N rounds (and '
          'after the last).')
  _define(o, flags.DEFINE_integer, 'eval_clients', None,
          'Estimate the training loss and accuracy on a fixed random subset '
          'of this many clients (seeded by --seed; the output says so), for '
          'tasks with many clients; the test split is always evaluated in '
          'full (default: all clients).')
  _define(o, flags.DEFINE_integer, 'dissimilarity_every', 0,
          'Write the gradient variance and dissimilarity B(w) every N '
          'rounds (0: never).')
  _define(o, flags.DEFINE_bool, 'update_spread', False,
          'Write the spread of the client updates (1/K)Σ‖u_k − ū‖² every '
          'round (FedISGD always does: its VLG).')
  _define(o, flags.DEFINE_float, 'target_accuracy', None,
          'Report the rounds to reach this test accuracy (FedAvg §3), e.g. '
          '0.99.')
  _define(o, flags.DEFINE_bool, 'stop_at_target', False,
          'End the run at the first evaluated round whose test accuracy '
          'reaches --target_accuracy (all that rounds-to-target tables '
          'need).')
  _define(o, flags.DEFINE_bool, 'progress', True,
          'Show a progress bar on stderr.')
  _define(o, flags.DEFINE_bool, 'dry_run', False,
          'Validate the flags and print the run\'s settings (a sweep: every '
          'run\'s); run nothing.')


def define_sweep_flags():
  s = 'sweep'
  _define(s, flags.DEFINE_multi_string, 'variant', [],
          'One run per variant, "NAME: --flag=value ..." (a table row or '
          'curve; the first is the baseline of the speedup column).')
  _define(s, flags.DEFINE_multi_string, 'sweep', [],
          'Every variant for each value, "FLAG=V1,V2,..."; repeatable '
          '(cartesian product).')
  _define(s, flags.DEFINE_list, 'only', [],
          'Run only these variants (names); the summary still covers '
          'every run of the plan that has results.')


def usage(program, description):
  """The help text: what the program does, the tasks and algorithms, then
  the flags by group."""
  width = 79
  lines = [f'usage: {program} [--flag=value ...]', '',
           textwrap.fill(description, width), '', 'tasks (--task):']
  def item(name, text):
    return textwrap.wrap(f'{name:24s}{text}', width, initial_indent='  ',
                         subsequent_indent=' ' * 26)

  for name, (_, text) in tasks.CATALOG.items():
    lines += item(name, text)
  lines += ['', 'algorithms (--algo):']
  for name in registry.names():
    entry = registry.get(name)
    lines += item(name, f'{entry.summary} ({entry.paper})')
  for group, names in _GROUPS.items():
    lines += ['', f'{group} flags:']
    for name in names:
      flag = FLAGS[name]
      default = (f' [default: {flag.default}]'
                 if flag.default not in (None, '', []) else '')
      lines.append(f'  --{name}')
      text = flag.help.split(';\n')[0]  # absl's "repeat this option" note.
      lines += textwrap.wrap(text + default, width,
                             initial_indent=' ' * 6,
                             subsequent_indent=' ' * 6)
  lines += [''] + textwrap.wrap(
      'Flags can also come from a file: --flagfile=FILE (configs/ holds the '
      'papers\' experiments); flags after it override it. --helpfull lists '
      'absl\'s own flags too.', width)
  return '\n'.join(lines)


def wants_help(argv):
  return any(a in ('-h', '--help', '-help', '--helpshort') for a in argv[1:])


def _hparams():
  values = {}
  for item in FLAGS.hparam:
    name, sep, value = item.partition('=')
    try:
      values[name.strip()] = float(value)
    except ValueError:
      sep = ''
    if not sep or not name.strip():
      raise UsageError(f'--hparam={item!r}: expected NAME=NUMBER')
  return values


def _flag(name, default=None):
  """A flag's value, or `default` where the program does not define it."""
  return FLAGS[name].value if name in FLAGS else default


def config_from_flags() -> config_lib.Config:
  """The Config of the parsed flags; UsageError for a bad combination.

  With --client_fraction, K is 1 for the validation that comes before
  loading data (`with_client_fraction` sets it from the task's clients).
  Flags a program does not define (export has no run flags) take the
  Config's defaults.
  """
  given = {name: FLAGS[name].value for name in registry.ALGORITHM_FIELDS}
  clients_per_round = _flag('clients_per_round')
  client_fraction = _flag('client_fraction')
  if clients_per_round is not None and client_fraction is not None:
    raise UsageError('give --clients_per_round or --client_fraction, not both')
  if clients_per_round is None:
    clients_per_round = _DEFAULTS.clients_per_round
  if client_fraction is not None:
    if not 0 < client_fraction <= 1:
      raise UsageError(f'--client_fraction must be in (0, 1], '
                       f'got {client_fraction}')
    clients_per_round = 1
  if _flag('stop_at_target') and _flag('target_accuracy') is None:
    raise UsageError('--stop_at_target needs --target_accuracy')
  config = config_lib.Config(
      algo=FLAGS.algo, task=FLAGS.task,
      rounds=_flag('rounds', _DEFAULTS.rounds),
      clients_per_round=clients_per_round,
      straggler_fraction=_flag('straggler_fraction',
                               _DEFAULTS.straggler_fraction),
      hparams=_hparams(),
      update_spread=_flag('update_spread', False),
      dissimilarity_every=_flag('dissimilarity_every', 0),
      eval_every=_flag('eval_every', _DEFAULTS.eval_every),
      eval_clients=_flag('eval_clients'),
      stop_at_accuracy=(_flag('target_accuracy') if _flag('stop_at_target')
                        else None),
      seed=_flag('seed', _DEFAULTS.seed), data_seed=FLAGS.data_seed,
      data_dir=FLAGS.data_dir, train_fraction=FLAGS.train_fraction, **given)
  try:
    config.validate()
  except config_lib.ConfigError as e:
    raise UsageError(str(e)) from None
  return config


def check_task():
  if not tasks.is_known(FLAGS.task):
    raise UsageError(f'unknown --task={FLAGS.task!r}; known: '
                     f'{", ".join(tasks.task_names())}')


def task_options():
  """The data flags a task loader takes as options."""
  return {name: FLAGS[name].value for name in ('embeddings', 'num_clients')
          if FLAGS[name].value is not None}


def error(message, code=2):
  """One line on stderr, then exit `code` (2: a usage error, said so)."""
  prefix = 'error: ' if code == 2 else ''
  print(f'{os.path.basename(sys.argv[0])}: {prefix}{message}',
        file=sys.stderr)
  sys.exit(code)


def load_task_or_exit(config, options):
  """The task of `config` (with the task `options`), or one line on stderr
  and exit code 2 when its data is missing or bad."""
  import tasks  # pylint: disable=g-import-not-at-top
  try:
    return tasks.load_task(config.task, seed=config.data_seed,
                           data_dir=config.data_dir,
                           train_fraction=config.train_fraction, **options)
  except tasks.DataError as e:
    error(e)


def clients_for_fraction(fraction, num_clients):
  """K = max(⌊C·N⌋, 1) (FedAvg §3: a fraction C of the N clients)."""
  return max(int(fraction * num_clients + 1e-9), 1)


def with_client_fraction(config, fraction, num_clients):
  """`config` with K from --client_fraction `fraction` of the task's
  `num_clients` (`config` itself when the flag was not given)."""
  if fraction is None:
    return config
  return dataclasses.replace(
      config, clients_per_round=clients_for_fraction(fraction, num_clients))


def describe(config):
  """The run's settings as a dict (for --dry_run)."""
  return dataclasses.asdict(config.resolved())

