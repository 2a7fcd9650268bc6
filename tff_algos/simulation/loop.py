"""The round loop: one loop, for every algorithm, that the command line,
the public trainer, the notebooks and the benchmarks run.

A `Loop` knows a learning process, the sampler that picks each round's
clients, stragglers and minibatches, the clients' training arrays and the
round callbacks (`algorithms.callbacks`): everything that happens between
rounds, from the evaluation to the outputs. `Loop.step` runs one round and
its callbacks; `Loop.run` runs rounds, stopping on Ctrl-C, SIGTERM or a
callback's request.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import dataclasses
import time
from typing import Any

import numpy as np

from tff_algos.algorithms.callbacks import in_order
from tff_algos.algorithms.callbacks import RoundCallback
from tff_algos.algorithms.callbacks import RoundEnd
from tff_algos.simulation import client_inputs
from tff_algos.simulation.client_store import ClientStore
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import StragglerPolicy

# The row's values a round's training writes (`Loop.train`), before any
# callback runs.
TRAINING_VALUES = (
  'participants',
  'local_steps',
  'update_non_finite',
  'update_spread',
)


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


class StopRequests:
  """The stop requests (signal numbers) a run has received. A signal
  handler records one with `request` and raises the KeyboardInterrupt it
  returns; Python ignores an exception raised while a garbage-collector
  callback runs, so `Loop.run` also stops after the round in which a
  request arrived. Each loop has its own: a request never reaches another
  run."""

  def __init__(self):
    self._signals = []

  def request(self, signum: int) -> KeyboardInterrupt:
    self._signals.append(signum)
    return _interrupt(signum)

  @property
  def pending(self) -> int | None:
    """The last request's signal, if one is unhandled."""
    return self._signals[-1] if self._signals else None

  def clear(self):
    self._signals.clear()


def _interrupt(signum: int) -> KeyboardInterrupt:
  error = KeyboardInterrupt()
  error.signum = signum
  return error


