"""The experiment command: one federated training run into its folder, or
a sweep of runs and its summary.

  python -m tff_algos --algo=fedprox --task=synthetic_1_1 --rounds=200 \\
      --clients_per_round=10 --epochs=20 --batch_size=10 --client_lr=0.01 \\
      --mu=1 --straggler_fraction=0.5 --seed=0 --output_dir=runs/fedprox
  python -m tff_algos --flagfile=configs/fedprox/fig1_synthetic_1_1.flags

(`run_experiment.py` at the repository's root is the same command.) Writes
a run folder (metrics.csv, config.json, summary.json, checkpoints/,
tensorboard/). The same command continues an interrupted run (found again
without --output_dir too), leaves a finished one alone and refuses one with
other settings unless --overwrite. Flags after a --flagfile override it. A
command with --variant/--sweep flags runs a sweep: every run in its own
process and folder, then summary.md/summary.csv and plots. Tasks and
algorithms of your own come in with --import. Bad input: one line on
stderr, exit code 2, nothing written. A run that stops (divergence, a lost
worker, a full disk, a folder that cannot be written): one line, exit code
1, the rows and checkpoints so far kept. Ctrl-C: one line, exit code 130.
"""

import contextlib
import dataclasses
import errno
import json
import os
import signal
import sys
from typing import Any, Mapping

from tff_algos import cli
from tff_algos.analysis import sweep
from tff_algos.runtime import addresses
from tff_algos.simulation import results
from tff_algos.simulation import run_dir
from tff_algos.simulation.config import Config

DESCRIPTION = ('Train a federated algorithm on a task in simulation and '
               'write a run folder; with --variant/--sweep, a sweep of runs '
               'and its summary.')
