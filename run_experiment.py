"""Runs one federated training experiment, or a sweep of them.

  python run_experiment.py --algo=fedprox --task=synthetic_1_1 --rounds=200 \\
      --clients_per_round=10 --epochs=20 --batch_size=10 --client_lr=0.01 \\
      --mu=1 --straggler_fraction=0.5 --seed=0 --output_dir=runs/fedprox
  python run_experiment.py --flagfile=configs/fedprox/fig1_synthetic_1_1.flags

Writes a run folder (metrics.csv, config.json, summary.json, checkpoints/,
tensorboard/). The same command continues an interrupted run (found again
without --output_dir too), leaves a finished one alone and refuses one with
other settings unless --overwrite. Flags after a --flagfile override it. A
command with --variant/--sweep flags runs a sweep: every run in its own
process and folder, then summary.md/summary.csv and plots.
Bad input: one line on stderr, exit code 2, nothing written. A run that
stops (divergence, a lost worker, a full disk): one line, exit code 1, the
rows and checkpoints so far kept. Ctrl-C: one line, exit code 130.
"""

import contextlib
import dataclasses
import errno
import json
import os
import signal
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # TF's import chatter.
os.environ.setdefault('GRPC_ENABLE_FORK_SUPPORT', '0')  # gRPC's fork notes.

from absl import flags  # pylint: disable=g-import-not-at-top

from tff_algos import cli  # pylint: disable=g-import-not-at-top
from tff_algos.analysis import results  # pylint: disable=g-import-not-at-top
from tff_algos.analysis import sweep  # pylint: disable=g-import-not-at-top
from tff_algos.runtime import addresses  # pylint: disable=g-import-not-at-top
from tff_algos.simulation import run_dir  # pylint: disable=g-import-not-at-top

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
_TYPED = []  # The command line as typed (flag files not expanded).


def reset_command_line():
  """Forgets the parsed command line (to parse another in this process, as
  the tests and notebooks do)."""
  for parsed in (_ARGV, _FLAGFILES, _TYPED):
    parsed.clear()
  FLAGS.unparse_flags()


def parse_flags(argv):
  """absl's parser, but a bad flag is one line on stderr and exit code 2."""
  try:
    if not _ARGV:
      _TYPED.extend(argv[1:])
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
    if FLAGS.resume and (FLAGS.overwrite or not FLAGS.output_dir):
      raise cli.UsageError('--resume needs the --output_dir of the run, and '
                           'no --overwrite')
    return cli.config_from_flags()
  except (cli.UsageError, ValueError) as e:
    cli.error(e)


def sweep_plan(argv0):
  """(runs, shared flags, each run's (Config, task options, its
  --client_fraction)) of a --variant/--sweep command line.

  Every run's flags are parsed and validated first: a bad one is a usage
  error before anything runs. Leaves FLAGS parsed as the last run's.
  """
  typed = [a.split('=', 1)[1].split(':', 1)[0].strip() for a in _TYPED
           if a.startswith('--variant=')]
  twice = sorted({name for name in typed if typed.count(name) > 1})
  if twice:  # A --variant replaces one of a --flagfile, not one typed.
    cli.error(f'--variant {twice[0]} given twice on the command line')
  try:
    runs = sweep.expand(FLAGS.variant, FLAGS.sweep, FLAGS.only)
  except ValueError as e:
    cli.error(e)
  own = ('--variant', '--sweep', '--only', '--output_dir', '--overwrite',
         '--dry_run')
  common = [a for a in _ARGV if a.split('=')[0] not in own]
  if any(a in ('--variant', '--sweep', '--only', '--output_dir')
         for a in _ARGV):  # "--output_dir out" (two words).
    cli.error('write sweep flags as --flag=value')
  settings = []
  for run in runs:
    FLAGS.unparse_flags()
    parse_flags([argv0, *common, *run.args])
    if FLAGS.variant or FLAGS.sweep:
      cli.error(f'variant {run.variant}: --variant/--sweep inside a variant')
    settings.append((checked_config(), cli.task_options(),
                     FLAGS.client_fraction))
  return runs, common, settings


def check_data_loads(settings):
  """Loads each distinct dataset of `settings` ((Config, task options,
  --client_fraction) each) once, for a dry run: one line per dataset, or a
  usage error naming the first that does not load. Returns the Configs with
  K as the runs will use it (--client_fraction of the task's clients)."""
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()
  num_clients, configs = {}, []
  for config, options, fraction in settings:
    key = (config.task, config.data_seed, config.data_dir,
           config.train_fraction, tuple(sorted(options.items())))
    if key not in num_clients:
      task = cli.load_task_or_exit(config, options)
      num_clients[key] = len(task.client_ids)
      print(f'data: {task.name}: {num_clients[key]} clients '
            f'({task.description})', file=sys.stderr)
    config = cli.with_client_fraction(config, fraction, num_clients[key])
    try:
      config.validate(num_clients=num_clients[key])
    except ValueError as e:
      cli.error(e)
    configs.append(config)
  return configs


