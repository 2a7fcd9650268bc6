"""Who trains in each round, who straggles, and in what minibatch order.

Every draw is a function of (seed, round, client) only: not of the algorithm,
the model or anything that happened in earlier rounds. FedAvg, FedProx and
FedISGD therefore see exactly the same clients, stragglers, straggler epochs
and minibatches, as in the papers' comparisons, and a resumed run draws the
same as an uninterrupted one.

Who trains follows one of three schemes (`SamplingScheme`): K of the N
clients uniformly without replacement (FedAvg, FedProx's experiments), each
client independently with probability q = K/N (Poisson sampling, what the
standard analyses of differentially private federated training assume), or
K clients drawn with probability proportional to their numbers of training
examples n_k (FedProx's Algorithm 2 and its Appendix C.3.4).
"""

from collections.abc import Sequence
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
  POISSON_SELECTION = 5
  PROPORTIONAL_SELECTION = 6


class SamplingScheme(enum.Enum):
  """How each round's clients are chosen.

  UNIFORM: K of the N clients, uniformly without replacement: the cohort
    always has K clients.
  POISSON: each client independently with probability q = K/N, so the
    cohort has K clients on average (Binomial(N, q)), and none with
    probability (1 − q)^N. A round without clients trains nothing, as a
    round whose participants were all dropped: it keeps the model, or
    under DP releases it with the noise of a zero sum (`loop.Loop`).
  PROPORTIONAL: K distinct clients drawn one after another, each with
    probability ∝ n_k among the clients not yet drawn: what the FedProx
    authors' code does (numpy's `choice(N, K, replace=False, p=n_k/n)`).
    They pair it with the unweighted (1/K) mean of the updates (Li et al.
    2020, Algorithm 2 and Figure 12), not the n_k-weighted one: the weights
    are already in the sampling.
  """

  UNIFORM = 'uniform'
  POISSON = 'poisson'
  PROPORTIONAL = 'proportional'


class StragglerPolicy(enum.Enum):
  DROP = 'drop'  # FedAvg: stragglers' updates are discarded.
  PARTIAL = 'partial'  # FedProx: stragglers' partial solutions are kept.


@dataclasses.dataclass(frozen=True)
class ClientPlan:
  client: int  # index into the task's client list
  epochs: int  # local epochs this round: E, or x ~ U{1..E-1} if straggling
  straggler: bool