GROUPS = ('run', 'algorithm', 'data', 'output', 'sweep')
# A sweep's own flags: not passed on to its runs.
_SWEEP_FLAGS = ('--variant', '--sweep', '--only', '--output_dir',
                '--overwrite', '--dry_run')


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How a run is carried out (not part of its settings)."""
  output_dir: str | None
  overwrite: bool = False
  replace_other_run: bool = False
  resume: bool = False
  checkpoint_every: int = 10
  target_accuracy: float | None = None
  progress: bool = True
  dry_run: bool = False
  workers: str = ''


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """One run as a command line asks for it, validated, nothing loaded.

  `config.clients_per_round` is None with --client_fraction until the
  task's clients are known (`for_task`).
  """
  config: Config
  task_options: Mapping[str, Any]
  client_fraction: float | None
  options: RunOptions

  def for_task(self, num_clients: int) -> Config:
    """The run's Config for a task of `num_clients` clients (K from
    --client_fraction), validated against them."""
    config = cli.with_clients(self.config, self.client_fraction, num_clients)
    try:
      config.validate(num_clients=num_clients)
    except ValueError as e:
      raise cli.UsageError(str(e)) from None
    return config


@dataclasses.dataclass(frozen=True)
class Command:
  """A parsed command line: its own plan and, for a sweep, its runs (a
  `sweep.Run` and a `RunPlan` each) and the flags they share."""
  plan: RunPlan
  flagfiles: tuple[str, ...] = ()
  runs: tuple[sweep.Run, ...] = ()
  run_plans: tuple[RunPlan, ...] = ()
  common: tuple[str, ...] = ()
  variants: tuple[str, ...] = ()
  sweeps: tuple[str, ...] = ()


def _plan(holder, imports) -> RunPlan:
  """The RunPlan of parsed flags; UsageError for bad values."""
  if holder.checkpoint_every < 1:
    raise cli.UsageError('--checkpoint_every must be >= 1')
  try:
    addresses.parse_workers(holder.workers)
  except ValueError as e:
    raise cli.UsageError(str(e)) from None
  if holder.target_accuracy is not None and not (
      0 < holder.target_accuracy <= 1):
    raise cli.UsageError(f'--target_accuracy must be in (0, 1], got '
                         f'{holder.target_accuracy}')
  if holder.resume and (holder.overwrite or not holder.output_dir):
    raise cli.UsageError('--resume needs the --output_dir of the run, and no '
                         '--overwrite')
  options = RunOptions(**{f.name: holder[f.name].value
                          for f in dataclasses.fields(RunOptions)})
  return RunPlan(cli.config_from_flags(holder, imports),
                 cli.task_options(holder), holder.client_fraction, options)


def parse_command(args) -> Command:
  """The Command of `args` (the command line after the program): flag
  files expanded, users' modules imported, every run's flags parsed and
  validated (a bad one is a UsageError before anything runs)."""
  expanded, flagfiles = cli.expand_flagfiles(args)
  imports = cli.import_modules(cli.imports_in(expanded))
  holder = cli.flag_values(GROUPS)
  cli.parse(holder, expanded)
  plan = _plan(holder, imports)
  if not (holder.variant or holder.sweep):
    if holder.only:
      raise cli.UsageError('--only selects variants of a sweep (--variant '
                           'flags)')
    return Command(plan, tuple(flagfiles))
  if plan.options.resume:
    raise cli.UsageError('a sweep resumes by itself; give --resume to single '
                         'runs only')
  typed = [a.split('=', 1)[1].split(':', 1)[0].strip() for a in args
           if a.startswith('--variant=')]
  twice = sorted({name for name in typed if typed.count(name) > 1})
  if twice:  # A --variant replaces one of a --flagfile, not one typed.
    raise cli.UsageError(f'--variant {twice[0]} given twice on the command '
                         'line')
  if any(a in _SWEEP_FLAGS[:4] for a in expanded):  # "--output_dir out".
    raise cli.UsageError('write sweep flags as --flag=value')
  try:
    runs = sweep.expand(holder.variant, holder.sweep, holder.only)
  except ValueError as e:
    raise cli.UsageError(str(e)) from None
  common = tuple(a for a in expanded if a.split('=')[0] not in _SWEEP_FLAGS)
  run_plans = []
  for run in runs:
    run_holder = cli.flag_values(GROUPS)
    try:
      cli.parse(run_holder, [*common, *run.args])
      if run_holder.variant or run_holder.sweep:
        raise cli.UsageError('--variant/--sweep inside a variant')
      run_plans.append(_plan(run_holder, imports))
    except cli.UsageError as e:
      raise cli.UsageError(f'variant {run.variant}: {e}') from None
  return Command(plan, tuple(flagfiles), tuple(runs), tuple(run_plans),
                 common, tuple(holder.variant), tuple(holder.sweep))


# ------------------------------------------------------------ one run
def check_data_loads(plans) -> list[Config]:
  """Loads each distinct dataset of `plans` once (a dry run): one line per
  dataset, or UsageError naming the first that does not load. Returns the
  Configs with K as the runs will use it."""
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()
  num_clients, configs = {}, []
  for plan in plans:
    config = plan.config
    key = (config.task, config.data_seed, config.data_dir,
           config.train_fraction, config.partition,
           tuple(sorted(plan.task_options.items())))
    if key not in num_clients:
      task = cli.load_task(config, plan.task_options)
      num_clients[key] = len(task.client_ids)
      print(f'data: {task.name}: {num_clients[key]} clients '
            f'({task.description})', file=sys.stderr)
    configs.append(plan.for_task(num_clients[key]))
  return configs


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


def _stopped_writing(error, default):
  """Why a run could not write its files, from `error`'s chain, or None:
  'no space left on the device holding FILE' (ENOSPC, EDQUOT, or
  TensorFlow's ResourceExhaustedError 'FILE; No space left on device' from
  the file API that TFF's release managers use) or 'cannot write FILE
  (permission denied / read-only file system)' (EACCES, EPERM, EROFS, or
  TensorFlow's PermissionDeniedError)."""
  while error is not None:
    name = type(error).__name__
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC,
                                                      errno.EDQUOT):
      return f'no space left on the device holding {error.filename or default}'
    if isinstance(error, OSError) and error.errno in (errno.EACCES,
                                                      errno.EPERM,
                                                      errno.EROFS):
      return f'cannot write {error.filename or default} ({error.strerror})'
    if name == 'ResourceExhaustedError' and 'No space left' in str(error):
      where = str(error).split(';')[0].strip() or default
      return f'no space left on the device holding {where}'
    if name == 'PermissionDeniedError' or (
        name in ('FailedPreconditionError', 'UnknownError') and
        'Read-only file system' in str(error)):
      where = str(error).split(';')[0].strip() or default
      return f'cannot write {where} (permission denied or read-only)'
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


