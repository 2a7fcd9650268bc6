"""A run's outputs, as round callbacks: its rows released to metrics.csv and
TensorBoard (`Release`), its checkpoints (`Checkpoints`), the progress bar
(`Progress`) and the time each round took (`Timer`). They come last in a
run's callbacks, so that they see every column the others added.
"""

import asyncio
import collections
from collections.abc import Callable, Sequence
import concurrent.futures
import sys
import time

import numpy as np
import tqdm

from tff_algos.algorithms.callbacks import RoundCallback
from tff_algos.simulation import callbacks

# Round values that are not columns and are never recorded.
_NOT_RECORDED = callbacks.KNOWN_METRICS


def wait(coroutine):
  """Runs a tff.program coroutine to its end, from any thread: in its own
  thread, since a notebook's thread already runs an event loop."""
  with concurrent.futures.ThreadPoolExecutor(1) as thread:
    return thread.submit(asyncio.run, coroutine).result()


class Release(RoundCallback):
  """Each round's row, as metrics.csv's columns `column_names` (round
  first), to a `tff.program.ReleaseManager` keyed by the round. A value a
  callback set without a column is said once on stderr."""

  def __init__(self, release_manager, column_names: Sequence[str]):
    self._manager = release_manager
    self._row_type = collections.namedtuple('RoundMetrics', column_names[1:])
    self._said = set()

  def after_round(self, end):
    names = self._row_type._fields
    for name in sorted(set(end.row) - set(names) - _NOT_RECORDED):
      if name not in self._said:
        self._said.add(name)
        print(
          f'note: {name} = {end.row[name]} has no column in '
          "metrics.csv: declare it in the algorithm's registry entry "
          "(Algorithm(metrics={...})) or its callback's columns to "
          'record it',
          file=sys.stderr,
        )
    # A namedtuple keeps the columns' order (a dict's keys would be sorted).
    wait(
      self._manager.release(
        self._row_type(**{c: _recorded(end.row.get(c)) for c in names}),
        end.round_num,
      )
    )


def _recorded(value):
  """`value` at the precision TensorBoard keeps (tf.summary.scalar's
  float32), so that rows written back from TensorBoard (`RunDir
  .rebuild_rows`) are byte-identical to the ones metrics.csv held: a
  float64 statistic (ε, the clients' percentiles) is released rounded."""
  if isinstance(value, (float, np.floating)):
    return float(np.float32(value))
  return value


class Checkpoints(RoundCallback):
  """Saves the program state (`program_state(state)`: the process's and
  the callbacks') with a `tff.program.ProgramStateManager` every `every`
  rounds, after the last round and after a round that stops the run."""

  def __init__(
    self, state_manager, program_state: Callable, every: int, last_round: int
  ):
    self._manager = state_manager
    self._program_state = program_state
    self._every = every
    self._last = last_round

  def after_round(self, end):
    if (
      end.round_num % self._every == 0
      or end.round_num == self._last
      or end.stop
    ):
      wait(self._manager.save(self._program_state(end.state), end.round_num))


class Progress(RoundCallback):
  """A progress bar on stderr: rounds done, and the latest evaluated
  round's loss, test accuracy and hyper-parameter columns."""

  def __init__(self, hparam_columns=(), enabled: bool = True):
    self._hparams = tuple(hparam_columns)
    self.reads = ('training_loss', 'test_accuracy', *self._hparams)
    self._enabled = enabled
    self._bar = None

  def before_training(self, rounds):
    self._bar = tqdm.tqdm(
      total=rounds.stop - 1,
      initial=max(rounds.start - 1, 0),
      file=sys.stderr,
      unit='round',
      disable=not self._enabled,
      dynamic_ncols=True,
    )

  def after_round(self, end):
    if end.training_loss is not None:  # An evaluated round: say which.
      self._bar.set_postfix(
        collections.OrderedDict(
          [('evaluated', f'round {end.round_num}')]
          + [
            (label, f'{value:{spec}}')
            for label, value, spec in (
              ('loss', end.training_loss, '.4f'),
              ('test_acc', end.test_accuracy, '.4f'),
              *((name, end.row.get(name), 'g') for name in self._hparams),
            )
            if value is not None
          ]
        ),
        refresh=False,
      )
    if end.round_num > 0:
      self._bar.update()

  def after_training(self):
    if self._bar is not None:
      self._bar.close()


class Timer(RoundCallback):
  """The seconds each round took, from its training to this callback (put
  it last), of the rounds after round 0."""

  def __init__(self):
    self.seconds = []

  def after_round(self, end):
    if end.round_num > 0:
      self.seconds.append(time.perf_counter() - end.started)
