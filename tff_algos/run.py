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

from collections.abc import Mapping
import contextlib
import dataclasses
import difflib
import errno
import functools
import json
import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

from tff_algos import cli
from tff_algos.analysis import sweep
from tff_algos.runtime import addresses
from tff_algos.simulation import config as config_lib
from tff_algos.simulation import header
from tff_algos.simulation import run_dir
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve
from tff_algos.simulation.config import Settings

DESCRIPTION = (
  'Train a federated algorithm on a task in simulation and '
  'write a run folder; with --variant/--sweep, a sweep of runs '
  'and its summary.'
)
GROUPS = ('run', 'algorithm', 'aggregation', 'data', 'output', 'sweep')
# A sweep's own flags: not passed on to its runs.
_SWEEP_FLAGS = (
  '--variant',
  '--sweep',
  '--only',
  '--output_dir',
  '--overwrite',
  '--dry_run',
)


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How a run is carried out (not part of its settings)."""

  output_dir: str | None
  overwrite: bool = False
  replace_other_run: bool = False
  resume: bool = False
  accept_package_change: bool = False
  checkpoint_every: int = 10
  target_accuracy: float | None = None
  progress: bool = True
  dry_run: bool = False
  workers: str = ''


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """One run as a command line asks for it, validated, nothing loaded.

  `config.clients_per_round` is None with --client_fraction until the
  task's clients are known (`settings_for`).
  """

  config: Config
  task_options: Mapping[str, Any]
  client_fraction: float | None
  options: RunOptions

  def settings_for(self, task) -> Settings:
    """The run's settings, resolved once, for `task` (K from
    --client_fraction of its N clients; checked against them)."""
    num_clients = len(task.client_ids)
    config = dataclasses.replace(self.config, task=task.name)
    if self.client_fraction is not None:  # FedAvg §3: max(⌊C·N⌋, 1).
      config = dataclasses.replace(
        config,
        clients_per_round=max(
          int(self.client_fraction * num_clients + 1e-9), 1
        ),
      )
    try:
      return resolve(config, num_clients=num_clients)
    except ValueError as e:
      raise cli.UsageError(str(e)) from None


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


def _plan(holder, imports, check=True) -> RunPlan:
  """The RunPlan of parsed flags; UsageError for bad values (with `check`:
  a sweep's own flags are checked as each run's)."""
  try:
    config_lib.check_options({name: holder[name].value for name in holder})
    addresses.parse_workers(holder.workers)
  except ValueError as e:
    raise cli.UsageError(str(e)) from None
  if holder.resume and (holder.overwrite or not holder.output_dir):
    raise cli.UsageError(
      '--resume needs the --output_dir of the run, and no --overwrite'
    )
  options = RunOptions(
    **{f.name: holder[f.name].value for f in dataclasses.fields(RunOptions)}
  )
  return RunPlan(
    cli.config_from_flags(holder, imports, check),
    cli.task_options(holder),
    holder.client_fraction,
    options,
  )


def parse_command(args) -> Command:
  """The Command of `args` (the command line after the program): flag
  files expanded, users' modules imported, every run's flags parsed and
  validated (a bad one is a UsageError before anything runs)."""
  expanded, flagfiles = cli.expand_flagfiles(args)
  imports = cli.import_modules(cli.imports_in(expanded))
  holder = cli.flag_values(GROUPS)
  cli.parse(holder, expanded)
  plan = _plan(holder, imports, check=not (holder.variant or holder.sweep))
  if not (holder.variant or holder.sweep):
    if holder.only:
      raise cli.UsageError(
        '--only selects variants of a sweep (--variant flags)'
      )
    return Command(plan, tuple(flagfiles))
  if plan.options.resume:
    raise cli.UsageError(
      'a sweep resumes by itself; give --resume to single runs only'
    )
  typed = [
    a.split('=', 1)[1].split(':', 1)[0].strip()
    for a in args
    if a.startswith('--variant=')
  ]
  twice = sorted({name for name in typed if typed.count(name) > 1})
  if twice:  # A --variant replaces one of a --flagfile, not one typed.
    raise cli.UsageError(
      f'--variant {twice[0]} given twice on the command line'
    )
  if any(a in _SWEEP_FLAGS[:4] for a in expanded):  # "--output_dir out".
    raise cli.UsageError('write sweep flags as --flag=value')
  try:
    runs = sweep.expand(holder.variant, holder.sweep, holder.only)
  except ValueError as e:
    raise cli.UsageError(str(e)) from None
  _check_swept_flags(holder.sweep, holder)
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
  return Command(
    plan,
    tuple(flagfiles),
    tuple(runs),
    tuple(run_plans),
    common,
    tuple(holder.variant),
    tuple(holder.sweep),
  )


def _check_swept_flags(sweeps, holder):
  """UsageError naming the --sweep whose flag the command does not have
  (and the flags it may have meant)."""
  for text in sweeps:
    flag, _ = sweep.parse_sweep(text)
    if flag not in holder:
      close = difflib.get_close_matches(flag, list(holder), n=2)
      raise cli.UsageError(
        f'--sweep={text}: there is no flag --{flag}'
        + (
          f' (did you mean {" or ".join(f"--{c}" for c in close)}?)'
          if close
          else ''
        )
      )


# ------------------------------------------------------------ one run
def check_data_loads(plans) -> list[Settings]:
  """Loads each distinct dataset of `plans` once (a dry run): one line per
  dataset, or UsageError naming the first that does not load. Returns each
  run's settings as it will use them."""
  from tff_algos import runtime

  runtime.install()
  loaded, settings = {}, []
  for plan in plans:
    config = plan.config
    key = (
      config.task,
      config.data_seed,
      config.data_dir,
      config.train_fraction,
      config.partition,
      tuple(sorted(plan.task_options.items())),
    )
    if key not in loaded:
      loaded[key] = task = cli.load_task(config, plan.task_options)
      print(
        f'data: {task.name}: {len(task.client_ids)} clients '
        f'({task.description})',
        file=sys.stderr,
      )
    settings.append(plan.settings_for(loaded[key]))
  return settings


