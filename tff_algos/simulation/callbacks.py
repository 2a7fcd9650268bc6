"""The simulation's round callbacks (`algorithms.callbacks.RoundCallback`):
what is measured of the global model, what ends a run early, and the
columns every row carries.

  Columns              constant columns (the algorithm's hyper-parameter)
  ReportedMetrics      the algorithm's declared process metrics
  Evaluation           f(w) and accuracy over all clients, per-client accuracy
  PrivacySpent         a DP run's ε after each round
  Dissimilarity        FedProx's gradient variance and B(w)
  StopAtAccuracy       --stop_at_target
  DivergenceCheck      a non-finite loss or a rejected update stops the run

A run's outputs (metrics.csv, checkpoints, progress) are callbacks too
(`outputs`).
"""

from collections.abc import Callable, Mapping
import math
import sys

import numpy as np

from tff_algos.algorithms.callbacks import RoundCallback
from tff_algos.privacy import accounting
from tff_algos.privacy import mechanisms
from tff_algos.simulation import columns as columns_lib
from tff_algos.simulation import evaluation
from tff_algos.simulation import loop

# What a round's process metrics hold that the loop reads (or deliberately
# does not record): any other number is an algorithm's metric, recorded when
# its registry entry declares it and reported once otherwise.
KNOWN_METRICS = {
  'train',
  'local_steps',
  'participants',
  'update_spread',
  'update_squared_norm',
  'update_non_finite',
  'mean_value',
  'mean_weight',
  'uniform_mean_squared_norm',
  'clip',
}


class Columns(RoundCallback):
  """Constant columns of every row (e.g. μ of the local objective)."""

  def __init__(self, values: Mapping[str, float]):
    self._values = dict(values)
    self.writes = tuple(values)

  def after_round(self, end):
    end.row.update(self._values)


def _scalars(metrics, prefix=''):
  """(path, name, value) of every number in nested round metrics."""
  for name, value in metrics.items():
    path = f'{prefix}/{name}' if prefix else name
    if isinstance(value, Mapping):
      if name != 'train':  # The clients' own running metrics.
        yield from _scalars(value, path)
    elif np.ndim(value) == 0 and isinstance(value, (int, float, np.number)):
      yield path, name, value


class ReportedMetrics(RoundCallback):
  """The metrics an algorithm's process reports that its registry entry
  declares (`Algorithm.metrics`, name → description), found by name in a
  round's process metrics; a number it does not declare is said once on
  stderr (never dropped in silence)."""

  def __init__(self, declared: Mapping[str, str]):
    self.columns = dict(declared)
    self._unreported = set()

  def after_round(self, end):
    if end.metrics is None:
      return
    for path, name, value in _scalars(end.metrics):
      if name in self.columns:
        end.row[name] = value
      elif name not in KNOWN_METRICS and path not in self._unreported:
        self._unreported.add(path)
        print(
          f'note: {path} = {value} has no column in metrics.csv: declare '
          "it in the algorithm's registry entry (Algorithm(metrics="
          '{...})) to record it',
          file=sys.stderr,
        )


class Evaluation(RoundCallback):
  """f(w) and accuracy of the global model over the clients' training data
  (all of them, or with `sampled` a fixed sample, in columns that say so:
  `columns.SAMPLED`) and over all test data, on the rounds where
  `due(round_num)` holds; with `per_client` (for models whose accuracy can
  be split by client), also the distribution of the clients' own test
  accuracy, unweighted over the clients with test data, from the same pass
  over the data. `clients` keeps the last evaluated round's per-client
  accuracies: (round, `evaluation.ClientAccuracy`)."""

  def __init__(
    self,
    evaluate,
    train_arrays,
    test_arrays,
    due: Callable[[int], bool],
    per_client: bool = True,
    sampled: bool = False,
  ):
    self._evaluate = evaluate
    self._splits = (('train', train_arrays), ('test', test_arrays))
    self._due = due
    self._per_client = (
      per_client and test_arrays is not None and evaluate.per_client_accuracy
    )
    # The training metrics' columns: over a sample, names that say so.
    self._names = columns_lib.SAMPLED if sampled else {}
    self.columns = (
      evaluation.CLIENT_ACCURACY_COLUMNS if (self._per_client) else {}
    )
    self.writes = (
      'training_loss',
      'test_accuracy',
      *(
        self._names.get(column, column)
        for split, arrays in self._splits
        if arrays is not None
        for column in (f'{split}_loss', f'{split}_accuracy')
      ),
    )
    self.clients = None

  def after_round(self, end):
    if not self._due(end.round_num):
      return
    for split, arrays in self._splits:
      if arrays is None:
        continue
      if split == 'test' and self._per_client:
        metrics, clients = self._evaluate.with_clients(end.weights, arrays)
        end.row.update(
          evaluation.client_accuracy_summary(clients.accuracy, clients.counted)
        )
        self.clients = (end.round_num, clients)
      else:
        metrics = self._evaluate(end.weights, arrays)
      loss, accuracy = f'{split}_loss', f'{split}_accuracy'
      end.row.update(
        {
          self._names.get(loss, loss): metrics['loss'],
          self._names.get(accuracy, accuracy): metrics['accuracy'],
        }
      )
      if split == 'train':
        end.training_loss = float(metrics['loss'])
      else:
        end.test_accuracy = float(metrics['accuracy'])