def run_single(plan: RunPlan, program: str):
  """One run into its folder."""
  options = plan.options
  if options.dry_run:
    try:
      config, = check_data_loads([plan])
    except cli.UsageError as e:
      cli.fail(program, e)
    print(json.dumps({**cli.describe(config), **plan.task_options}, indent=2,
                     sort_keys=True))
    return
  try:
    run_dir.check_usable(options.output_dir or 'runs')
  except run_dir.OutputDirError as e:
    cli.fail(program, e)
  # TensorFlow from here on.
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  # Before TensorFlow is imported: the local worker starts meanwhile, and
  # unused parts of TFF's dependencies are left out (docs/PERFORMANCE.md).
  runtime.prepare(start_worker=not options.workers)
  from tff_algos.simulation import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_algos.simulation import experiment  # pylint: disable=g-import-not-at-top
  runtime.install()
  round_started = None  # The run's folder once training has started.
  output_dir = options.output_dir
  with _terminate_as_interrupt():
    try:
      task = cli.load_task(plan.config, plan.task_options)
      config = dataclasses.replace(plan.for_task(len(task.client_ids)),
                                   task=task.name)
      output_dir = output_dir or default_output_dir(config)
      folder = run_dir.RunDir(output_dir, config)
      with folder.hold():
        if options.overwrite:
          folder.remove_outputs()
        try:
          status = folder.status()
        except run_dir.OutputDirError:
          if not options.replace_other_run:
            raise
          folder.remove_outputs()
          status = folder.status()
        if options.resume and status == 'new':
          raise cli.UsageError(f'--resume: {output_dir} holds no run to '
                               'resume')
        if status == 'finished':
          print(f'{output_dir} already holds this finished run '
                '(--overwrite runs it again)', file=sys.stderr)
          print(open(os.path.join(output_dir, run_dir.SUMMARY_FILE)).read())
          return
        runtime.start(workers=options.workers, log_path=folder.worker_log,
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
        experiment.run(config, task, output_dir, show_progress=options.progress,
                       checkpoint_every=options.checkpoint_every,
                       target_accuracy=options.target_accuracy)
    except (config_lib.ConfigError, cli.UsageError) as e:
      cli.fail(program, e)
    except (runtime.WorkerError, experiment.Diverged,
            experiment.MetricsLost) as e:
      resume = ('; run the same command to resume' if round_started and
                isinstance(e, runtime.WorkerError) else '')
      cli.fail(program, f'stopped: {e}{resume}', code=1)
    except KeyboardInterrupt as e:
      where = (f'at round {e.round_num}' if hasattr(e, 'round_num') else
               'before the first round')
      signum = getattr(e, 'signum', signal.SIGINT)
      name = 'interrupted' if signum == signal.SIGINT else 'terminated'
      cli.fail(program, f'{name} {where}; run the same command to resume',
               code=128 + signum)
    except Exception as e:  # pylint: disable=broad-except
      why = _stopped_writing(e, output_dir)
      if why is None:
        raise
      cli.fail(program, f'stopped: {why}; the rows and checkpoints so far '
               'are kept: fix it and run the same command to resume',
               code=1)
    finally:
      runtime.stop()
  print(open(os.path.join(output_dir, run_dir.SUMMARY_FILE)).read())


# -------------------------------------------------------------- sweeps
def _holds_finished(path, plan: RunPlan):
  """Whether the folder `path` holds the finished run of `plan`, so that a
  sweep need not start its process to find out: the run's own check
  (RunDir.status), with K from the client count the run recorded. Any
  doubt is False: the run's process then decides."""
  try:
    summary = results.read_json(path, run_dir.SUMMARY_FILE)
    config = plan.for_task(int(summary['num_clients']))
    return run_dir.RunDir(path, config).status() == 'finished'
  except (OSError, ValueError, TypeError, KeyError, cli.UsageError,
          run_dir.OutputDirError):
    return False


def _child_command():
  """How a sweep starts a run: this package's command in a new process
  (wherever the package is, wherever the sweep runs)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.environ.get('PYTHONPATH')
  env = dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ''))
  return [sys.executable, '-m', 'tff_algos'], env


def run_sweep(command: Command, program: str):
  """--variant/--sweep: every run in its own process, then the summary."""
  options = command.plan.options
  output_dir = options.output_dir or os.path.join(
      'runs', command.flagfiles[-1] if command.flagfiles else 'sweep')
  target = options.target_accuracy
  if options.dry_run:
    try:
      configs = check_data_loads(command.run_plans)
    except cli.UsageError as e:
      cli.fail(program, e)
    for run, config, plan in zip(command.runs, configs, command.run_plans):
      print(os.path.join(output_dir, run.name), json.dumps(
          {**cli.describe(config), **plan.task_options}, sort_keys=True))
    return
  child, env = _child_command()
  try:
    run_dir.check_usable(output_dir)
    with run_dir.RunDir(output_dir, None).hold():
      planned = dict(zip([r.name for r in command.runs], command.run_plans))
      codes = sweep.run_all(
          command.runs, [*command.common, *(['--replace_other_run']
                                           if options.overwrite else [])],
          output_dir, child, env=env,
          finished=lambda run, path: _holds_finished(path, planned[run.name]))
      # The summary and plots cover the command's whole plan: runs left out
      # by --only but already in the folder keep their rows.
      plan = sweep.expand(command.variants, command.sweeps)
      rows = sweep.table(plan, output_dir, target)
      summary = sweep.write_summary(rows, output_dir, target, plan)
      if summary is None:
        print(f'{program}: kept {output_dir}/summary.csv and its plots: they '
              'cover more runs than the '
              f'{sum(1 for r in rows if "rounds" in r)} of this command that '
              'have results', file=sys.stderr)
      else:
        lines, written = summary  # Not an older sweep's summary_seeds.csv.
        print('\n'.join(lines))
        written += sweep.plot_runs(plan, rows, output_dir, target)
        print(f'{program}: wrote {", ".join(written)}', file=sys.stderr)
  except run_dir.OutputDirError as e:
    cli.fail(program, e)
  except sweep.SweepInterrupted as e:
    cli.fail(program, f'{e}; run the same command to resume',
             code=128 + e.signum)
  failed = [f'{name} (exit {code})' for name, code in codes.items() if code]
  if failed == [f'{list(codes)[-1]} (exit 2)']:
    sys.exit(2)  # Its one line said why (bad input); nothing after it ran.
  if len(codes) < len(command.runs):
    failed.append(f'{len(command.runs) - len(codes)} not started')
  if failed:
    unfinished = len(command.runs) - len(codes) + sum(map(bool,
                                                          codes.values()))
    cli.fail(program, f'{unfinished} of {len(command.runs)} runs did not '
             f'finish: {", ".join(failed)}', code=1)


def main(argv=None, program=None):
  """The command line `argv` (sys.argv by default; argv[0] the program)."""
  argv = list(sys.argv if argv is None else argv)
  program = program or os.path.basename(argv[0])
  if cli.wants_help(argv):
    print(cli.usage(program, DESCRIPTION, GROUPS))
    return
  try:
    command = parse_command(argv[1:])
  except cli.UsageError as e:
    cli.fail(program, e)
  if command.runs:
    return run_sweep(command, program)
  return run_single(command.plan, program)
