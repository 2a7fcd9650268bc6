"""The round loop: one loop, for every algorithm, that the CLI
(`simulation.experiment`), the notebooks and the benchmarks run.

A `Loop` knows a learning process, the sampler that picks each round's
clients, stragglers and minibatches, the clients' training arrays, the
measurements taken of the global model and per-round hooks (e.g. FedProx's
adaptive μ). `Loop.step` runs one round and returns its row of metrics;
`run` drives the rounds with TFF's program release and state managers
(metrics.csv, TensorBoard, checkpoints) and a progress bar.
"""

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import math
import sys
import time
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import tensorflow_federated as tff
import tqdm

from tff_algos.simulation import client_inputs
from tff_algos.simulation.columns import COLUMNS
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import StragglerPolicy

# What a round's metrics hold that is read (or deliberately not recorded):
# any other number the process reports is an algorithm's metric, recorded
# when its registry entry declares it and reported once otherwise.
_KNOWN_METRICS = {'train', 'local_steps', 'participants', 'update_spread',
                  'update_squared_norm', 'update_non_finite', 'mean_value',
                  'mean_weight', 'uniform_mean_squared_norm'}


def _scalars(metrics, prefix=''):
  """(path, name, value) of every number in nested round metrics."""
  for name, value in metrics.items():
    path = f'{prefix}/{name}' if prefix else name
    if isinstance(value, Mapping):
      if name != 'train':  # The clients' own running metrics.
        yield from _scalars(value, path)
    elif np.ndim(value) == 0 and isinstance(value, (int, float, np.number)):
      yield path, name, value


class Diverged(RuntimeError):
  """Training diverged: the run stops (its rows so far are kept)."""


class NonFiniteLoss(Diverged):
  """The global training loss became NaN or infinite."""