def default_output_dir(prepared, accept_package_change=False):
  """runs/ALGO_TASK_seedSEED, or -2, -3, …: the first folder that holds
  this run (to resume, or a finished one), else the first free one."""
  settings = prepared.settings
  base = os.path.join(
    'runs', f'{settings.algo}_{settings.run.task}_seed{settings.run.seed}'
  )
  candidate, n = base, 1
  while os.path.exists(candidate):
    try:
      run_dir.RunDir(candidate).status(
        settings.to_json(), prepared.provenance, accept_package_change
      )
      return candidate  # This run: resume it, or leave it alone.
    except run_dir.OutputDirError:
      n += 1
      candidate = f'{base}-{n}'
  return candidate


def _written_to(error, output_dir):
  """What stopped the run from creating, locking or writing its folder, as
  a phrase ('cannot write PATH (why)', or 'no space left on the device
  holding PATH'), when `error` (or what it came from) is such a failure,
  whatever its errno: an OSError on a path in `output_dir` (or on no path,
  for what only writing does: a full disk, a quota, an I/O error), or
  TensorFlow's file errors there, which the release and state managers
  raise. None otherwise."""
  folder = os.path.abspath(output_dir)
  while error is not None:
    path = why = None
    if isinstance(error, OSError):
      names = [n for n in (error.filename, error.filename2) if n]
      if any(_inside(str(n), folder) for n in names) or (
        not names and error.errno in _WRITE_ERRNOS
      ):
        path, why = (
          (names[0] if names else output_dir),
          (error.strerror or str(error)),
        )
    elif type(error).__module__.startswith('tensorflow') and (
      folder in str(error) or output_dir in str(error)
    ):
      path, _, why = str(error).partition(';')
      path, why = path.strip(), why.strip() or type(error).__name__
    if path is not None:
      if 'No space left' in why or 'quota' in why.lower():
        return f'no space left on the device holding {path}'
      return f'cannot write {path} ({why})'
    error = error.__cause__ or error.__context__
  return None


_WRITE_ERRNOS = (
  errno.ENOSPC,
  errno.EDQUOT,
  errno.EIO,
  errno.EROFS,
  errno.EFBIG,
)


def _inside(path, folder):
  path = os.path.abspath(path)
  return path == folder or path.startswith(folder + os.sep)