def _holds_finished(path, setting):
  """Whether the folder `path` holds the finished run of `setting` ((Config,
  task options, --client_fraction) as planned), so that a sweep need not
  start its process to find out: the run's own check (RunDir.status), with
  K from the client count the run recorded. Any doubt is False: the run's
  process then decides."""
  config, _, fraction = setting
  try:
    summary = results.read_json(path, run_dir.SUMMARY_FILE)
  except (OSError, ValueError):
    return False
  if not summary:
    return False
  config = cli.with_client_fraction(config, fraction,
                                    summary.get('num_clients') or 0)
  try:
    return run_dir.RunDir(path, config).status() == 'finished'
  except run_dir.OutputDirError:
    return False


def run_sweep(argv0):
  """--variant/--sweep: every run in its own process, then the summary."""
  if FLAGS.resume:
    cli.error('a sweep resumes by itself; give --resume to single runs only')
  output_dir = FLAGS.output_dir or os.path.join(
      'runs', _FLAGFILES[-1] if _FLAGFILES else 'sweep')
  target, dry_run = FLAGS.target_accuracy, FLAGS.dry_run
  overwrite = FLAGS.overwrite
  variants, sweeps = list(FLAGS.variant), list(FLAGS.sweep)
  runs, common, settings = sweep_plan(argv0)
  if dry_run:
    configs = check_data_loads(settings)
    for run, config, (_, options, _) in zip(runs, configs, settings):
      print(os.path.join(output_dir, run.name), json.dumps(
          {**cli.describe(config), **options}, sort_keys=True))
    return
  try:
    run_dir.check_usable(output_dir)
    with run_dir.RunDir(output_dir, None).hold():
      planned = {run.name: setting for run, setting in zip(runs, settings)}
      codes = sweep.run_all(
          runs, common + (['--replace_other_run'] if overwrite else []),
          output_dir, argv0,
          finished=lambda run, path: _holds_finished(path, planned[run.name]))
      # The summary and plots cover the command's whole plan: runs left out
      # by --only but already in the folder keep their rows.
      plan = sweep.expand(variants, sweeps)
      rows = sweep.table(plan, output_dir, target)
      lines = sweep.write_summary(rows, output_dir, target, plan)
      if lines is None:
        print(f'run_experiment.py: kept {output_dir}/summary.csv and its '
              'plots: they cover more runs than the '
              f'{sum(1 for r in rows if "rounds" in r)} of this command that '
              'have results', file=sys.stderr)
      else:
        print('\n'.join(lines))
        sweep.plot_runs(plan, output_dir, target)
  except run_dir.OutputDirError as e:
    cli.error(e)
  except sweep.Interrupted as e:
    print(f'run_experiment.py: {e}; run the same command to resume',
          file=sys.stderr)
    sys.exit(128 + e.signum)
  failed = [f'{name} (exit {code})' for name, code in codes.items() if code]
  if failed == [f'{list(codes)[-1]} (exit 2)']:
    sys.exit(2)  # Its one line said why (bad input); nothing after it ran.
  if len(codes) < len(runs):
    failed.append(f'{len(runs) - len(codes)} not started')
  if failed:
    print(f'run_experiment.py: {len(runs) - len(codes) + sum(map(bool, codes.values()))} of '
          f'{len(runs)} runs did not finish: {", ".join(failed)}',
          file=sys.stderr)
    sys.exit(1)


def default_output_dir(config):
  """runs/ALGO_TASK_seedSEED, or -2, -3, …: the first folder that holds
  this run (to resume, or a finished one), else the first free one."""
  base = os.path.join('runs', f'{config.algo}_{config.task}_seed{config.seed}')
  candidate, n = base, 1
  while os.path.exists(candidate):
    try:
      run_dir.RunDir(candidate, config).status()
      return candidate  # This run: resume it, or leave it alone.
    except run_dir.OutputDirError:
      n += 1
      candidate = f'{base}-{n}'
  return candidate