class UpdateRejected(Diverged):
  """The clients' mean update was not finite, so TFF's finalizer rejected it
  and kept the model: the run would go on without training."""


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (or SIGTERM, through the CLI) during a round, or at its end:
  `round_num` is that round; the checkpoints so far are intact."""

  def __init__(self, round_num):
    super().__init__(round_num)
    self.round_num = round_num


_STOP_REQUESTS = []  # Signal numbers received (request_stop).


def request_stop(signum: int) -> KeyboardInterrupt:
  """Records a stop request and returns the KeyboardInterrupt (carrying
  `signum`) for the signal handler to raise. Python ignores an exception
  raised while a garbage-collector callback runs, so `run` also stops after
  the round in which a request arrived."""
  _STOP_REQUESTS.append(signum)
  return _interrupt(signum)


def _interrupt(signum: int) -> KeyboardInterrupt:
  error = KeyboardInterrupt()
  error.signum = signum
  return error


@dataclasses.dataclass(frozen=True)
class Measurement:
  """A measurement of the global model: `measure(weights)` gives columns of
  the row on the rounds where `due(round_num)` holds."""
  measure: Callable[[Any], Mapping[str, float]]
  due: Callable[[int], bool]


class Hook(Protocol):
  """Runs after each round's measurements (e.g. `AdaptiveMuHook`).

  `name` keys its state in a checkpoint; `state()`/`restore()` save and
  load it; `after_round` may change the process state (its hparams) and
  the row.
  """
  name: str

  def state(self) -> Mapping[str, Any]:
    ...

  def restore(self, state: Mapping[str, Any]) -> None:
    ...

  def after_round(self, round_num: int, row: dict, process, state) -> Any:
    ...


@dataclasses.dataclass
class Loop:
  """One federated training run's rounds, without its outputs.

  Attributes:
    process: a `tff.learning.templates.LearningProcess` taking scheduled
      client inputs (`learning.ScheduledInput`).
    sampler: who trains each round, who straggles, in what minibatch order.
    policy: whether stragglers' updates are dropped or kept.
    batch_size: B (-1: each client's whole dataset).
    train_arrays: every client's training data, by client index.
    measurements: what is measured of the global model, and when.
    hooks: run after each round.
    columns: constant columns of every row (e.g. μ).
    round_metrics: the algorithm's columns derived from a row (FedISGD's
      VLG), or None.
    metrics: the algorithm's own columns (name → description): read by
      name from the process's round metrics (or set by `round_metrics`).
    stop_when: a round whose row it holds true for is the run's last
      (e.g. --stop_at_target), or None.
  """
  process: Any
  sampler: ClientSampler
  policy: StragglerPolicy
  batch_size: int
  train_arrays: Sequence[Mapping[str, np.ndarray]]
  measurements: Sequence[Measurement] = ()
  hooks: Sequence[Hook] = ()
  columns: Mapping[str, float] = dataclasses.field(default_factory=dict)
  round_metrics: Callable[[dict], Mapping[str, float]] | None = None
  metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
  stop_when: Callable[[dict], bool] | None = None  # Ends the run early.
  _unreported: set = dataclasses.field(default_factory=set, init=False,
                                       repr=False)

  @property
  def column_names(self) -> tuple[str, ...]:
    """metrics.csv's columns: the built-in ones, then the algorithm's."""
    return COLUMNS + tuple(m for m in self.metrics if m not in COLUMNS)

  @functools.cached_property
  def _row_type(self):
    return collections.namedtuple('RoundMetrics', self.column_names[1:])

  def release_value(self, row):
    """A round's row for the release managers: a namedtuple, which keeps
    the columns' order (a dict's keys would be sorted). A value a hook or
    `round_metrics` set without a column is reported once on stderr."""
    names = self._row_type._fields
    for name in set(row) - set(names) - _KNOWN_METRICS:
      self._unrecorded(name, row[name])
    return self._row_type(**{c: row.get(c) for c in names})

  def _unrecorded(self, path, value):
    """Says once on stderr that `path` has no column (never dropped in
    silence)."""
    if path not in self._unreported:
      self._unreported.add(path)
      print(f'note: {path} = {value} has no column in metrics.csv: declare '
            'it in the algorithm\'s registry entry (Algorithm(metrics='
            '{...})) to record it', file=sys.stderr)

  def _algorithm_metrics(self, metrics):
    """The declared metrics of a round's process metrics; an undeclared
    number is reported (`_unrecorded`)."""
    row = {}
    for path, name, value in _scalars(metrics):
      if name in self.metrics:
        row[name] = value
      elif name not in _KNOWN_METRICS:
        self._unrecorded(path, value)
    return row

  def initial_state(self, model_weights):
    """The process's initial state holding `model_weights`."""
    return self.process.set_model_weights(self.process.initialize(),
                                          model_weights)

  def program_state(self, state):
    """What a checkpoint holds: the process state and the hooks' states."""
    return collections.OrderedDict(
        process=state, **{hook.name: hook.state() for hook in self.hooks})

  def restore(self, program_state):
    """The process state from a checkpoint (the hooks' are restored)."""
    for hook in self.hooks:
      hook.restore(program_state[hook.name])
    return program_state['process']

  def train(self, state, round_num):
    """Round `round_num`'s training: (state, row). Round 0 trains nothing;
    nor does a round whose participants were all dropped (w_{t+1} = w_t)."""
    row = dict(self.columns)
    if round_num == 0:
      return state, row
    plans = self.sampler.participants(round_num, self.policy)
    row.update(participants=len(plans), local_steps=0)
    if plans:
      output = self.process.next(state, client_inputs.round_inputs(
          self.sampler, plans, self.train_arrays, round_num, self.batch_size))
      state = output.state
      client_work = output.metrics['client_work']
      row['local_steps'] = client_work['local_steps']
      # TFF's apply-optimizer finalizer counts the non-finite updates it
      # rejected (keeping w_t).
      row['update_non_finite'] = output.metrics.get('finalizer', {}).get(
          'update_non_finite', 0)
      if 'update_spread' in client_work:
        row['update_spread'] = client_work['update_spread']
      row.update(self._algorithm_metrics(output.metrics))
    return state, row

  def step(self, state, round_num):
    """Round `round_num`: training, measurements, hooks. (state, row)."""
    state, row = self.train(state, round_num)
    due = [m for m in self.measurements if m.due(round_num)]
    if due:  # A TFF call: only on rounds that measure.
      weights = self.process.get_model_weights(state)
      for measurement in due:
        row.update(measurement.measure(weights))
    if self.round_metrics is not None:
      row.update(self.round_metrics(row))
    for hook in self.hooks:
      state = hook.after_round(round_num, row, self.process, state)
    return state, row