@contextlib.contextmanager
def _swallowed_ctrl_c_sent_again(delay_s=0.05):
  """Ctrl-C under Python's own handler (before a run installs its own)
  still stops the command when Python swallows its KeyboardInterrupt,
  raised inside a garbage-collector callback (JAX registers one; seen
  while TensorFlow is imported): no 'Exception ignored' lines, and SIGINT
  is sent again after `delay_s`, once the collection is over. Not sent at
  once: it would raise inside this hook, to be swallowed too."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and (
      signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
      # To the main thread: a signal the kernel handed the timer's thread
      # would not interrupt a blocking call there (a sleep, a wait).
      main = threading.main_thread().ident
      again = threading.Timer(
        delay_s, signal.pthread_kill, (main, signal.SIGINT)
      )
      again.daemon = True
      again.start()
    else:
      previous(unraisable)

  sys.unraisablehook = hook
  try:
    yield
  finally:
    sys.unraisablehook = previous


@contextlib.contextmanager
def _terminate_as_interrupt():
  """SIGTERM unwinds like Ctrl-C (a KeyboardInterrupt carrying the signal);
  both also stop the training loop at the end of the round, should Python
  swallow the exception (one raised inside a garbage-collector callback):
  yields the `loop.StopRequests` the handlers record them in."""
  from tff_algos.simulation import loop

  requests = loop.StopRequests()

  def on_signal(signum, frame):
    del frame
    raise requests.request(signum)

  previous = {
    s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)
  }
  try:
    yield requests
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)


class _Stage:
  """How far a run got: which folder, and whether it had started training
  (its errors then say how to resume)."""

  output_dir = None
  training = False


def _one_line(error, stage: _Stage):
  """(exit code, line) for an error a run reports in one line, or None for
  one that is a bug (its traceback is shown)."""
  from tff_algos import runtime
  from tff_algos.simulation import client_store
  from tff_algos.simulation import experiment

  resume = '; run the same command to resume'
  if isinstance(error, KeyboardInterrupt):
    signum = getattr(error, 'signum', signal.SIGINT)
    where = (
      f'at round {error.round_num}'
      if hasattr(error, 'round_num')
      else 'before the first round'
    )
    name = 'interrupted' if signum == signal.SIGINT else 'terminated'
    return 128 + signum, f'{name} {where}{resume}'
  if isinstance(error, (ConfigError, cli.UsageError)):
    return 2, str(error)
  if isinstance(error, runtime.WorkerError):
    return 1, f'stopped: {error}' + (resume if stage.training else '')
  if isinstance(
    error,
    (experiment.Diverged, experiment.MetricsLost, client_store.StoreError),
  ):
    return 1, f'stopped: {error}'
  written = stage.output_dir and _written_to(error, stage.output_dir)
  if not written:
    return None
  if not stage.training:
    return 2, f'--output_dir={stage.output_dir}: {written}'
  return 1, (
    f'stopped: {written}; the rows and checkpoints so far are '
    'kept: fix it and run the same command to resume'
  )


def _finished(output_dir):
  """What a finished run's command prints: its summary (stdout), and
  where its results are (the last line, stderr)."""
  from tff_algos.simulation import experiment

  with open(os.path.join(output_dir, run_dir.SUMMARY_FILE)) as f:
    print(f.read())
  print(
    f'results in {output_dir}/: '
    f'{", ".join(experiment.output_files(output_dir))}',
    file=sys.stderr,
  )


def _open_folder(folder, options, status_of):
  """The folder's status (`status_of(folder)`, checked once), after
  --overwrite or --replace_other_run cleared it; UsageError for --resume
  without a run to resume."""
  if options.overwrite:
    folder.remove_outputs()
  try:
    status = status_of(folder)
  except run_dir.OutputDirError:
    if not options.replace_other_run:
      raise
    folder.remove_outputs()
    status = status_of(folder)
  if options.resume and status == 'new':
    raise cli.UsageError(f'--resume: {folder.path} holds no run to resume')
  return status


@contextlib.contextmanager
def _prepared_in_held_folder(plan: RunPlan):
  """(the run prepared: its data and process, its folder held). A folder
  the user named is held first, so that one the OS or another run refuses
  costs no data loading or tracing; the default folder is the first that
  holds this very run (`default_output_dir`), so it is known only after."""
  from tff_algos.simulation import experiment

  options = plan.options

  def prepare():
    task = cli.load_task(plan.config, plan.task_options)
    return experiment.prepare(plan.settings_for(task), task, options.workers)

  if options.output_dir:
    folder = run_dir.RunDir(options.output_dir)
    with folder.hold():
      yield prepare(), folder
    return
  prepared = prepare()
  folder = run_dir.RunDir(
    default_output_dir(prepared, options.accept_package_change)
  )
  with folder.hold():
    yield prepared, folder


def _dry_run(plan: RunPlan, program: str):
  """--dry_run: the run's resolved settings, once its data load."""
  try:
    (settings,) = check_data_loads([plan])
  except cli.UsageError as e:
    cli.fail(program, e)
  print(
    json.dumps(
      {**settings.to_json(), **plan.task_options}, indent=2, sort_keys=True
    )
  )