class AdaptiveClip(RoundCallback):
  """The clip norm adaptive clipping used in the round. The aggregator
  reports, after round t, the clip it chose for round t + 1 (its state's,
  from the round's noised count); the callback writes it in round t + 1's
  row and keeps it meanwhile (checkpointed). Round 1 uses `initial`."""

  name = 'adaptive_clip'
  columns = {
    'dp_clip_norm': "the L2 norm the round's updates were "
    'clipped to (adaptive clipping)'
  }

  def __init__(self, initial: float):
    self._next = float(initial)

  def state(self):
    return {'next_clip': np.asarray(self._next, np.float64)}

  def restore(self, state):
    self._next = float(state['next_clip'])

  def after_round(self, end):
    if end.round_num == 0:
      return
    end.row['dp_clip_norm'] = self._next
    clip = (
      (end.metrics or {})
      .get('aggregator', {})
      .get('dp_query_metrics', {})
      .get('clip')
    )
    if clip is not None:
      self._next = float(clip)


class PrivacySpent(RoundCallback):
  """The ε a DP run has spent after each round, at its δ: `epsilons[t-1]`
  after round t (`accounting.epsilons_of` the mechanism the process was
  built with, computed once for the run's sampling and rounds); 0 at round
  0, before anything is released. With `deployment` (a noise cohort's),
  also the ε of the deployment the run stands for, in its own column.
  Every round it checks that the aggregator's state reports the
  `mechanism` accounted for: an ε is never written for another one."""

  def __init__(
    self, mechanism: accounting.Mechanism, epsilons, deployment=None
  ):
    self.mechanism = mechanism
    self._epsilons = list(epsilons)
    self._deployment = None if deployment is None else list(deployment)
    self.columns = dict(EPSILON_COLUMNS)
    if deployment is None:
      del self.columns['deployment_epsilon']

  def after_round(self, end):
    if end.round_num:
      self._check(end)
    for column, values in (
      ('epsilon', self._epsilons),
      ('deployment_epsilon', self._deployment),
    ):
      if values is not None:
        end.row[column] = values[end.round_num - 1] if end.round_num else 0.0

  def _check(self, end):
    events = mechanisms.dp_events(end.state)
    released = (
      accounting.Mechanism.of_event(events[0]) if len(events) == 1 else None
    )
    if released is None or not released.matches(self.mechanism):
      raise RuntimeError(
        f'round {end.round_num} released {events}, not the mechanism the '
        f'ε is computed for ({self.mechanism}): no ε is written for it'
      )


EPSILON_COLUMNS = {
  'epsilon': "ε of the trained model after the round, at the run's δ (its "
  "sampling's adjacency: config.json dp_adjacency)",
  'deployment_epsilon': 'ε after the round of the deployment a noise '
  'cohort stands for (M clients per round, noise z): '
  "not the trained model's",
}


class Dissimilarity(RoundCallback):
  """FedProx's gradient variance and dissimilarity B(w) every `every`
  rounds (`evaluation.build_dissimilarity`)."""

  writes = ('grad_variance', 'grad_dissimilarity')

  def __init__(self, dissimilarity, train_arrays, every: int):
    self._dissimilarity = dissimilarity
    self._arrays = train_arrays
    self._every = every

  def after_round(self, end):
    if end.round_num % self._every == 0:
      end.row.update(self._dissimilarity(end.weights, self._arrays))


class StopAtAccuracy(RoundCallback):
  """Ends the run at the first evaluated round whose test accuracy reaches
  `target` (all that rounds-to-target tables need)."""

  requires = ('test_accuracy',)

  def __init__(self, target: float):
    self._target = target

  def after_round(self, end):
    if end.test_accuracy is not None and end.test_accuracy >= self._target:
      end.stop = True


class DivergenceCheck(RoundCallback):
  """Stops the run (after its row is released) on a non-finite training
  loss (NonFiniteLoss) or a round whose mean update TFF's finalizer
  rejected as non-finite (UpdateRejected: it would keep the model and go on
  as if training)."""

  requires = ('update_non_finite',)
  reads = ('training_loss',)

  def after_round(self, end):
    loss = end.training_loss
    if loss is not None and not math.isfinite(loss):
      raise loop.NonFiniteLoss(
        f'training loss is {loss} at round {end.round_num}'
      )
    if end.update_non_finite:
      raise loop.UpdateRejected(
        f"the clients' mean update is not finite at round "
        f"{end.round_num} (TFF's finalizer rejected it and kept the "
        'model): training diverged; try a smaller learning rate'
      )
