"""One run of resolved `Settings` on a task, into a run folder: what the
command line runs (and tests and scripts through `run`).

Wired from the trainer's pieces (`trainer`: the process, the data, the
round callbacks) and the run folder's (`run_dir`: its status, release and
state managers, summary): `prepare` builds the run and its provenance;
`RunDir.status` says whether the folder holds it; `train` resumes from the
latest checkpoint, trains the remaining rounds and summarizes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import numpy as np

from tasks import partitions
from tff_algos import learning
from tff_algos.simulation import callbacks as callbacks_lib
from tff_algos.simulation import config as config_lib
from tff_algos.simulation import loop as loop_lib
from tff_algos.simulation import outputs
from tff_algos.simulation import provenance as provenance_lib
from tff_algos.simulation import results
from tff_algos.simulation import run_dir as run_dir_lib
from tff_algos.simulation import trainer

# What summary.json's `seconds` holds (the progress bar's time also counts
# start-up).
SECONDS_COUNTS = (
  'the rounds this process ran, each from its training to '
  'its checkpoint (evaluation and the metrics rows '
  'included); not the start-up before round 0 (imports, '
  'data, building the process, starting the worker), nor '
  'the rounds of earlier processes of a resumed run'
)
Diverged = loop_lib.Diverged


class MetricsLost(RuntimeError):
  """metrics.csv lacks rounds up to the checkpoint's, and the TensorBoard
  events do not hold them either: resuming would leave the rows short."""


@dataclasses.dataclass(frozen=True)
class Prepared:
  """A run ready to train: its settings, task, data, process, what its
  numbers come from (`provenance.record`), the DP mechanism its ε is
  computed for (`trainer.accounted_mechanism`; None without DP), how
  its clients train (`trainer.build_for_run`, or for clients trained in
  this process their engine's words) and their engine
  (`compiled.Engine`)."""

  settings: config_lib.Settings
  task: Any
  data: trainer.ClientData
  process: Any
  provenance: dict
  mechanism: Any = None
  execution: str = 'per client'
  engine: Any = None


def prepare(settings: config_lib.Settings, task, workers: str = '') -> Prepared:
  """The run of `settings` on `task`: its data and process, how its
  clients train (`trainer.build_for_run`; `workers`: the remote workers'
  addresses) and their provenance (which the folder's status compares).
  ConfigError for a DP run whose process carries no DP aggregator to
  account for (`trainer.accounted_mechanism`), before anything is
  written."""
  data = trainer.ClientData.of(task, settings)
  process, execution = trainer.build_for_run(
    settings, task.model_fn, workers=workers
  )
  engine = trainer.compiled_engine(settings, process, data)
  provenance = provenance_lib.record(
    process, data.client_ids, data.train, data.test
  )
  if engine is not None:
    provenance['compiled_work'] = engine.fingerprint()
    execution = engine.execution
  return Prepared(
    settings,
    task,
    data,
    process,
    dict(provenance, execution=_execution(process, engine)),
    trainer.accounted_mechanism(settings, process),
    execution,
    engine,
  )


def _execution(process, engine) -> str:
  """How the run's clients train, as its provenance records it."""
  if engine is not None:
    return engine.execution
  if learning.takes_stored_input(process):
    return 'per client, reading their data where they train'
  return 'per client'


def status(
  prepared: Prepared,
  folder: run_dir_lib.RunDir,
  accept_package_change: bool = False,
) -> str:
  """'new', 'resume' or 'finished' (`RunDir.status`)."""
  return folder.status(
    prepared.settings.to_json(), prepared.provenance, accept_package_change
  )


def _restore_rows(folder, last_round, columns):
  """On resume, metrics.csv must hold every round up to the checkpoint's
  (`last_round`; -1 without one): rounds it lacks (deleted, damaged, or a
  copy of the folder) are written back from the TensorBoard events, said
  in one line; MetricsLost if those lack them too (nothing is written)."""
  missing = folder.missing_rounds(last_round)
  if not missing:
    return
  lost = folder.rebuild_rows(missing, columns)
  span = (
    f'{missing[0]}'
    if len(missing) == 1
    else f'{missing[0]}–{missing[-1]}'
    if missing[-1] - missing[0] + 1 == len(missing)
    else f'{len(missing)} rounds'
  )
  if lost:
    raise MetricsLost(
      f'{folder.metrics_path} lacks rounds {span} of the checkpoint at '
      f'round {last_round}, and {run_dir_lib.TENSORBOARD_DIR}/ does not '
      f'hold round {lost[0]} either: put back the metrics.csv of this '
      'run, or pass --overwrite to start it again'
    )
  print(
    f'{folder.metrics_path} lacked rounds {span}: written back from '
    f'{run_dir_lib.TENSORBOARD_DIR}/',
    file=sys.stderr,
  )


def _resume(prepared, folder, loop, columns):
  """(state, first round, the checkpoints' manager) to train from: the
  latest intact checkpoint's, or the seeded initial model's at round 0;
  the folder's rows made whole up to it, a damaged summary removed."""
  state = loop.initial_state(
    learning.initial_model_weights(
      prepared.task.model_fn, prepared.settings.run.seed
    )
  )
  checkpoints = folder.state_manager()
  saved, last_round = outputs.wait(
    folder.load_checkpoint(checkpoints, loop.program_state(state))
  )
  first_round = 0
  if saved is not None:
    state, first_round = loop.restore(saved), last_round + 1
  _restore_rows(folder, first_round - 1, columns)
  summary_path = os.path.join(folder.path, results.SUMMARY_FILE)
  if os.path.exists(summary_path):  # Here only if damaged (status()).
    print(
      f'{summary_path} is damaged: the run writes it again', file=sys.stderr
    )
    os.remove(summary_path)
  return state, first_round, checkpoints


def train(
  prepared: Prepared,
  folder: run_dir_lib.RunDir,
  *,
  show_progress: bool = True,
  checkpoint_every: int = 10,
  target_accuracy: float | None = None,
  stop_requests: loop_lib.StopRequests | None = None,
):
  """Trains the unfinished run of `prepared` in `folder` (its status 'new'
  or 'resume') to its last round, continuing from the latest checkpoint,
  and writes summary.json (`stop_requests`: where the caller's signal
  handlers record a stop). Returns metrics.csv's rows as numbers."""
  settings, data = prepared.settings, prepared.data
  callbacks = trainer.round_callbacks(
    settings, prepared.task.model_fn, data, prepared.process
  )
  columns = trainer.metrics_columns(settings, callbacks)
  timer = outputs.Timer()
  loop = trainer.make_loop(
    settings,
    prepared.process,
    data,
    callbacks,
    prepared.engine,
    stop_requests,
  )
  folder.start(settings.to_json(), prepared.provenance)
  if settings.run.partition is not None:
    folder.write_label_histogram(
      partitions.label_histogram(data.train, data.client_ids)
    )
  state, first_round, checkpoints = _resume(prepared, folder, loop, columns)
  folder.record_code(prepared.provenance, first_round)
  loop.add(
    trainer.run_outputs(
      settings,
      records=[outputs.Release(folder.release_manager(first_round), columns)],
      after=[
        outputs.Checkpoints(
          checkpoints, loop.program_state, checkpoint_every, settings.run.rounds
        ),
        timer,
      ],
      show_progress=show_progress,
    )
  )
  try:
    loop.run(state, range(first_round, settings.run.rounds + 1))
  except Diverged as e:
    raise type(e)(f'{e}; metrics so far are in {folder.metrics_path}') from None
  evaluated = [
    c
    for c in callbacks
    if isinstance(c, callbacks_lib.Evaluation) and c.clients
  ]
  if evaluated:
    folder.write_client_accuracy(data.test_ids, *evaluated[0].clients)
  return _summarize(
    prepared, folder, target_accuracy, first_round, timer.seconds
  )


def _summarize(prepared, folder, target_accuracy, first_round, seconds):
  """Writes summary.json; returns metrics.csv's rows as numbers."""
  settings, data = prepared.settings, prepared.data
  examples_per_client = float(
    np.mean([len(next(iter(a.values()))) for a in data.train])
  )
  written = results.read_rows(folder.path)
  summary = results.summarize(
    folder.path, target_accuracy, examples_per_client, rows=written
  )
  rows = [results.typed(row) for row in written]
  summary.update(
    {
      f'final_{name}': next(
        (r[name] for r in reversed(rows) if name in r), None
      )
      for name in (
        *settings.entry.metrics,
        *callbacks_lib.EPSILON_COLUMNS,
        *evaluation_columns(),
      )
      if any(name in r for r in rows)
    }
  )
  if settings.privacy is not None:
    summary.update(
      dp_delta=settings.privacy.delta,
      dp_adjacency=settings.privacy.adjacency,
      dp_accountant=settings.privacy.accountant,
      **_epsilon_descriptions(prepared),
    )
  # What a plot names the run and its algorithm's columns by, so that it
  # need not import the modules (--import) that registered the algorithm.
  summary.update(
    legend=settings.entry.legend(settings.algorithm),
    algorithm_metrics=trainer.algorithm_columns(settings),
  )
  versions = len(folder.provenance())
  summary.update(
    finished=True,
    num_clients=len(data.train),
    train_metrics_over=(
      f'{settings.measurement.eval_clients} of {len(data.train)} clients (--eval_clients)'
      if settings.measurement.eval_clients
      else 'all clients'
    ),
    examples_per_client=examples_per_client,
    resumed_from_round=first_round - 1 if first_round else None,
    code_versions=versions,
    median_seconds_per_round=float(np.median(seconds)) if seconds else None,
    seconds=float(np.sum(seconds)),
    seconds_counts=SECONDS_COUNTS,
  )
  if versions > 1:
    summary['code_note'] = (
      f"trained under {versions} versions of the package's code "
      "(--accept_package_change): config.json's provenance says from "
      'which round each'
    )
  folder.finish(summary)
  return rows


def _epsilon_descriptions(prepared):
  """What summary.json's final ε values are the ε of."""
  settings = prepared.settings
  dp, n, k = (
    settings.privacy,
    len(prepared.data.train),
    settings.sampling.clients_per_round,
  )
  mechanism = prepared.mechanism
  described = dict(
    final_epsilon_of=(
      f'the trained model: {k} of {n} clients per round '
      f'({settings.sampling.scheme}), noise multiplier '
      f'{mechanism.noise_multiplier:.6g} on their clipped sum, as its DP '
      'aggregator released it'
    )
  )
  if dp.noise_cohort is not None:
    described['final_deployment_epsilon_of'] = (
      f'the deployment the noise cohort stands for, not the trained '
      f'model: {dp.noise_cohort} of {n} clients per round, noise '
      f'multiplier {dp.noise_multiplier:g} on their clipped sum'
    )
  return described


def run(
  config,
  task,
  output_dir: str,
  *,
  show_progress: bool = True,
  checkpoint_every: int = 10,
  target_accuracy: float | None = None,
  accept_package_change: bool = False,
  stop_requests: loop_lib.StopRequests | None = None,
):
  """Trains the run of `config` (a `config.Config` or resolved `Settings`)
  on `task` into the folder `output_dir`: a folder holding the same
  unfinished run continues from its latest checkpoint and ends exactly as
  an uninterrupted run would; a finished one is left alone; one holding
  another run (other settings, code or data) is an OutputDirError.
  Returns metrics.csv's rows as numbers."""
  settings = (
    config
    if isinstance(config, config_lib.Settings)
    else (
      config_lib.resolve(
        dataclasses.replace(config, task=task.name),
        num_clients=len(task.client_ids),
      )
    )
  )
  prepared = prepare(settings, task)
  folder = run_dir_lib.RunDir(output_dir)
  if status(prepared, folder, accept_package_change) == 'finished':
    return folder.rows()
  return train(
    prepared,
    folder,
    show_progress=show_progress,
    checkpoint_every=checkpoint_every,
    target_accuracy=target_accuracy,
    stop_requests=stop_requests,
  )


def evaluation_columns():
  """The per-client accuracy columns (their final values: summary.json)."""
  from tff_algos.simulation import evaluation

  return tuple(evaluation.CLIENT_ACCURACY_COLUMNS)


def output_files(output_dir: str) -> list[str]:
  """The files and folders a run wrote in `output_dir`, for its last line."""
  return [
    name
    for name in run_dir_lib.OUTPUTS
    if os.path.exists(os.path.join(output_dir, name))
  ]