def run_single(plan: RunPlan, program: str):
  """One run into its folder."""
  options = plan.options
  if options.dry_run:
    _dry_run(plan, program)
    return
  try:
    run_dir.check_usable(options.output_dir or 'runs')
  except run_dir.OutputDirError as e:
    cli.fail(program, e)
  # TensorFlow from here on.
  from tff_algos import runtime

  # Before TensorFlow is imported: the local worker starts meanwhile, and
  # unused parts of TFF's dependencies are left out (docs/PERFORMANCE.md).
  runtime.prepare(start_worker=not options.workers)
  from tff_algos.simulation import experiment

  runtime.install()
  stage = _Stage()
  stage.output_dir = options.output_dir or 'runs'
  with _terminate_as_interrupt() as stop_requests:
    try:
      with _prepared_in_held_folder(plan) as (prepared, folder):
        stage.output_dir = output_dir = folder.path
        status = _open_folder(
          folder,
          options,
          functools.partial(
            experiment.status,
            prepared,
            accept_package_change=options.accept_package_change,
          ),
        )
        if status == 'finished':
          print(
            f'{output_dir} already holds this finished run '
            '(--overwrite runs it again)',
            file=sys.stderr,
          )
          _finished(output_dir)
          return
        runtime.start(
          workers=options.workers, log_path=folder.worker_log, wait=False
        )  # It starts while the run is set up.
        header.announce(prepared, output_dir, status)
        stage.training = True
        experiment.train(
          prepared,
          folder,
          show_progress=options.progress,
          checkpoint_every=options.checkpoint_every,
          target_accuracy=options.target_accuracy,
          stop_requests=stop_requests,
        )
    except (Exception, KeyboardInterrupt) as e:
      reported = _one_line(e, stage)
      if reported is None:
        raise
      code, line = reported
      cli.fail(program, line, code=code)
    finally:
      runtime.stop()
  _finished(output_dir)


def _finished_runs(command: Command, output_dir: str) -> set[str]:
  """The names of the sweep's runs whose folders hold that very run,
  finished: its settings, code, computation and data, the same check a
  run's own process makes (`experiment.status`), made for all of them in
  one process, so that re-running a finished sweep does not start a
  process per run. Only folders with a summary are checked; the check
  runs in a process of its own (spawned: the sweep's stays free of
  TensorFlow and its threads, as it forks its runs)."""
  candidates = [
    (run.name, plan)
    for run, plan in zip(command.runs, command.run_plans)
    if os.path.exists(os.path.join(output_dir, run.name, run_dir.SUMMARY_FILE))
  ]
  if not candidates:
    return set()
  context = multiprocessing.get_context('spawn')
  with context.Pool(1) as pool:
    return set(pool.apply(_check_finished, (candidates, output_dir)))


