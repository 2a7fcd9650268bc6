"""Round callbacks: everything that happens between two rounds.

One kind of extension point, in the spirit of pfl-research's callbacks: at
the end of each round the loop gives every callback, in order, the round's
`RoundEnd`: the round number, its row of metrics.csv, the learning process
and its state, and the round's process metrics. A callback may add columns
to the row, change the state (e.g. a hyper-parameter), and stop the run; it
declares the round's values it reads and writes (the loop orders the
callbacks by them, and refuses a run where a value one requires has no
writer), says whether it reads the evaluation every round, and saves and
restores its own state with the run's checkpoints. The evaluation, FedProx's
adaptive μ, FedISGD's VLG, learning-rate schedules, `--stop_at_target` and
a run's outputs (metrics.csv and TensorBoard, checkpoints, the progress
bar) are all callbacks. An algorithm's callbacks live in its module and
come from its registry entry (`Algorithm.callbacks`).

Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any


@dataclasses.dataclass
class RoundEnd:
  """What a callback sees of a round that has just trained.

  Attributes:
    round_num: the round (0: the initial model, nothing trained).
    row: the round's row of metrics.csv so far (column → value); callbacks
      add columns.
    process: the `tff.learning.templates.LearningProcess`.
    state: its state after the round; a callback may replace it (e.g. with
      new hyper-parameters, `process.set_hparams`).
    metrics: the process's metrics of the round (None when nothing
      trained).
    stop: set it to make this round the run's last.
    started: `time.perf_counter()` at the round's start.
    training_loss: the global model's training loss, on the rounds the
      evaluation runs (before the callbacks after it; None otherwise): f(w)
      over all clients, or over a fixed sample of them (--eval_clients).
    test_accuracy: its test accuracy, on the same rounds.
    update_spread: (1/K)Σ_k‖u_k − ū‖² of the round's client updates, where
      the process measures it (None on rounds that trained nothing).
    update_non_finite: whether TFF's finalizer rejected the round's mean
      update as non-finite (and kept the model).
  """

  round_num: int
  row: dict
  process: Any
  state: Any
  metrics: Mapping[str, Any] | None = None
  stop: bool = False
  started: float = 0.0
  training_loss: float | None = None
  test_accuracy: float | None = None
  update_spread: float | None = None
  update_non_finite: bool = False
  _weights: Any = dataclasses.field(default=None, repr=False)
  _weights_of: Any = dataclasses.field(default=None, repr=False)

  @property
  def weights(self):
    """The global model's weights after the round (read once, when a
    callback reads them: `learning.model_weights`)."""
    if self._weights is None or self._weights_of is not self.state:
      # In the call: this module is imported where TensorFlow is not.
      from tff_algos import learning

      self._weights = learning.model_weights(self.process, self.state)
      self._weights_of = self.state
    return self._weights


class RoundCallback:
  """Runs at the end of every round; subclass it and override
  `after_round` (and the rest as needed).

  The round's values are `RoundEnd`'s measurements (`training_loss`,
  `test_accuracy`, `update_spread`, `update_non_finite`), read as its
  fields, and the columns other callbacks add to the row.

  Attributes:
    name: the key of its state in a checkpoint ('' for a callback without
      state).
    needs_evaluation: whether it reads the global training loss every
      round (the evaluation then runs every round).
    columns: the metrics.csv columns it adds, name → what it holds (their
      descriptions label plots); it writes them.
    writes: the other values it sets.
    requires: the values it cannot do without: it runs after the callbacks
      that write them, and a run where none does is refused.
    reads: the values it uses on the rounds that have them: it runs after
      the callbacks that write them.
  """

  name: str = ''
  needs_evaluation: bool = False
  columns: Mapping[str, str] = {}
  writes: Sequence[str] = ()
  requires: Sequence[str] = ()
  reads: Sequence[str] = ()

  def after_round(self, end: RoundEnd) -> None:
    """The round `end` has trained: add to its row, change its state or
    stop the run."""

  def before_training(self, rounds: range) -> None:
    """The loop is about to run `rounds` (e.g. a progress bar opens)."""

  def after_training(self) -> None:
    """The loop has ended, however it ended (e.g. the bar closes)."""

  def state(self) -> Mapping[str, Any]:
    """Its state for a checkpoint (numbers or arrays, by name)."""
    return {}

  def restore(self, state: Mapping[str, Any]) -> None:
    """Takes back the state `state()` gave, from a checkpoint."""
    del state


def in_order(
  callbacks: Sequence[RoundCallback], given: Sequence[str] = ()
) -> list[RoundCallback]:
  """`callbacks` ordered so that each runs after those that write what it
  requires or reads, otherwise in the order given (which decides among
  the writers of one value, and puts outputs after what they record).
  `given`: the values the loop itself writes. ValueError naming a callback
  whose required value no callback writes, or callbacks that wait for
  each other."""
  writers = {}
  for callback in callbacks:
    for value in (*callback.columns, *callback.writes):
      writers.setdefault(value, []).append(callback)
  for callback in callbacks:
    missing = [
      v for v in callback.requires if v not in writers and v not in given
    ]
    if missing:
      raise ValueError(
        f'{type(callback).__name__} requires {", ".join(missing)}, which '
        'no callback of the run writes'
      )
  waits = {
    id(c): {
      id(w)
      for v in (*c.requires, *c.reads)
      for w in writers.get(v, ())
      if w is not c
    }
    for c in callbacks
  }
  ordered, placed, left = [], set(), list(callbacks)
  while left:
    ready = next((c for c in left if waits[id(c)] <= placed), None)
    if ready is None:
      names = ', '.join(type(c).__name__ for c in left)
      raise ValueError(f'the callbacks {names} wait for each other')
    ordered.append(ready)
    placed.add(id(ready))
    left.remove(ready)
  return ordered
