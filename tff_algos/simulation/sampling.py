"""Who trains in each round, who straggles, and in what minibatch order.

Every draw is a function of (seed, round, client) only: not of the algorithm,
the model or anything that happened in earlier rounds. FedAvg, FedProx and
FedISGD therefore see exactly the same clients, stragglers, straggler epochs
and minibatches, as in the papers' comparisons, and a resumed run draws the
same as an uninterrupted one.
"""

import dataclasses
import enum

import numpy as np


class _Stream(enum.IntEnum):
  """Independent random streams, one per kind of draw."""
  SELECTION = 0
  STRAGGLERS = 1
  STRAGGLER_EPOCHS = 2
  MINIBATCH_ORDER = 3
  EVALUATION_CLIENTS = 4


class StragglerPolicy(enum.Enum):
  DROP = 'drop'        # FedAvg: stragglers' updates are discarded.
  PARTIAL = 'partial'  # FedProx: stragglers' partial solutions are kept.


@dataclasses.dataclass(frozen=True)
class ClientPlan:
  client: int      # index into the task's client list
  epochs: int      # local epochs this round: E, or x ~ U{1..E-1} if straggling
  straggler: bool


@dataclasses.dataclass(frozen=True)
class ClientSampler:
  """The FedAvg/FedProx round structure (McMahan et al. Alg. 1; Li et al. §5.2).

  Each round picks `clients_per_round` of `num_clients` uniformly without
  replacement. A fraction `straggler_fraction` of them are stragglers (as in
  the FedProx code, K − round(K·(1 − s)) of the K selected); a straggler runs
  x ~ U{1, …, E − 1} epochs instead of E: "fewer than E" (FedProx §5.2,
  FedISGD §3.4: E < 20; the FedProx code draws randint(1, E)). With E = 1
  there is no smaller whole number of epochs: a straggler runs its 1 epoch
  (and is still dropped by `StragglerPolicy.DROP`).
  """
  num_clients: int
  clients_per_round: int
  epochs: int
  seed: int
  straggler_fraction: float = 0.0

  def __post_init__(self):
    if not 1 <= self.clients_per_round <= self.num_clients:
      raise ValueError(
          f'clients_per_round must be in [1, {self.num_clients}], '
          f'got {self.clients_per_round}')
    if self.epochs < 1:
      raise ValueError(f'epochs must be >= 1, got {self.epochs}')
    if not 0.0 <= self.straggler_fraction <= 1.0:
      raise ValueError('straggler_fraction must be in [0, 1], '
                       f'got {self.straggler_fraction}')

  def _rng(self, stream, round_num, client=0):
    return np.random.default_rng([self.seed, round_num, client, int(stream)])

  def round_plan(self, round_num: int) -> list[ClientPlan]:
    """The selected clients of `round_num`, sorted, with their epochs."""
    k = self.clients_per_round
    selected = np.sort(self._rng(_Stream.SELECTION, round_num).choice(
        self.num_clients, size=k, replace=False))
    num_stragglers = k - int(round(k * (1.0 - self.straggler_fraction)))
    stragglers = set(self._rng(_Stream.STRAGGLERS, round_num).choice(
        selected, size=num_stragglers, replace=False).tolist())
    plans = []
    for client in selected.tolist():
      epochs = self.epochs
      if client in stragglers:
        epochs = int(self._rng(_Stream.STRAGGLER_EPOCHS, round_num,
                               client).integers(1, max(self.epochs, 2)))
      plans.append(ClientPlan(client, epochs, client in stragglers))
    return plans

  def participants(self, round_num: int, policy: StragglerPolicy):
    """The plans of the clients whose updates reach the server."""
    plans = self.round_plan(round_num)
    if policy == StragglerPolicy.DROP:
      return [p for p in plans if not p.straggler]
    return plans

  def evaluation_clients(self, count: int) -> list[int]:
    """A fixed random subset of `count` clients (sorted indices), a function
    of the seed alone: whose data estimate the training metrics when not
    all clients are evaluated (`--eval_clients`)."""
    if not 1 <= count <= self.num_clients:
      raise ValueError(f'count must be in [1, {self.num_clients}], '
                       f'got {count}')
    return np.sort(self._rng(_Stream.EVALUATION_CLIENTS, 0).choice(
        self.num_clients, size=count, replace=False)).tolist()

  def minibatch_schedule(self, round_num: int, client: int,
                         num_examples: int, epochs: int, batch_size: int):
    """(example_order, batch_ends) for `epochs` passes over the local data.

    Each epoch is a fresh permutation, cut into minibatches of `batch_size`
    (the last one may be smaller); batch_size = -1 means B = ∞, the whole
    local dataset as one batch. A straggler's x epochs are the first x of the
    E epochs it would have run.
    """
    if num_examples < 1:
      raise ValueError(f'client {client} has no training examples')
    rng = self._rng(_Stream.MINIBATCH_ORDER, round_num, client)
    order = np.concatenate(
        [rng.permutation(num_examples) for _ in range(epochs)])
    b = num_examples if batch_size == -1 else batch_size
    ends_in_epoch = np.minimum(np.arange(b, num_examples + b, b), num_examples)
    ends = np.concatenate([ends_in_epoch + e * num_examples
                           for e in range(epochs)])
    return order.astype(np.int32), ends.astype(np.int32)