def _no_space(error):
  """The file a full disk stopped writing, from `error`'s chain (an OSError
  ENOSPC or EDQUOT, or the ResourceExhaustedError 'FILE; No space left on
  device' of TensorFlow's file API, which TFF's release managers use), or
  None when the disk was not full."""
  while error is not None:
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC,
                                                      errno.EDQUOT):
      return error.filename or FLAGS.output_dir
    if (type(error).__name__ == 'ResourceExhaustedError' and
        'No space left on device' in str(error)):
      return str(error).split(';')[0].strip() or FLAGS.output_dir
    error = error.__cause__ or error.__context__
  return None


@contextlib.contextmanager
def _terminate_as_interrupt():
  """SIGTERM unwinds like Ctrl-C (a KeyboardInterrupt carrying the signal);
  both also stop the training loop at the end of the round, should Python
  swallow the exception (one raised inside a garbage-collector callback)."""
  from tff_algos.simulation import loop  # pylint: disable=g-import-not-at-top

  def on_signal(signum, frame):
    del frame
    raise loop.request_stop(signum)

  previous = {s: signal.signal(s, on_signal)
              for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


def run_single():
  """One run into its folder."""
  config = checked_config()
  if FLAGS.dry_run:
    config, = check_data_loads(
        [(config, cli.task_options(), FLAGS.client_fraction)])
    print(json.dumps({**cli.describe(config), **cli.task_options()},
                     indent=2, sort_keys=True))
    return
  try:
    run_dir.check_usable(FLAGS.output_dir or 'runs')
  except run_dir.OutputDirError as e:
    cli.error(e)
  # TensorFlow from here on.
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  runtime.prepare()  # Issue 22: before TensorFlow is imported (start-up).
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import experiment  # pylint: disable=g-import-not-at-top
  runtime.install()
  round_started = None  # The run's folder once training has started.
  with _terminate_as_interrupt():
    try:
      task = cli.load_task_or_exit(config, cli.task_options())
      config = dataclasses.replace(
          cli.with_client_fraction(config, FLAGS.client_fraction,
                                   len(task.client_ids)), task=task.name)
      config.validate(num_clients=len(task.client_ids))
      output_dir = FLAGS.output_dir or default_output_dir(config)
      folder = run_dir.RunDir(output_dir, config)
      with folder.hold():
        if FLAGS.overwrite:
          folder.remove_outputs()
        try:
          status = folder.status()
        except run_dir.OutputDirError:
          if not FLAGS.replace_other_run:
            raise
          folder.remove_outputs()
          status = folder.status()
        if FLAGS.resume and status == 'new':
          raise cli.UsageError(f'--resume: {output_dir} holds no run to '
                               'resume')
        if status == 'finished':
          print(f'{output_dir} already holds this finished run '
                '(--overwrite runs it again)', file=sys.stderr)
          print(open(os.path.join(output_dir, run_dir.SUMMARY_FILE)).read())
          return
        runtime.start(workers=FLAGS.workers, log_path=folder.worker_log,
                      wait=False)  # It starts while the process is built.
        resolved = config.resolved()
        evaluated = ('' if config.eval_clients is None else
                     f', train metrics over {config.eval_clients} clients')
        print(f'{config.algo} on {task.description}: '
              f'{len(task.client_ids)} clients, K={config.clients_per_round},'
              f' E={resolved.epochs}, B={resolved.batch_size}, '
              f'{config.rounds} rounds, seed {config.seed} (data seed '
              f'{config.data_seed}){evaluated} → {output_dir}' +
              (' (resuming)' if status == 'resume' else ''), file=sys.stderr)
        round_started = output_dir
        experiment.run(config, task, output_dir, show_progress=FLAGS.progress,
                       checkpoint_every=FLAGS.checkpoint_every,
                       target_accuracy=FLAGS.target_accuracy)
    except (config_lib.ConfigError, tasks.DataError, cli.UsageError) as e:
      cli.error(e)
    except (runtime.WorkerError, experiment.Diverged) as e:
      resume = ('; run the same command to resume' if round_started and
                isinstance(e, runtime.WorkerError) else '')
      cli.error(f'stopped: {e}{resume}', code=1)
    except KeyboardInterrupt as e:
      where = (f'at round {e.round_num}' if hasattr(e, 'round_num') else
               'before the first round')
      signum = getattr(e, 'signum', signal.SIGINT)
      name = 'interrupted' if signum == signal.SIGINT else 'terminated'
      cli.error(f'{name} {where}; run the same command to resume',
                code=128 + signum)
    except Exception as e:  # pylint: disable=broad-except
      full = _no_space(e)
      if full is None:
        raise
      cli.error(f'stopped: no space left on the device holding {full}; the '
                'rows and checkpoints so far are kept: free some space and '
                'run the same command to resume', code=1)
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