@dataclasses.dataclass
class Loop:
  """One federated training run's rounds.

  Attributes:
    process: a `tff.learning.templates.LearningProcess` taking scheduled
      client inputs (`learning.ScheduledInput`).
    sampler: who trains each round, who straggles, in what minibatch order.
    policy: whether stragglers' updates are dropped or kept.
    batch_size: B (-1: each client's whole dataset).
    train_arrays: every client's training data, by client index.
    callbacks: run at the end of every round, in order (`in_order`: each
      after the writers of what it requires or reads).
    release_empty_rounds: a round without participants runs the process
      too (a DP aggregator releases the noise of a zero sum: every round
      is a release, as the accountant counts it); otherwise it keeps the
      model (w_{t+1} = w_t), as a mean of no updates is undefined.
    computed: for a `learning.ComputedProcess`, `computed(state,
      schedules, round_num)` → the clients' computed results
      (`simulation.compiled.Engine.inputs`); None: each client's data and
      minibatch schedule go to the process (`client_inputs`).
    client_store: for a process taking `learning.StoredInput`, the store
      of `train_arrays` its clients read (`client_store.ClientStore`).
    stop_requests: where the run's signal handlers record a stop request
      (`StopRequests`).
  """

  process: Any
  sampler: ClientSampler
  policy: StragglerPolicy
  batch_size: int
  train_arrays: Sequence[Mapping[str, np.ndarray]]
  callbacks: Sequence[RoundCallback] = ()
  release_empty_rounds: bool = False
  computed: Callable[[Any, Sequence[Any], int], list] | None = None
  client_store: ClientStore | None = None
  stop_requests: StopRequests = dataclasses.field(default_factory=StopRequests)

  def __post_init__(self):
    self.callbacks = in_order(self.callbacks, TRAINING_VALUES)

  def add(self, callbacks: Sequence[RoundCallback]) -> None:
    """Adds `callbacks` after the loop's own (each still after the writers
    of what it requires or reads)."""
    self.callbacks = in_order([*self.callbacks, *callbacks], TRAINING_VALUES)

  def initial_state(self, model_weights):
    """The process's initial state holding `model_weights`."""
    return self.process.set_model_weights(
      self.process.initialize(), model_weights
    )

  def program_state(self, state):
    """What a checkpoint holds: the process state and the callbacks'."""
    return collections.OrderedDict(
      process=state, **{c.name: c.state() for c in self.callbacks if c.name}
    )

  def restore(self, program_state):
    """The process state from a checkpoint (the callbacks' are restored)."""
    for callback in self.callbacks:
      if callback.name:
        callback.restore(program_state[callback.name])
    return program_state['process']

  def train(self, state, round_num):
    """Round `round_num`'s training: (state, row, process metrics). Round 0
    trains nothing; nor does a round without participants (none drawn, or
    all dropped), unless `release_empty_rounds`."""
    if round_num == 0:
      return state, {}, None
    plans = self.sampler.participants(round_num, self.policy)
    row = dict(participants=len(plans), local_steps=0)
    if not plans and not self.release_empty_rounds:
      return state, row, None
    if self.computed is not None:
      inputs = self.computed(
        state,
        client_inputs.schedules(
          self.sampler, plans, self.train_arrays, round_num, self.batch_size
        ),
        round_num,
      )
    else:
      if self.client_store is not None:
        self.client_store.touch()  # In use: not to be deleted.
      inputs = client_inputs.round_inputs(
        self.sampler,
        plans,
        self.train_arrays,
        round_num,
        self.batch_size,
        self.client_store,
      )
    output = self.process.next(state, inputs)
    client_work = output.metrics['client_work']
    row['local_steps'] = client_work['local_steps']
    # TFF's apply-optimizer finalizer counts the non-finite updates it
    # rejected (keeping w_t).
    row['update_non_finite'] = output.metrics.get('finalizer', {}).get(
      'update_non_finite', 0
    )
    if 'update_spread' in client_work and plans:  # 0/0 without clients.
      row['update_spread'] = client_work['update_spread']
    return output.state, row, output.metrics

  def step(self, state, round_num) -> RoundEnd:
    """Round `round_num`: its training, then every callback."""
    started = time.perf_counter()
    state, row, metrics = self.train(state, round_num)
    end = RoundEnd(
      round_num,
      row,
      self.process,
      state,
      metrics,
      started=started,
      update_spread=row.get('update_spread'),
      update_non_finite=bool(row.get('update_non_finite')),
    )
    for callback in self.callbacks:
      callback.after_round(end)
    return end

  def run(self, state, rounds: range):
    """Runs `rounds` from `state`; returns the final state. A round whose
    callbacks set `stop` is the last. Ctrl-C raises Interrupted (a
    KeyboardInterrupt) naming the round, as does the end of a round during
    which a stop was requested (`stop_requests`)."""
    for callback in self.callbacks:
      callback.before_training(rounds)
    try:
      for round_num in rounds:
        try:
          end = self.step(state, round_num)
          state = end.state
          if self.stop_requests.pending is not None:
            # Its KeyboardInterrupt was swallowed.
            raise _interrupt(self.stop_requests.pending)
        except (KeyboardInterrupt, SystemError) as e:
          # A signal's KeyboardInterrupt raised inside a C call (numpy's
          # __array__ as TensorFlow converts a round's inputs) arrives as
          # the SystemError it caused.
          if isinstance(e, SystemError):
            if not isinstance(e.__cause__, KeyboardInterrupt):
              raise
            e = e.__cause__
          self.stop_requests.clear()  # Handled: resuming starts afresh.
          interrupted = Interrupted(round_num)
          if hasattr(e, 'signum'):  # SIGTERM, as the CLI raises it.
            interrupted.signum = e.signum
          raise interrupted from None
        if end.stop:
          break
    finally:
      for callback in self.callbacks:
        callback.after_training()
    return state
