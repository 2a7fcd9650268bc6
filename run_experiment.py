"""Runs one federated training experiment and writes OUTPUT_DIR/metrics.csv.

  python run_experiment.py --algo=fedprox --task=synthetic_1_1 --rounds=200 \\
      --clients_per_round=10 --epochs=20 --batch_size=10 --client_lr=0.01 \\
      --mu=1 --straggler_fraction=0.5 --seed=0 --output_dir=runs/fedprox

Flags can also come from a file: --flagfile=configs/fedprox/synthetic_1_1.flags
(flags given after it on the command line override the file). Invalid flag
values give one line on stderr and exit code 2, and write nothing.

The program state is checkpointed every --checkpoint_every rounds: the same
command on the same --output_dir continues an interrupted run (--resume says
so explicitly), leaves a finished one alone, and refuses one with another
config unless --overwrite. A flag file with --variant/--sweep flags runs a
whole sweep and writes summary.md/summary.csv (see tff_algos/sweep.py):

  python run_experiment.py --flagfile=configs/fedprox/fig1_synthetic_1_1.flags
"""

import dataclasses
import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # TF's import chatter.

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

# TensorFlow (Keras) must be imported before absl's app.run: imported inside
# main(), Keras fails to build Sequential models.
import tasks  # pylint: disable=g-import-not-at-top
from tff_algos import config as config_lib  # pylint: disable=g-import-not-at-top
from tff_algos import experiment  # pylint: disable=g-import-not-at-top
from tff_algos import runtime  # pylint: disable=g-import-not-at-top
from tff_algos import sweep  # pylint: disable=g-import-not-at-top

_DEFAULTS = config_lib.Config()
FLAGS = flags.FLAGS
flags.DEFINE_enum('algo', _DEFAULTS.algo, config_lib.ALGORITHMS,
                  'Federated algorithm.')
flags.DEFINE_string('task', _DEFAULTS.task,
                    'Task: synthetic_A_B (FedProx Synthetic(A,B)), '
                    'synthetic_iid, or a dataset task (see tasks/).')
flags.DEFINE_integer('rounds', _DEFAULTS.rounds, 'Communication rounds T.')
flags.DEFINE_integer('clients_per_round', None,
                     f'Clients K selected per round (default '
                     f'{_DEFAULTS.clients_per_round}).')
flags.DEFINE_float('client_fraction', None,
                   'FedAvg\'s C: select max(⌊C·N⌋, 1) of the N clients per '
                   'round (instead of --clients_per_round).')
flags.DEFINE_integer('epochs', None, f'Local epochs E (default '
                     f'{_DEFAULTS.epochs}; FedSGD: 1).')
flags.DEFINE_integer('batch_size', None, f'Local minibatch size B; -1 = the '
                     f'whole local dataset (default {_DEFAULTS.batch_size}; '
                     'FedSGD: -1).')
flags.DEFINE_float('client_lr', _DEFAULTS.client_lr,
                   'Client SGD learning rate (FedSGD: its η unless '
                   '--server_lr is given).')
flags.DEFINE_float('server_lr', None,
                   'Server SGD learning rate: 1 = model averaging for '
                   'FedAvg/FedProx; FedISGD\'s initial η_gi.')
flags.DEFINE_float('server_lr_decay', _DEFAULTS.server_lr_decay,
                   'FedISGD: η_g is multiplied by this every '
                   '--server_lr_decay_every rounds.')
flags.DEFINE_integer('server_lr_decay_every', _DEFAULTS.server_lr_decay_every,
                     'FedISGD: rounds between η_g decays.')
flags.DEFINE_float('mu', None, f'FedProx proximal weight μ, FedISGD λ '
                   f'(default {_DEFAULTS.mu}); not for fedavg/fedsgd.')
flags.DEFINE_bool('adaptive_mu', False,
                  'FedProx: adapt μ by ±0.1 from the training loss '
                  '(Li et al. §5.3.2); --mu is the initial value.')
flags.DEFINE_float('straggler_fraction', 0.0,
                   'Fraction of the selected clients that are stragglers '
                   'each round (they run x ~ U{1..E-1} epochs: fewer than E).')