def _check_finished(candidates, output_dir):
  """`_finished_runs`' check, in its process: the names of `candidates`
  ((name, RunPlan) pairs) whose folders hold them finished. A run whose
  check fails for any reason is not finished: its own process will say
  why."""
  from tff_algos import runtime

  runtime.prepare(start_worker=False)
  from tff_algos.simulation import experiment

  runtime.start()
  tasks_loaded, finished = {}, []
  try:
    for name, plan in candidates:
      try:
        cli.import_modules(plan.config.imports)
        key = (
          plan.config.task,
          plan.config.data_seed,
          plan.config.data_dir,
          plan.config.train_fraction,
          plan.config.partition,
          tuple(sorted(plan.task_options.items())),
        )
        if key not in tasks_loaded:
          tasks_loaded[key] = cli.load_task(plan.config, plan.task_options)
        task = tasks_loaded[key]
        prepared = experiment.prepare(
          plan.settings_for(task), task, plan.options.workers
        )
        if (
          experiment.status(
            prepared,
            run_dir.RunDir(os.path.join(output_dir, name)),
            plan.options.accept_package_change,
          )
          == 'finished'
        ):
          finished.append(name)
      except Exception:
        pass
  finally:
    runtime.stop()
  return finished


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
    'runs', command.flagfiles[-1] if command.flagfiles else 'sweep'
  )
  target = options.target_accuracy
  if options.dry_run:
    try:
      resolved = check_data_loads(command.run_plans)
    except cli.UsageError as e:
      cli.fail(program, e)
    for run, settings, plan in zip(command.runs, resolved, command.run_plans):
      print(
        os.path.join(output_dir, run.name),
        json.dumps({**settings.to_json(), **plan.task_options}, sort_keys=True),
      )
    return
  child, env = _child_command()
  try:
    run_dir.check_usable(output_dir)
    with run_dir.RunDir(output_dir).hold():
      done = _finished_runs(command, output_dir)
      codes = sweep.run_all(
        command.runs,
        [
          *command.common,
          *(['--replace_other_run'] if options.overwrite else []),
        ],
        output_dir,
        child,
        env=env,
        finished=lambda run, _: run.name in done,
      )
      # The summary and plots cover the command's whole plan: runs left out
      # by --only but already in the folder keep their rows.
      plan = sweep.expand(command.variants, command.sweeps)
      rows = sweep.table(plan, output_dir, target)
      summary = sweep.write_summary(rows, output_dir, target, plan)
      if summary is None:
        print(
          f'{program}: kept {output_dir}/summary.csv and its plots: they '
          'cover more runs than the '
          f'{sum(1 for r in rows if "rounds" in r)} of this command that '
          'have results',
          file=sys.stderr,
        )
      else:
        lines, written = summary  # Not an older sweep's summary_seeds.csv.
        print('\n'.join(lines))
        written += sweep.plot_runs(plan, rows, output_dir, target)
        print(
          f"{program}: results in {output_dir}/: the runs' folders and "
          f'{", ".join(os.path.basename(w) for w in written)}',
          file=sys.stderr,
        )
  except run_dir.OutputDirError as e:
    cli.fail(program, e)
  except sweep.SweepInterrupted as e:
    cli.fail(
      program, f'{e}; run the same command to resume', code=128 + e.signum
    )
  failed = [f'{name} (exit {code})' for name, code in codes.items() if code]
  if failed == [f'{list(codes)[-1]} (exit 2)']:
    sys.exit(2)  # Its one line said why (bad input); nothing after it ran.
  if len(codes) < len(command.runs):
    failed.append(f'{len(command.runs) - len(codes)} not started')
  if failed:
    unfinished = len(command.runs) - len(codes) + sum(map(bool, codes.values()))
    cli.fail(
      program,
      f'{unfinished} of {len(command.runs)} runs did not '
      f'finish: {", ".join(failed)}',
      code=1,
    )


def main(argv=None, program=None):
  """The command line `argv` (sys.argv by default; argv[0] the program).
  Ctrl-C before a run's own handler is on (the imports, the start) is a
  KeyboardInterrupt, which the callers (run_experiment.py, __main__.py)
  report in one line, exit code 130."""
  argv = list(sys.argv if argv is None else argv)
  program = program or os.path.basename(argv[0])
  if cli.wants_help(argv):
    print(cli.usage(program, DESCRIPTION, GROUPS))
    return
  with _swallowed_ctrl_c_sent_again():
    try:
      command = parse_command(argv[1:])
    except cli.UsageError as e:
      cli.fail(program, e)
    if command.runs:
      return run_sweep(command, program)
    return run_single(command.plan, program)
