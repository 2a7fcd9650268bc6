"""One simulated run of a Config on a task, into a run folder.

Wires the library's pieces: the algorithm's process from the registry, the
sampler, the evaluation of f(w) over all clients, the hooks a Config asks
for, the run folder's release and state managers, and `loop.run`. Shared
by run_experiment.py, the notebooks and the tests.
"""

import dataclasses
import os
import sys

import numpy as np

import tasks as tasks_lib
from tasks import partitions
from tff_algos import learning
from tff_algos.algorithms import optimizers
from tff_algos.runtime import computation_cache
from tff_algos.runtime import tracing
from tff_algos.simulation import evaluation
from tff_algos.simulation import results
from tff_algos.simulation import loop as loop_lib
from tff_algos.simulation import run_dir as run_dir_lib
from tff_algos.simulation.config import Config
from tff_algos.simulation.sampling import ClientSampler

# What summary.json's `seconds` holds (the progress bar's time also counts
# start-up).
SECONDS_COUNTS = ('the rounds this process ran, each from its training to '
                  'its checkpoint (evaluation and the metrics rows '
                  'included); not the start-up before round 0 (imports, '
                  'data, building the process, starting the worker), nor '
                  'the rounds of earlier processes of a resumed run')
Diverged = loop_lib.Diverged
Interrupted = loop_lib.Interrupted
NonFiniteLoss = loop_lib.NonFiniteLoss


def build_process(config: Config, model_fn, client_input=None):
  """The algorithm named by config.algo with the config's hyper-parameters
  (the simulation build unless `client_input` says otherwise); from the
  on-disk computation cache when it was built before
  (`runtime.computation_cache`)."""
  config = config.resolved()
  client_input = client_input or learning.ScheduledInput()
  algorithm = config.algorithm
  tracing.install()
  return computation_cache.build(
      lambda settings: algorithm.build(model_fn, settings, client_input),
      config, model_fn=model_fn, algorithm=algorithm,
      client_input=client_input)


def build_loop(config: Config, model_fn, train_arrays, test_arrays=None,
               evaluate: bool = True):
  """The `loop.Loop` of a run of `config` (config.rounds rounds); without
  `evaluate`, no measurement of the global model (benchmarks)."""
  config = config.resolved()
  sampler = ClientSampler(len(train_arrays), config.clients_per_round,
                          config.epochs, config.seed, config.straggler_fraction)
  algorithm = config.algorithm
  hooks = list(algorithm.hooks(config) if algorithm.hooks else [])
  if config.client_lr_schedule not in (None, 'constant'):
    hooks.append(optimizers.ClientLearningRateSchedule(config))
  measurements = []
  if evaluate:
    evaluated = train_arrays
    if config.eval_clients is not None:
      evaluated = [train_arrays[k]
                   for k in sampler.evaluation_clients(config.eval_clients)]
    every_round = any(getattr(h, 'needs_evaluation', False) for h in hooks)
    measurements.append(_evaluation(config, model_fn, evaluated, test_arrays,
                                    every_round))
  if config.dissimilarity_every:
    dissimilarity = evaluation.build_dissimilarity(model_fn)
    measurements.append(loop_lib.Measurement(
        lambda weights: dissimilarity(weights, train_arrays),
        lambda r: r % config.dissimilarity_every == 0))
  return loop_lib.Loop(
      process=build_process(config, model_fn),
      sampler=sampler,
      policy=config.policy,
      batch_size=config.batch_size,
      train_arrays=train_arrays,
      measurements=measurements,
      hooks=hooks,
      columns=dict(mu=config.effective_mu),
      round_metrics=algorithm.round_metrics,
      metrics=algorithm.metrics,
      stop_when=None if config.stop_at_accuracy is None else (
          lambda row: row.get('test_accuracy', -1) >= config.stop_at_accuracy))


def _evaluation(config, model_fn, train_arrays, test_arrays, every_round):
  """f(w) and accuracy over the clients' train data (all of them, or the
  --eval_clients subset) and all test data, every config.eval_every rounds,
  at round 0 and after the last (every round when a hook reads the
  training loss: `needs_evaluation`, e.g. adaptive μ)."""
  evaluate = evaluation.build_evaluation(model_fn)

  def measure(weights):
    row = {}
    for split, arrays in (('train', train_arrays), ('test', test_arrays)):
      if arrays is not None:
        metrics = evaluate(weights, arrays)
        row.update({f'{split}_loss': metrics['loss'],
                    f'{split}_accuracy': metrics['accuracy']})
    return row

  return loop_lib.Measurement(measure, lambda r: (
      r % config.eval_every == 0 or r == config.rounds or every_round))


class MetricsLost(RuntimeError):
  """metrics.csv lacks rounds up to the checkpoint's, and the TensorBoard
  events do not hold them either: resuming would leave the rows short."""