@dataclasses.dataclass(frozen=True)
class ClientSampler:
  """The FedAvg/FedProx round structure (McMahan et al. Alg. 1; Li et al. §5.2).

  Each round picks clients by `scheme` (`SamplingScheme`; by default
  `clients_per_round` of `num_clients` uniformly without replacement).
  A fraction `straggler_fraction` of the k selected are stragglers (as in
  the FedProx code, k − round(k·(1 − s)) of them, k being the round's cohort
  size, which varies under Poisson sampling); a straggler runs
  x ~ U{1, …, E − 1} epochs instead of E: "fewer than E" (FedProx §5.2,
  FedISGD §3.4: E < 20; the FedProx code draws randint(1, E)). With E = 1
  there is no smaller whole number of epochs: a straggler runs its 1 epoch
  (and is still dropped by `StragglerPolicy.DROP`).

  Attributes:
    num_clients: N.
    clients_per_round: K: the cohort size, or its mean under POISSON.
    epochs: E, the local epochs of a client that does not straggle.
    seed: the run's seed; every draw is a function of it, the round and
      the client.
    straggler_fraction: s, in [0, 1].
    scheme: a `SamplingScheme` or its name.
    client_sizes: each client's number of training examples n_k, by client
      index (PROPORTIONAL needs them, all positive; the other schemes do
      not read them).
  """

  num_clients: int
  clients_per_round: int
  epochs: int
  seed: int
  straggler_fraction: float = 0.0
  scheme: SamplingScheme | str = SamplingScheme.UNIFORM
  client_sizes: Sequence[int] | None = None
  # A round of a fixed number of minibatch steps instead of E epochs (a
  # centralized baseline's "round": a block of SGD updates).
  steps_per_round: int | None = None

  def __post_init__(self):
    try:
      scheme = SamplingScheme(self.scheme)
    except ValueError:
      raise ValueError(
        f'unknown sampling scheme {self.scheme!r}: one of '
        f'{", ".join(s.value for s in SamplingScheme)}'
      ) from None
    object.__setattr__(self, 'scheme', scheme)
    if scheme == SamplingScheme.POISSON and not (
      1 <= self.clients_per_round <= self.num_clients
    ):
      raise ValueError(
        'poisson sampling includes each client with probability '
        'q = clients_per_round / num_clients, so clients_per_round must '
        f'be in [1, {self.num_clients}], got {self.clients_per_round}'
      )
    if not 1 <= self.clients_per_round <= self.num_clients:
      raise ValueError(
        f'clients_per_round must be in [1, {self.num_clients}], '
        f'got {self.clients_per_round}'
      )
    if self.client_sizes is not None:
      sizes = tuple(self.client_sizes)
      if len(sizes) != self.num_clients:
        raise ValueError(
          f'client_sizes has {len(sizes)} entries for '
          f'{self.num_clients} clients'
        )
      if not all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool)
        for n in sizes
      ):
        raise ValueError('client_sizes must be whole numbers of examples')
      object.__setattr__(self, 'client_sizes', tuple(int(n) for n in sizes))
    if scheme == SamplingScheme.PROPORTIONAL:
      if self.client_sizes is None:
        raise ValueError(
          'proportional sampling needs client_sizes (each '
          "client's number of training examples)"
        )
      empty = [k for k, n in enumerate(self.client_sizes) if n <= 0]
      if empty:
        raise ValueError(
          'proportional sampling needs every client to have training '
          f'examples: client(s) {empty[:10]} have none (a client drawn '
          'with probability 0 could never train)'
        )
    if self.epochs < 1:
      raise ValueError(f'epochs must be >= 1, got {self.epochs}')
    if not 0.0 <= self.straggler_fraction <= 1.0:
      raise ValueError(
        f'straggler_fraction must be in [0, 1], got {self.straggler_fraction}'
      )

  def _rng(self, stream, round_num, client=0):
    return np.random.default_rng([self.seed, round_num, client, int(stream)])

  def selected(self, round_num: int) -> np.ndarray:
    """The clients `scheme` selects in `round_num`: sorted indices (none
    may be selected under POISSON)."""
    if self.scheme == SamplingScheme.POISSON:
      q = self.clients_per_round / self.num_clients
      uniforms = self._rng(_Stream.POISSON_SELECTION, round_num).random(
        self.num_clients
      )
      return np.flatnonzero(uniforms < q)
    if self.scheme == SamplingScheme.PROPORTIONAL:
      sizes = np.asarray(self.client_sizes, np.float64)
      return np.sort(
        self._rng(_Stream.PROPORTIONAL_SELECTION, round_num).choice(
          self.num_clients,
          size=self.clients_per_round,
          replace=False,
          p=sizes / sizes.sum(),
        )
      )
    return np.sort(
      self._rng(_Stream.SELECTION, round_num).choice(
        self.num_clients, size=self.clients_per_round, replace=False
      )
    )

  def round_plan(self, round_num: int) -> list[ClientPlan]:
    """The selected clients of `round_num`, sorted, with their epochs (an
    empty list for a Poisson round that selected nobody)."""
    selected = self.selected(round_num)
    k = len(selected)
    if k == 0:
      return []
    num_stragglers = k - int(round(k * (1.0 - self.straggler_fraction)))
    stragglers = set(
      self._rng(_Stream.STRAGGLERS, round_num)
      .choice(selected, size=num_stragglers, replace=False)
      .tolist()
    )
    plans = []
    for client in selected.tolist():
      epochs = self.epochs
      if client in stragglers:
        epochs = int(
          self._rng(_Stream.STRAGGLER_EPOCHS, round_num, client).integers(
            1, max(self.epochs, 2)
          )
        )
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
      raise ValueError(f'count must be in [1, {self.num_clients}], got {count}')
    return np.sort(
      self._rng(_Stream.EVALUATION_CLIENTS, 0).choice(
        self.num_clients, size=count, replace=False
      )
    ).tolist()

  def minibatch_schedule(
    self,
    round_num: int,
    client: int,
    num_examples: int,
    epochs: int,
    batch_size: int,
  ):
    """(example_order, batch_ends) for `epochs` passes over the local data.

    Each epoch is a fresh permutation, cut into minibatches of `batch_size`
    (the last one may be smaller); batch_size = -1 means B = ∞, the whole
    local dataset as one batch. A straggler's x epochs are the first x of the
    E epochs it would have run. With `steps_per_round`, the round is that
    many minibatches of B, from fresh permutations, whatever `epochs`.
    """
    if num_examples < 1:
      raise ValueError(f'client {client} has no training examples')
    rng = self._rng(_Stream.MINIBATCH_ORDER, round_num, client)
    b = num_examples if batch_size == -1 else batch_size
    if self.steps_per_round is not None:
      # Fresh permutations, cut into `steps_per_round` minibatches of B.
      wanted = self.steps_per_round * b
      order = np.concatenate(
        [
          rng.permutation(num_examples)
          for _ in range(-(-wanted // num_examples))
        ]
      )[:wanted]
      return (
        order.astype(np.int32),
        np.arange(b, wanted + 1, b, dtype=np.int32),
      )
    order = np.concatenate(
      [rng.permutation(num_examples) for _ in range(epochs)]
    )
    ends_in_epoch = np.minimum(np.arange(b, num_examples + b, b), num_examples)
    ends = np.concatenate(
      [ends_in_epoch + e * num_examples for e in range(epochs)]
    )
    return order.astype(np.int32), ends.astype(np.int32)