def wait(coroutine):
  """Runs a tff.program coroutine to its end, from any thread: in its own
  thread, since a notebook's thread already runs an event loop."""
  with concurrent.futures.ThreadPoolExecutor(1) as thread:
    return thread.submit(asyncio.run, coroutine).result()


def _round(loop, state, round_num, last, release_manager, state_manager,
           checkpoint_every, progress, on_round):
  """One round of `run`: the step, its release, checks and checkpoint."""
  start = time.perf_counter()
  state, row = loop.step(state, round_num)
  if release_manager is not None:
    wait(release_manager.release(loop.release_value(row), round_num))
  loss = row.get('train_loss')
  if loss is not None and not math.isfinite(loss):
    raise NonFiniteLoss(f'training loss is {loss} at round {round_num}')
  if row.get('update_non_finite'):
    raise UpdateRejected(
        f'the clients\' mean update is not finite at round {round_num} '
        '(TFF\'s finalizer rejected it and kept the model): training '
        'diverged; try a smaller learning rate')
  stop = loop.stop_when is not None and loop.stop_when(row)
  if state_manager is not None and (
      round_num % checkpoint_every == 0 or round_num == last or stop):
    wait(state_manager.save(loop.program_state(state), round_num))
  if row.get('train_loss') is not None:  # An evaluated round: say which.
    progress.set_postfix(collections.OrderedDict(
        [('evaluated', f'round {round_num}')] +
        [(label, f'{row[column]:{spec}}') for label, column, spec in (
            ('loss', 'train_loss', '.4f'),
            ('test_acc', 'test_accuracy', '.4f'), ('mu', 'mu', 'g'))
         if row.get(column) is not None]), refresh=False)
  if on_round is not None:
    on_round(round_num, row, time.perf_counter() - start)
  if round_num > 0:
    progress.update()
  return state, stop


def run(loop: Loop, state, rounds: range, *,
        release_manager: tff.program.ReleaseManager | None = None,
        state_manager: tff.program.ProgramStateManager | None = None,
        checkpoint_every: int = 10, show_progress: bool = False,
        on_round: Callable[[int, dict, float], None] | None = None):
  """Runs `rounds` of `loop` from `state`; returns the final state.

  Each round's row is released to `release_manager` (keyed by the round)
  and, every `checkpoint_every` rounds and after the last, the program
  state is saved with `state_manager`. Divergence stops the run once its row
  is released: a non-finite training loss (NonFiniteLoss) or a round whose
  mean update TFF's finalizer rejected as non-finite (UpdateRejected).
  Ctrl-C raises Interrupted (a KeyboardInterrupt) naming the round, as does
  the end of a round during which `request_stop` was called. A round that
  `loop.stop_when` holds for is the last (checkpointed).
  `on_round(round_num, row, seconds)` sees every row.
  """
  last = rounds[-1] if rounds else None
  progress = tqdm.tqdm(
      total=rounds.stop - 1, initial=max(rounds.start - 1, 0),
      file=sys.stderr, unit='round', disable=not show_progress,
      dynamic_ncols=True)
  with progress:
    for round_num in rounds:
      try:
        state, stop = _round(loop, state, round_num, last, release_manager,
                             state_manager, checkpoint_every, progress,
                             on_round)
        if _STOP_REQUESTS:  # Its KeyboardInterrupt was swallowed.
          raise _interrupt(_STOP_REQUESTS[-1])
      except KeyboardInterrupt as e:
        _STOP_REQUESTS.clear()  # Handled: a later run starts afresh.
        interrupted = Interrupted(round_num)
        if hasattr(e, 'signum'):  # SIGTERM, as the CLI raises it.
          interrupted.signum = e.signum
        raise interrupted from None
      if stop:
        break
  return state
