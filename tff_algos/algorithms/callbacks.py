"""Round callbacks: everything that happens between two rounds.

One kind of extension point, in the spirit of pfl-research's callbacks: at
the end of each round the loop gives every callback, in order, the round's
`RoundEnd`: the round number, its row of metrics.csv, the learning process
and its state, and the round's process metrics. A callback may add columns
to the row, change the state (e.g. a hyper-parameter), and stop the run; it
says whether it reads the evaluation every round, and it saves and restores
its own state with the run's checkpoints. The evaluation, FedProx's
adaptive μ, FedISGD's VLG, learning-rate schedules, `--stop_at_target` and
a run's outputs (metrics.csv and TensorBoard, checkpoints, the progress
bar) are all callbacks. An algorithm's callbacks live in its module and
come from its registry entry (`Algorithm.callbacks`).

Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
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
  _weights: Any = dataclasses.field(default=None, repr=False)
  _weights_of: Any = dataclasses.field(default=None, repr=False)

  @property
  def weights(self):
    """The global model's weights after the round (one TFF call, made only
    when a callback reads them)."""
    if self._weights is None or self._weights_of is not self.state:
      self._weights = self.process.get_model_weights(self.state)
      self._weights_of = self.state
    return self._weights


class RoundCallback:
  """Runs at the end of every round; subclass it and override
  `after_round` (and the rest as needed).

  Attributes:
    name: the key of its state in a checkpoint ('' for a callback without
      state).
    needs_evaluation: whether it reads the global training loss every
      round (the evaluation then runs every round).
    columns: the metrics.csv columns it adds, name → what it holds (their
      descriptions label plots).
  """

  name: str = ''
  needs_evaluation: bool = False
  columns: Mapping[str, str] = {}

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