flags.DEFINE_enum('straggler_policy', None, ['drop', 'partial'],
                  'drop: discard stragglers\' updates (FedAvg\'s default); '
                  'partial: aggregate their partial work (FedProx/FedISGD).')
flags.DEFINE_enum('client_weighting', None, ['num_examples', 'uniform'],
                  'Weights of the client-model mean: n_k (default) or 1/K '
                  '(FedISGD\'s default).')
flags.DEFINE_integer('dissimilarity_every', 0,
                     'Log gradient variance and B(w) every N rounds (0: off).')
flags.DEFINE_integer('eval_every', 1, 'Evaluate on all clients every N '
                     'rounds (and after the last).')
flags.DEFINE_integer('seed', 0, 'Seed of the initial model, client '
                     'selection, stragglers and minibatch order.')
flags.DEFINE_integer('data_seed', 0, 'Seed of the generated synthetic data '
                     '(fixed by default so all --seed values share data).')
flags.DEFINE_string('data_dir', None, 'Dataset tasks: the folder holding '
                    'their files (default $TFF_DATA_DIR, else ~/.tff). '
                    'Synthetic tasks: a LEAF folder with train/ and test/ '
                    'JSON to read instead of generating the data.')
flags.DEFINE_string('embeddings', None, 'Sent140: a GloVe-format text file '
                    'of word embeddings (else embeddings are trained).')
flags.DEFINE_integer('num_clients', None, 'Dataset tasks that support it: '
                     'use a seeded random subset of this many clients '
                     '(quick runs on a CPU).')
flags.DEFINE_float('train_fraction', None, 'Generated synthetic data: '
                   'share of each client\'s samples used for training '
                   '(default 0.9 as FedProx; FedISGD used 0.8).')
flags.DEFINE_string('output_dir', None, 'Where metrics.csv, config.json and '
                    'summary.json go (default: a new runs/ALGO_TASK_seedSEED '
                    'folder, suffixed -2, -3, … rather than reusing one).')
flags.DEFINE_bool('overwrite', False, 'Replace the results in an existing '
                  '--output_dir.')
flags.DEFINE_bool('progress', True, 'Show a progress bar on stderr.')
flags.DEFINE_string('workers', '', 'Spread the client work over remote TFF '
                    'workers, host:port,... (python -m tff_algos.worker; '
                    'README "Remote workers": their protocol is '
                    'unauthenticated). Empty: the local runtime only.')
flags.DEFINE_integer('checkpoint_every', 10, 'Save the program state every N '
                     'rounds (and after the last) under OUTPUT_DIR/'
                     'checkpoints; a re-run on the same --output_dir resumes.')
flags.DEFINE_bool('resume', False, 'Continue the unfinished run in '
                  '--output_dir (an error if there is none; the same command '
                  'without --resume also continues it).')
flags.DEFINE_float('target_accuracy', None, 'Report the rounds to reach this '
                   'test accuracy (FedAvg §3), e.g. 0.99.')
flags.DEFINE_multi_string('variant', [], 'A sweep: one run per variant, '
                          '"NAME: --flag=value ..." (see tff_algos/sweep.py).')
flags.DEFINE_list('only', [], 'A sweep: run only these variants (names).')
flags.DEFINE_bool('dry_run', False, 'Validate the flags and print the run\'s '
                  'config (a sweep: its runs\' folders and flags); run nothing.')
flags.DEFINE_multi_string('sweep', [], 'A sweep: run every variant for each '
                          'value, "FLAG=V1,V2,..." (repeatable: cartesian).')


def usage_error(message):
  print(f'run_experiment.py: error: {message}', file=sys.stderr)
  sys.exit(2)