def _restore_rows(folder, last_round, columns):
  """On resume, metrics.csv must hold every round up to the checkpoint's
  (`last_round`; -1 without one): rounds it lacks (deleted, damaged, or a
  copy of the folder) are written back from the TensorBoard events, said
  in one line; MetricsLost if those lack them too (nothing is written)."""
  missing = folder.missing_rounds(last_round)
  if not missing:
    return
  lost = folder.rebuild_rows(missing, columns)
  span = (f'{missing[0]}' if len(missing) == 1 else
          f'{missing[0]}–{missing[-1]}' if missing[-1] - missing[0] + 1 ==
          len(missing) else f'{len(missing)} rounds')
  if lost:
    raise MetricsLost(
        f'{folder.metrics_path} lacks rounds {span} of the checkpoint at '
        f'round {last_round}, and {run_dir_lib.TENSORBOARD_DIR}/ does not '
        f'hold round {lost[0]} either: put back the metrics.csv of this '
        'run, or pass --overwrite to start it again')
  print(f'{folder.metrics_path} lacked rounds {span}: written back from '
        f'{run_dir_lib.TENSORBOARD_DIR}/', file=sys.stderr)


def run(config: Config, task: tasks_lib.FederatedTask, output_dir: str,
        show_progress: bool = True, checkpoint_every: int = 10,
        target_accuracy: float | None = None):
  """Trains for config.rounds rounds, writing the run folder `output_dir`.

  A row per round (`loop.COLUMNS`): the global objective f(w) = Σ p_k F_k(w)
  and accuracy over ALL clients' training data and over all test data (on
  eval rounds, and round 0 = the initial model), μ, the number of
  participating clients and local steps, and when asked the dissimilarity
  and the spread of the updates (FedISGD's VLG). Every `checkpoint_every`
  rounds (and after the last) the program state is saved; a folder holding
  the same unfinished run continues from its latest checkpoint and ends
  exactly as an uninterrupted run would; a finished run is left alone.
  Returns the rows of metrics.csv as dicts of numbers (measured columns).
  """
  train_arrays = tasks_lib.client_arrays(task.train)
  test_arrays = tasks_lib.client_arrays(task.test)
  config = dataclasses.replace(config, task=task.name)
  config.validate(num_clients=len(train_arrays))
  folder = run_dir_lib.RunDir(output_dir, config)
  if folder.status() == 'finished':
    return folder.rows()
  config = config.resolved()
  loop = build_loop(config, task.model_fn, train_arrays, test_arrays)
  state = loop.initial_state(
      learning.initial_model_weights(task.model_fn, config.seed))
  folder.start()
  if config.partition is not None:
    folder.write_label_histogram(partitions.label_histogram(
        train_arrays, task.client_ids))
  checkpoints = folder.state_manager()
  saved, last_round = loop_lib.wait(
      folder.load_checkpoint(checkpoints, loop.program_state(state)))
  first_round = 0
  if saved is not None:
    state, first_round = loop.restore(saved), last_round + 1
  _restore_rows(folder, first_round - 1, loop.column_names)
  summary_path = os.path.join(output_dir, results.SUMMARY_FILE)
  if os.path.exists(summary_path):  # Here only if damaged (status()).
    print(f'{summary_path} is damaged: the run writes it again',
          file=sys.stderr)
    os.remove(summary_path)
  round_seconds = []

  def on_round(round_num, row, seconds):
    del row
    if round_num > 0:
      round_seconds.append(seconds)

  try:
    loop_lib.run(loop, state, range(first_round, config.rounds + 1),
                 release_manager=folder.release_manager(),
                 state_manager=checkpoints, checkpoint_every=checkpoint_every,
                 show_progress=show_progress, on_round=on_round)
  except Diverged as e:
    raise type(e)(f'{e}; metrics so far are in {folder.metrics_path}'
                  ) from None
  examples_per_client = float(np.mean(
      [len(next(iter(a.values()))) for a in train_arrays]))
  written = results.read_rows(output_dir)
  summary = results.summarize(output_dir, target_accuracy, examples_per_client,
                              rows=written)
  rows = [results.typed(row) for row in written]
  summary.update({f'final_{name}': next(
      (r[name] for r in reversed(rows) if name in r), None)
                  for name in loop.metrics})
  summary.update(
      finished=True, num_clients=len(train_arrays),
      train_metrics_over=(f'{config.eval_clients} of {len(train_arrays)} '
                          'clients (--eval_clients)' if config.eval_clients
                          else 'all clients'),
      examples_per_client=examples_per_client,
      resumed_from_round=first_round - 1 if first_round else None,
      median_seconds_per_round=(float(np.median(round_seconds))
                                if round_seconds else None),
      seconds=float(np.sum(round_seconds)),
      seconds_counts=SECONDS_COUNTS)
  folder.finish(summary)
  return rows
