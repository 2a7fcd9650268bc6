"""Runs one federated training experiment, or a sweep of them.

  python run_experiment.py --algo=fedprox --task=synthetic_1_1 --rounds=200 \\
      --clients_per_round=10 --epochs=20 --batch_size=10 --client_lr=0.01 \\
      --mu=1 --straggler_fraction=0.5 --seed=0 --output_dir=runs/fedprox
  python run_experiment.py --flagfile=configs/fedprox/fig1_synthetic_1_1.flags

Writes a run folder (metrics.csv, config.json, summary.json, checkpoints/,
tensorboard/). The same command on the same folder continues an
interrupted run, leaves a finished one alone and refuses one with other
settings unless --overwrite. Flags after a --flagfile override it. A
command with --variant/--sweep flags runs a sweep: every run in its own
process and folder, then summary.md/summary.csv and plots.
Bad flag values: one line on stderr, exit code 2, nothing written.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # TF's import chatter.

from absl import flags  # pylint: disable=g-import-not-at-top

from tff_algos import cli  # pylint: disable=g-import-not-at-top
from tff_algos.analysis import sweep  # pylint: disable=g-import-not-at-top
from tff_algos.runtime import addresses  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
cli.define_run_flags()
cli.define_algorithm_flags()
cli.define_data_flags()
cli.define_output_flags()
cli.define_sweep_flags()

DESCRIPTION = ('Train a federated algorithm on a task in simulation and '
               'write a run folder; with --variant/--sweep, a sweep of runs '
               'and its summary.')
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
    cli.error(e)


def checked_config():
  """The Config of the flags, or a usage error (before any data is read)."""
  try:
    cli.check_task()
    if FLAGS.checkpoint_every < 1:
      raise cli.UsageError('--checkpoint_every must be >= 1')
    addresses.parse_workers(FLAGS.workers)
    if FLAGS.target_accuracy is not None and not (
        0 < FLAGS.target_accuracy <= 1):
      raise cli.UsageError(f'--target_accuracy must be in (0, 1], '
                           f'got {FLAGS.target_accuracy}')
    return cli.config_from_flags()
  except (cli.UsageError, ValueError) as e:
    cli.error(e)


def sweep_plan(argv0):
  """(runs, shared flags) of a --variant/--sweep command line.

  Every run's flags are parsed and validated first: a bad one is a usage
  error before anything runs. Leaves FLAGS parsed as the last run's.
  """
  try:
    runs = sweep.expand(FLAGS.variant, FLAGS.sweep, FLAGS.only)
  except ValueError as e:
    cli.error(e)
  own = ('--variant', '--sweep', '--only', '--output_dir')
  common = [a for a in _ARGV if a.split('=')[0] not in own]
  if any(a in own for a in _ARGV):  # "--output_dir out" (two words).
    cli.error('write sweep flags as --flag=value')
  for run in runs:
    FLAGS.unparse_flags()
    parse_flags([argv0, *common, *run.args])
    if FLAGS.variant or FLAGS.sweep:
      cli.error(f'variant {run.variant}: --variant/--sweep inside a variant')
    checked_config()
  return runs, common


def run_sweep(argv0):
  """--variant/--sweep: every run in its own process, then the summary."""
  if FLAGS.resume or FLAGS.overwrite:
    cli.error('a sweep resumes by itself; give --resume/--overwrite to '
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


def fresh_output_dir(config):
  """runs/ALGO_TASK_seedSEED, or with -2, -3, … if that already exists."""
  base = os.path.join('runs', f'{config.algo}_{config.task}_seed{config.seed}')
  candidate, n = base, 1
  while os.path.exists(candidate):
    n += 1
    candidate = f'{base}-{n}'
  return candidate


def run_single():
  """One run into its folder."""
  config = checked_config()
  if FLAGS.dry_run:
    print(json.dumps(cli.describe(config), indent=2))
    return
  if FLAGS.resume and (FLAGS.overwrite or not FLAGS.output_dir):
    cli.error('--resume needs the --output_dir of the run, and no '
              '--overwrite')
  output_dir = FLAGS.output_dir or fresh_output_dir(config)
  # TensorFlow from here on.
  import dataclasses  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import experiment  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import run_dir  # pylint: disable=g-import-not-at-top
  runtime.install()
  try:
    task = tasks.load_task(config.task, seed=config.data_seed,
                           data_dir=config.data_dir,
                           train_fraction=config.train_fraction,
                           **cli.task_options())
    if FLAGS.client_fraction is not None:
      config = dataclasses.replace(config, clients_per_round=(
          cli.config_from_flags(len(task.client_ids)).clients_per_round))
    config = dataclasses.replace(config, task=task.name)
    config.validate(num_clients=len(task.client_ids))
    folder = run_dir.RunDir(output_dir, config)
    if FLAGS.overwrite:
      folder.remove_outputs()
    status = folder.status()
    if FLAGS.resume and status == 'new':
      cli.error(f'--resume: {output_dir} holds no run to resume')
    if status == 'finished':
      print(f'{output_dir} already holds this finished run (--overwrite '
            'runs it again)', file=sys.stderr)
      print(open(os.path.join(output_dir, run_dir.SUMMARY_FILE)).read())
      return
    runtime.start(workers=FLAGS.workers)
    resolved = config.resolved()
    print(f'{config.algo} on {task.description}: {len(task.client_ids)} '
          f'clients, K={config.clients_per_round}, E={resolved.epochs}, '
          f'B={resolved.batch_size}, {config.rounds} rounds → {output_dir}' +
          (' (resuming)' if status == 'resume' else ''), file=sys.stderr)
    experiment.run(config, task, output_dir, show_progress=FLAGS.progress,
                   checkpoint_every=FLAGS.checkpoint_every,
                   target_accuracy=FLAGS.target_accuracy)
  except (config_lib.ConfigError, tasks.DataError, cli.UsageError) as e:
    cli.error(e)
  except (runtime.WorkerError, experiment.NonFiniteLoss) as e:
    print(f'run_experiment.py: stopped: {e}', file=sys.stderr)
    sys.exit(1)
  finally:
    runtime.stop()
  print(open(os.path.join(output_dir, run_dir.SUMMARY_FILE)).read())


def main(argv):
  if cli.wants_help(argv):
    print(cli.usage(os.path.basename(argv[0]), DESCRIPTION))
    return
  rest = parse_flags(argv)
  if len(rest) > 1:
    cli.error(f'unexpected arguments: {" ".join(rest[1:])}')
  if FLAGS.variant or FLAGS.sweep:
    return run_sweep(argv[0])
  if FLAGS.only:
    cli.error('--only selects variants of a sweep (--variant flags)')
  run_single()


if __name__ == '__main__':
  main(sys.argv)