def config_from_flags(num_clients=None):
  """Config from FLAGS; per-algorithm defaults where a flag was not given."""
  fedsgd = FLAGS.algo == 'fedsgd'
  if FLAGS.mu is not None and FLAGS.mu != 0 and FLAGS.algo in (
      'fedavg', 'fedsgd'):
    usage_error(f'--mu is not a {FLAGS.algo} hyper-parameter; use '
                '--algo=fedprox (μ = 0 is FedAvg)')
  if FLAGS.clients_per_round is not None and FLAGS.client_fraction is not None:
    usage_error('give --clients_per_round or --client_fraction, not both')
  clients_per_round = FLAGS.clients_per_round or _DEFAULTS.clients_per_round
  if FLAGS.client_fraction is not None:
    if not 0 < FLAGS.client_fraction <= 1:
      usage_error(f'--client_fraction must be in (0, 1], '
                  f'got {FLAGS.client_fraction}')
    clients_per_round = max(int(FLAGS.client_fraction * num_clients + 1e-9),
                            1)

  def pick(value, default, fedsgd_default):
    if value is not None:
      return value
    return fedsgd_default if fedsgd else default

  return config_lib.Config(
      algo=FLAGS.algo, task=FLAGS.task, rounds=FLAGS.rounds,
      clients_per_round=clients_per_round,
      epochs=pick(FLAGS.epochs, _DEFAULTS.epochs, 1),
      batch_size=pick(FLAGS.batch_size, _DEFAULTS.batch_size, -1),
      client_lr=FLAGS.client_lr, server_lr=FLAGS.server_lr,
      mu=_DEFAULTS.mu if FLAGS.mu is None else FLAGS.mu,
      adaptive_mu=FLAGS.adaptive_mu,
      straggler_fraction=FLAGS.straggler_fraction,
      straggler_policy=FLAGS.straggler_policy,
      server_lr_decay=FLAGS.server_lr_decay,
      server_lr_decay_every=FLAGS.server_lr_decay_every,
      client_weighting=FLAGS.client_weighting,
      dissimilarity_every=FLAGS.dissimilarity_every,
      eval_every=FLAGS.eval_every, seed=FLAGS.seed,
      data_seed=FLAGS.data_seed, data_dir=FLAGS.data_dir,
      train_fraction=FLAGS.train_fraction)


def fresh_output_dir(config):
  """runs/ALGO_TASK_seedSEED, or with -2, -3, … if that already exists."""
  base = os.path.join('runs', f'{config.algo}_{config.task}_seed{config.seed}')
  candidate, n = base, 1
  while os.path.exists(candidate):
    n += 1
    candidate = f'{base}-{n}'
  return candidate


def checked_config():
  """The Config of the flags, or a usage error (before any data is read)."""
  if not tasks.is_known(FLAGS.task):
    usage_error(f'unknown --task={FLAGS.task!r}; known: '
                f'{", ".join(tasks.task_names())}')
  if FLAGS.checkpoint_every < 1:
    usage_error('--checkpoint_every must be >= 1')
  try:
    runtime.parse_workers(FLAGS.workers)
  except ValueError as e:
    usage_error(e)
  if FLAGS.target_accuracy is not None and not 0 < FLAGS.target_accuracy <= 1:
    usage_error(f'--target_accuracy must be in (0, 1], '
                f'got {FLAGS.target_accuracy}')
  try:
    config = config_from_flags(num_clients=1)
    config.validate()
  except config_lib.ConfigError as e:
    usage_error(e)
  return config


def sweep_plan(argv0):
  """(runs, shared flags) of a --variant/--sweep command line.

  Every run's flags are parsed and validated first: a bad one is a usage
  error before anything runs. Leaves FLAGS parsed as the last run's.
  """
  try:
    runs = sweep.expand(FLAGS.variant, FLAGS.sweep, FLAGS.only)
  except ValueError as e:
    usage_error(e)
  own = ('--variant', '--sweep', '--only', '--output_dir')
  common = [a for a in _ARGV if a.split('=')[0] not in own]
  if any(a in own for a in _ARGV):  # "--output_dir out" (two words).
    usage_error('write sweep flags as --flag=value')
  for run in runs:
    FLAGS.unparse_flags()
    parse_flags([argv0, *common, *run.args])
    if FLAGS.variant or FLAGS.sweep:
      usage_error(f'variant {run.variant}: --variant/--sweep inside a variant')
    checked_config()
  return runs, common


def run_sweep(argv0):
  """--variant/--sweep: every run in its own process, then the summary."""
  if FLAGS.resume or FLAGS.overwrite:
    usage_error('a sweep resumes by itself; give --resume/--overwrite to '
                'single runs only')
  output_dir = FLAGS.output_dir or os.path.join(
      'runs', _FLAGFILES[-1] if _FLAGFILES else 'sweep')
  target, dry_run = FLAGS.target_accuracy, FLAGS.dry_run
  runs, common = sweep_plan(argv0)
  if dry_run:
    for run in runs:
      print(os.path.join(output_dir, run.name), *run.args)
    return
  os.makedirs(output_dir, exist_ok=True)
  codes = sweep.run_all(runs, common, output_dir, argv0)
  rows = sweep.table(runs, output_dir, target)
  print('\n'.join(sweep.write_summary(rows, output_dir, target)))
  sweep.plot_runs(runs, output_dir, target)
  failed = [f'{name} (exit {code})' for name, code in codes.items() if code]
  if failed or len(codes) < len(runs):
    print(f'run_experiment.py: {len(runs) - len(codes) + len(failed)} of '
          f'{len(runs)} runs did not finish: {", ".join(failed)}',
          file=sys.stderr)
    sys.exit(1)


def main(argv):
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    usage_error(f'unexpected arguments: {" ".join(argv[1:])}')
  if FLAGS.variant or FLAGS.sweep:
    return run_sweep(argv[0])
  if FLAGS.only:
    usage_error('--only selects variants of a sweep (--variant flags)')
  config = checked_config()
  if FLAGS.dry_run:
    print(json.dumps(dataclasses.asdict(config), indent=2))
    return
  if FLAGS.resume and (FLAGS.overwrite or not FLAGS.output_dir):
    usage_error('--resume needs the --output_dir of the run, and no '
                '--overwrite')
  output_dir = FLAGS.output_dir or fresh_output_dir(config)

  try:
    options = {name: FLAGS[name].value for name in ('embeddings', 'num_clients')
               if FLAGS[name].value is not None}
    task = tasks.load_task(config.task, seed=config.data_seed,
                           data_dir=config.data_dir,
                           train_fraction=config.train_fraction, **options)
    if FLAGS.client_fraction is not None:
      config = dataclasses.replace(config, clients_per_round=config_from_flags(
          len(task.client_ids)).clients_per_round)
    config.validate(num_clients=len(task.client_ids))
    if FLAGS.overwrite:
      experiment.remove_outputs(output_dir)
    status = experiment.output_dir_status(output_dir, config)
    if FLAGS.resume and status == 'new':
      usage_error(f'--resume: {output_dir} holds no run to resume')
    if status == 'finished':
      print(f'{output_dir} already holds this finished run (--overwrite '
            'runs it again)', file=sys.stderr)
      print(open(os.path.join(output_dir, experiment.SUMMARY_FILE)).read())
      return
    runtime.start(workers=FLAGS.workers)
    print(f'{config.algo} on {task.description}: {len(task.client_ids)} '
          f'clients, K={config.clients_per_round}, E={config.epochs}, '
          f'B={config.batch_size}, {config.rounds} rounds → {output_dir}' +
          (' (resuming)' if status == 'resume' else ''), file=sys.stderr)
    experiment.run(config, task, output_dir, show_progress=FLAGS.progress,
                   checkpoint_every=FLAGS.checkpoint_every,
                   target_accuracy=FLAGS.target_accuracy)
  except (config_lib.ConfigError, tasks.DataError) as e:
    usage_error(e)
  except (runtime.WorkerError, experiment.NonFiniteLoss) as e:
    print(f'run_experiment.py: stopped: {e}', file=sys.stderr)
    sys.exit(1)
  finally:
    runtime.stop()
  print(open(os.path.join(output_dir, experiment.SUMMARY_FILE)).read())


_ARGV = []  # The command line's flags, --flagfile expanded (for sweeps),
_FLAGFILES = []  # and the names of its flag files (without .flags).


def parse_flags(argv):
  """absl's parser, but a bad flag is one line on stderr and exit code 2."""
  try:
    if not _ARGV:
      _ARGV.extend(FLAGS.read_flags_from_files(argv[1:], force_gnu=False))
      _FLAGFILES.extend(
          os.path.splitext(os.path.basename(a.split('=', 1)[1]))[0]
          for a in argv[1:] if a.startswith('--flagfile='))
    return FLAGS(argv)
  except flags.Error as e:
    usage_error(e)


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
