"""How private a DP run is: ε after every round at a given δ (imports no
TensorFlow).

A DP run clips each participating client's update to L2 norm C, adds
Gaussian noise of standard deviation z·C to the sum and divides by the
(expected) cohort size, as `tff.aggregators.DifferentiallyPrivateFactory`
does. The unit of privacy is a client (all of its data). What ε a round
costs depends on how the round's clients were drawn, and each sampling
scheme is analysed under its own neighbouring relation:

  'uniform'       K of N without replacement, a fixed cohort size (the
                  simulation's `ClientSampler`). Amplification by fixed-size
                  sampling is proven for datasets of the same size that
                  differ in one client's data: **replace-one** adjacency
                  (Wang, Balle & Kasiviswanathan, AISTATS 2019, Thm. 27,
                  dp_accounting's `SampledWithoutReplacementDpEvent`).
                  Dropped stragglers, drawn independently of the data,
                  leave a uniform sample of fewer clients: the ε of K
                  still holds.
  'poisson'       every client independently with probability q = K/N:
                  **add-or-remove-one** adjacency (Mironov, Talwar & Zhang
                  2019; `PoissonSampledDpEvent`).
  'proportional'  K clients drawn with probability ∝ n_k: nothing is
                  certified (`UncertifiedSamplingError`, below).

Replace-one doubles the sensitivity. Replacing one client's clipped update
u by u' moves the sum by up to ‖u − u'‖ ≤ 2C, not C. dp_accounting 0.4.3
reads a `GaussianDpEvent`'s noise multiplier as the noise over the L2
sensitivity under the accountant's relation, while the event's docstring
defines it as s/C; passing z itself under REPLACE_ONE understates the RDP
by a factor of four. So for 'uniform' the event carries z/2. Not halving
gives ε = 7.12 for q = 1/3, z = 1, T = 4, δ = 1e-5; this module gives
20.4. The tests show the smaller number is wrong: for α ≥ 4 it lies below
the Rényi divergence of a concrete pair of neighbouring datasets.

Adaptive clipping (`DifferentiallyPrivateFactory.gaussian_adaptive`,
`tff.learning.dp_aggregator`) releases two Gaussian sums per round on the
same clients: the clipped updates with noise multiplier z_v, and the
count of unclipped clients (records ±0.5, sensitivity 0.5) with noise
stddev σ_b, i.e. noise multiplier z_b = 2σ_b. Together they are one
Gaussian mechanism of noise multiplier z_eff with
1/z_eff² = 1/z_v² + 1/z_b² (a Gaussian mechanism on the concatenated,
rescaled vector: this holds for the subsampled mechanism too). TFF takes
the user's z as this z_eff and computes z_v = (z⁻² − (2σ_b)⁻²)^(−1/2)
with σ_b = 0.05·K unless given, so the accounting noise multiplier is the
user's z; it refuses z ≥ 2σ_b, and so does this module. What is composed
is the event TFF's query reports, `ComposedDpEvent([Gaussian(z_v),
Gaussian(z_b)])`, inside the sampling event.

Noise cohort (pfl-research's `noise_cohort_size` M ≥ K): the simulation
adds noise as if M clients took part while K are simulated (stddev z·C·K/M
on the sum of K, so the mean carries z·C/M, as in a round of M). The model
the simulation trains and releases is then K clients' sum with noise
multiplier z·K/M at rate K/N: that is the run's ε (`mechanism(z,
clients_per_round=K, noise_cohort_size=M)`, which is also what the
aggregator's own DP event says). The deployment being simulated, M clients
per round from a population of `population` clients (default
`num_clients`) with noise z·C on their sum at rate M/population, has
another ε, `epsilons(z, ..., noise_cohort_size=M)`: what pfl-research
reports (`PLDPrivacyAccountant(sampling_probability=max(K, M)/population,
noise_scale=K/M)`), and what a run reports as `deployment_epsilon`, never
as the model's.

The run's ε is computed from the mechanism its process was built with:
the aggregator's DP event in the process state (`Mechanism.of_event`), not
the flags. Where the event is the flags' mechanism to float32 precision
(the state holds float32), the flags' exact values are used, so that the
ε does not move in the last bits with the float32 rounding.

'proportional' is refused because the probability that client k is drawn
depends on n_k, its number of examples, which is part of its data. Under
add-or-remove-one, adding a client changes every other client's chance of
being drawn; under replace-one, replacing a client's data changes its own
chance. dp_accounting 0.4.3 has no event for unequal-probability sampling,
so no amplification by sampling can be claimed. Only the unsubsampled
Gaussian bound (q = 1) would hold, and only if every n_k were public and
fixed. That is not the usual guarantee, so it is not reported as the run's
ε.

Accountants: 'rdp' (dp_accounting's RDP accountant, ε by its conversion,
the improved bound of Balle et al. 2020 / Canonne, Kamath & Steinke 2020)
for both schemes; 'pld' (`dp_accounting.pld`, connect-the-dots,
pessimistic: an upper bound) for 'poisson' only. dp_accounting 0.4.3's
PLD accountant has no fixed-size sampling without replacement.

Every round is the same mechanism, so ε after round t is that of t
compositions of one round's event. RDP composes by adding one round's RDP
vector (computed once) and converts each total: T = 1000 rounds take
0.4–1.1 s here (most of it the one round's RDP). PLD composes the one-round
distribution into the running one, round by round (dp_accounting's
`compose`), and the running one widens with t: T = 1000 takes 8 s at
q = 0.01, 28 s at q = 0.1 and 74 s at q = 1/3 (z = 1), against 0.2–0.5 s
for the last round alone (`epsilon`: one self-composition).

The events are built with Python floats. TFF's DP aggregators record the
same events in their state (`dp_event`) with float32 noise multipliers,
and dp_accounting 0.4.3's RDP accountant, given a sampled
`ComposedDpEvent` whose multipliers are not Python floats, takes the first
Gaussian for the whole event: it silently drops adaptive clipping's
clipped-count release. Convert such events before composing them.

Imports no TensorFlow (dp_accounting only).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
import dataclasses
import math
import numbers

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp
import numpy as np

from tff_algos.privacy import budget

UNIFORM, POISSON, PROPORTIONAL = 'uniform', 'poisson', 'proportional'
SAMPLINGS = tuple(budget.ADJACENCY)  # The schemes the table covers.
RDP, PLD = 'rdp', 'pld'
ACCOUNTANTS = (RDP, PLD)

_RELATION = {
  budget.REPLACE_ONE: dp_accounting.NeighboringRelation.REPLACE_ONE,
  budget.ADD_OR_REMOVE_ONE: dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
}

# dp_accounting's PLD accountant uses 1e-4. 1e-3 changes ε by under 0.05%
# here (q = 0.01 and 0.1, z = 1, T = 1000) and composes about three times
# faster. The discretization is pessimistic, so any interval gives an upper
# bound.
PLD_VALUE_DISCRETIZATION_INTERVAL = 1e-3


class UncertifiedSamplingError(ValueError):
  """The sampling scheme has no ε this accountant can certify."""


def adjacency(sampling: str) -> str | None:
  """'replace-one' or 'add-or-remove-one': the neighbouring relation under
  which `sampling`'s ε holds; None for 'proportional' (nothing certified)."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  return budget.ADJACENCY[sampling]


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """One round's Gaussian releases: each one's noise multiplier (noise
  stddev over the L2 sensitivity of its records), as the aggregator's own
  DP event states it (`tff.aggregators.DifferentiallyPrivateFactory` keeps
  it in its state): one for fixed clipping, the updates' and the clipped
  count's for adaptive clipping. Sampling is not part of it."""

  noise_multipliers: tuple[float, ...]

  def __post_init__(self):
    if not self.noise_multipliers:
      raise ValueError('a mechanism releases at least one Gaussian sum')
    for z in self.noise_multipliers:
      budget.nonnegative(z, 'noise_multiplier')

  @classmethod
  def of_event(cls, event: dp_accounting.DpEvent) -> Mechanism:
    """The mechanism of an aggregator's unsampled DP event (a Gaussian, or
    a composition of Gaussians); UncertifiedMechanismError otherwise."""
    parts = (
      event.events
      if isinstance(event, dp_accounting.ComposedDpEvent)
      else [event]
    )
    if not all(isinstance(p, dp_accounting.GaussianDpEvent) for p in parts):
      raise UncertifiedMechanismError(
        f'the model aggregator reports the DP event {event}, which this '
        'accountant cannot compose (it composes Gaussian releases)'
      )
    return cls(tuple(float(p.noise_multiplier) for p in parts))

  @property
  def noise_multiplier(self) -> float:
    """The one Gaussian the releases together amount to:
    (Σ z_i⁻²)^(−1/2) (0 if any release is noiseless)."""
    if not all(self.noise_multipliers):
      return 0.0
    return sum(z**-2 for z in self.noise_multipliers) ** -0.5

  def matches(self, other: Mechanism) -> bool:
    """Whether the two are one mechanism to float32 precision (an
    aggregator's state holds its noise as float32)."""
    return len(self.noise_multipliers) == len(other.noise_multipliers) and all(
      math.isclose(a, b, rel_tol=FLOAT32_TOLERANCE, abs_tol=0)
      for a, b in zip(self.noise_multipliers, other.noise_multipliers)
    )


# Two float32 noise multipliers of one mechanism, each rounded and divided
# in float32, differ by a few units in the last place (2⁻²³ ≈ 1.2e-7).
FLOAT32_TOLERANCE = 1e-6


class UncertifiedMechanismError(ValueError):
  """The aggregator's DP mechanism has no ε this accountant can compute."""


def mechanism(
  noise_multiplier: float,
  *,
  clients_per_round: int,
  adaptive_clipping: bool = False,
  clipped_count_stddev: float | None = None,
  noise_cohort_size: int | None = None,
) -> Mechanism:
  """The releases `privacy.mechanisms`' aggregators make for a run's flags,
  on the model they train: z (fixed clipping), or TFF's split of z for
  adaptive clipping (z_v, 2σ_b). With a noise cohort M the noise is that
  of M clients on the sum of K, so each multiplier is the M-client run's
  times K/M."""
  z = budget.nonnegative(noise_multiplier, 'noise_multiplier')
  k = _count(clients_per_round, 'clients_per_round')
  cohort = (
    k
    if noise_cohort_size is None
    else _count(noise_cohort_size, 'noise_cohort_size')
  )
  if z == 0:  # TFF adds no noise at all then (adaptive clipping included).
    multipliers = [0.0]
  elif adaptive_clipping:
    value_z, count_stddev = budget.adaptive_noise_multipliers(
      z, cohort, clipped_count_stddev
    )
    multipliers = [value_z, 2 * count_stddev]
  else:
    multipliers = [z]
  if noise_cohort_size is not None:
    multipliers = [m * (k / cohort) for m in multipliers]
  return Mechanism(tuple(multipliers))


def round_event(
  noise_multiplier: float,
  *,
  num_clients: int,
  clients_per_round: int,
  sampling: str = UNIFORM,
  adaptive_clipping: bool = False,
  clipped_count_stddev: float | None = None,
  noise_cohort_size: int | None = None,
  population: int | None = None,
) -> dp_accounting.DpEvent:
  """One round's `dp_accounting.DpEvent` of the run the flags describe,
  under `adjacency(sampling)`: the arguments are those of `epsilons` (with
  a noise cohort, the M-client run's).

  Raises:
    UncertifiedSamplingError: sampling 'proportional'.
    ValueError: an argument out of its range.
  """
  released, cohort, population = _run_of_flags(
    noise_multiplier,
    sampling,
    num_clients,
    clients_per_round,
    adaptive_clipping,
    clipped_count_stddev,
    noise_cohort_size,
    population,
  )
  return sampled_event(
    released,
    num_clients=population,
    clients_per_round=cohort,
    sampling=sampling,
  )


def _run_of_flags(
  noise_multiplier,
  sampling,
  num_clients,
  clients_per_round,
  adaptive_clipping,
  clipped_count_stddev,
  noise_cohort_size,
  population,
):
  """(one round's releases, clients per round, population) of the run the
  flags describe: with a noise cohort, the M-client run's."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _refuse_uncertified(sampling)
  budget.nonnegative(noise_multiplier, 'noise_multiplier')
  cohort, population = _cohort_and_population(
    sampling, num_clients, clients_per_round, noise_cohort_size, population
  )
  released = mechanism(
    noise_multiplier,
    clients_per_round=cohort,
    adaptive_clipping=adaptive_clipping,
    clipped_count_stddev=clipped_count_stddev,
  )
  return released, cohort, population


def sampled_event(
  released: Mechanism,
  *,
  num_clients: int,
  clients_per_round: int,
  sampling: str = UNIFORM,
) -> dp_accounting.DpEvent:
  """One round's event: `released` on the clients `sampling` draws (K of
  N), under `adjacency(sampling)`. 'uniform' halves the noise multipliers
  (replace-one doubles the sensitivity: module docstring); a noiseless
  release is a `NonPrivateDpEvent`."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _refuse_uncertified(sampling)
  if not all(released.noise_multipliers):
    return dp_accounting.NonPrivateDpEvent()
  multipliers = list(released.noise_multipliers)
  if sampling == UNIFORM:
    multipliers = [m / 2 for m in multipliers]
  gaussians = [dp_accounting.GaussianDpEvent(m) for m in multipliers]
  event = (
    gaussians[0]
    if len(gaussians) == 1
    else dp_accounting.ComposedDpEvent(gaussians)
  )
  if sampling == UNIFORM:
    return dp_accounting.SampledWithoutReplacementDpEvent(
      source_dataset_size=num_clients,
      sample_size=clients_per_round,
      event=event,
    )
  return dp_accounting.PoissonSampledDpEvent(
    sampling_probability=clients_per_round / num_clients, event=event
  )


def epsilons(
  noise_multiplier: float,
  rounds: int,
  delta: float,
  *,
  num_clients: int,
  clients_per_round: int,
  sampling: str = UNIFORM,
  accountant: str = RDP,
  adaptive_clipping: bool = False,
  clipped_count_stddev: float | None = None,
  noise_cohort_size: int | None = None,
  population: int | None = None,
  orders: Sequence[float] | None = None,
  value_discretization_interval: float = PLD_VALUE_DISCRETIZATION_INTERVAL,
) -> list[float]:
  """ε after each of rounds 1..`rounds` at `delta` (math.inf without noise)
  of the run the flags describe.

  Args:
    noise_multiplier: z as the run's user gives it to TFF's DP factory
      (noise stddev z·C on the sum of clipped updates; with adaptive
      clipping, TFF's total z, which TFF splits).
    rounds: T ≥ 0.
    delta: δ in (0, 1).
    num_clients: N, the clients the rounds draw from.
    clients_per_round: K (expected K for 'poisson'), 1 ≤ K ≤ N.
    sampling: 'uniform', 'poisson' or 'proportional' (refused).
    accountant: 'rdp' or 'pld' ('poisson' only).
    adaptive_clipping: the run uses TFF's adaptive clipping
      (`gaussian_adaptive`, `tff.learning.dp_aggregator`).
    clipped_count_stddev: adaptive clipping's σ_b if the run set it (TFF's
      default: 0.05 × the cohort).
    noise_cohort_size: M ≥ K: the deployment a noise cohort stands for, M
      clients per round from `population` with noise z·C on their sum (not
      the simulated model's ε: `epsilons_of(mechanism(...))` is that).
    population: the population the M-client rounds draw from (default N).
    orders: RDP orders (default dp_accounting's).
    value_discretization_interval: the PLD's loss grid.

  Returns:
    T floats, non-decreasing.

  Raises:
    UncertifiedSamplingError: sampling 'proportional'.
    ValueError: any other argument out of its range, or 'pld' with
      'uniform'.
  """
  released, cohort, population = _run_of_flags(
    noise_multiplier,
    sampling,
    num_clients,
    clients_per_round,
    adaptive_clipping,
    clipped_count_stddev,
    noise_cohort_size,
    population,
  )
  return epsilons_of(
    released,
    rounds,
    delta,
    num_clients=population,
    clients_per_round=cohort,
    sampling=sampling,
    accountant=accountant,
    orders=orders,
    value_discretization_interval=value_discretization_interval,
  )


def epsilons_of(
  released: Mechanism,
  rounds: int,
  delta: float,
  *,
  num_clients: int,
  clients_per_round: int,
  sampling: str = UNIFORM,
  accountant: str = RDP,
  orders: Sequence[float] | None = None,
  value_discretization_interval: float = PLD_VALUE_DISCRETIZATION_INTERVAL,
) -> list[float]:
  """ε after each of rounds 1..`rounds` at `delta` (math.inf without noise)
  when every round makes the releases `released` on the clients `sampling`
  draws, K (expected K for 'poisson') of N; the other arguments are those
  of `epsilons`."""
  return list(
    _epsilon_stream(
      released,
      rounds,
      delta,
      num_clients=num_clients,
      clients_per_round=clients_per_round,
      sampling=sampling,
      accountant=accountant,
      orders=orders,
      value_discretization_interval=value_discretization_interval,
    )
  )


def epsilon(
  noise_multiplier: float, rounds: int, delta: float, **kwargs
) -> float:
  """ε after `rounds` rounds only (`epsilons`' arguments): one composition
  of T rounds, without the per-round values."""
  rounds = _rounds(rounds)
  event, relation, accountant, options = _setup(
    noise_multiplier, delta, **kwargs
  )
  return _final_epsilon(event, rounds, delta, relation, accountant, options)


def epsilon_of(
  released: Mechanism,
  rounds: int,
  delta: float,
  *,
  num_clients: int,
  clients_per_round: int,
  sampling: str = UNIFORM,
  accountant: str = RDP,
) -> float:
  """ε after `rounds` rounds only (`epsilons_of`' arguments), without the
  per-round values: `epsilons_of(...)[-1]` (RDP: exactly; PLD: composed
  at once, to its discretization), at a cost that does not grow with the
  rounds (one round's RDP is remembered)."""
  event, delta, relation, options = _checked_event(
    released,
    delta,
    num_clients,
    clients_per_round,
    sampling,
    accountant,
    None,
    PLD_VALUE_DISCRETIZATION_INTERVAL,
  )
  return _final_epsilon(
    event, _rounds(rounds), delta, relation, accountant, options
  )


def _checked_event(
  released,
  delta,
  num_clients,
  clients_per_round,
  sampling,
  accountant,
  orders,
  value_discretization_interval,
):
  """(one round's DP event, δ, neighbouring relation, the accountant's
  options) of `released` under `sampling`, every argument checked."""
  delta, relation, options = _options(
    delta, sampling, accountant, orders, value_discretization_interval
  )
  _cohort_and_population(sampling, num_clients, clients_per_round, None, None)
  event = sampled_event(
    released,
    num_clients=num_clients,
    clients_per_round=clients_per_round,
    sampling=sampling,
  )
  return event, delta, relation, options


def _final_epsilon(event, rounds, delta, relation, accountant, options):
  """ε after `rounds` rounds of `event`, composed at once (RDP: from one
  round's RDP, remembered; PLD: to its discretization)."""
  if rounds == 0:
    return 0.0
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return math.inf
  if accountant == RDP:
    orders, per_round = _one_round_rdp(event, options['orders'], relation)
    return float(rdp.compute_epsilon(orders, rounds * per_round, delta)[0])
  one = _one_round_pld(event, options['value_discretization_interval'])
  return float(one.self_compose(rounds).get_epsilon_for_delta(delta))


def _epsilon_stream(
  released,
  rounds,
  delta,
  *,
  num_clients,
  clients_per_round,
  sampling,
  accountant,
  orders,
  value_discretization_interval,
) -> Iterator[float]:
  rounds = _rounds(rounds)
  event, delta, relation, options = _checked_event(
    released,
    delta,
    num_clients,
    clients_per_round,
    sampling,
    accountant,
    orders,
    value_discretization_interval,
  )
  if rounds == 0:
    return
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    yield from [math.inf] * rounds
    return
  if accountant == RDP:
    # One round's RDP, computed once; t rounds cost t times as much at
    # every order, as RdpAccountant.compose(event, t) adds it up.
    orders, per_round = _one_round_rdp(event, options['orders'], relation)
    for t in range(1, rounds + 1):
      yield float(rdp.compute_epsilon(orders, t * per_round, delta)[0])
    return
  one = _one_round_pld(event, options['value_discretization_interval'])
  composed = one
  yield float(composed.get_epsilon_for_delta(delta))
  for _ in range(rounds - 1):
    composed = composed.compose(one)
    yield float(composed.get_epsilon_for_delta(delta))


def _setup(
  noise_multiplier,
  delta,
  *,
  num_clients,
  clients_per_round,
  sampling=UNIFORM,
  accountant=RDP,
  adaptive_clipping=False,
  clipped_count_stddev=None,
  noise_cohort_size=None,
  population=None,
  orders=None,
  value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL,
):
  """Checks the arguments; (one round's event, dp_accounting relation,
  accountant, accountant options)."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _check_choice(accountant, ACCOUNTANTS, 'accountant')
  budget.nonnegative(noise_multiplier, 'noise_multiplier')
  delta, relation, options = _options(
    delta, sampling, accountant, orders, value_discretization_interval
  )
  event = round_event(
    noise_multiplier,
    num_clients=num_clients,
    clients_per_round=clients_per_round,
    sampling=sampling,
    adaptive_clipping=adaptive_clipping,
    clipped_count_stddev=clipped_count_stddev,
    noise_cohort_size=noise_cohort_size,
    population=population,
  )
  return event, relation, accountant, options


def _options(
  delta, sampling, accountant, orders, value_discretization_interval
):
  """(δ, dp_accounting relation, accountant options), checked."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _check_choice(accountant, ACCOUNTANTS, 'accountant')
  delta = _probability(delta)
  _refuse_uncertified(sampling)
  if accountant == PLD and sampling == UNIFORM:
    raise ValueError(
      "accountant 'pld' does not support sampling 'uniform' "
      '(dp_accounting 0.4.3 has no PLD for fixed-size sampling without '
      "replacement): use accountant 'rdp', or sampling 'poisson'"
    )
  if orders is not None:
    orders = [float(o) for o in orders]
    if not orders or any(not math.isfinite(o) or o <= 1 for o in orders):
      raise ValueError(f'orders must be finite and > 1, got {orders}')
  interval = budget.positive(
    value_discretization_interval, 'value_discretization_interval'
  )
  return (
    delta,
    _RELATION[budget.ADJACENCY[sampling]],
    dict(orders=orders, value_discretization_interval=interval),
  )


def _refuse_uncertified(sampling):
  if sampling == PROPORTIONAL:
    raise UncertifiedSamplingError(
      "sampling 'proportional' (clients drawn with probability ∝ n_k) has "
      'no certified ε: the chance of drawing a client depends on its '
      'data (n_k), so neither replace-one nor add-or-remove-one '
      'amplification by sampling applies, and dp_accounting has no '
      "event for it. Use 'uniform' or 'poisson' sampling for a DP run"
    )


# One round's RDP by (event, orders, relation), each a value: a memo of a
# pure function, so a run that finds its mechanism here gets the same
# array it would compute. dp_accounting's sampled-without-replacement
# Gaussian took 1.22 s in a profile of a three-round DP run (such runs
# took 7.4–8.9 s unprofiled), and a process asks again for each run of the same mechanism:
# each seed of a sweep, a notebook's re-run, the tests.
_ONE_ROUND_RDP: dict = {}
_ONE_ROUND_RDP_ENTRIES = 64


def _one_round_rdp(event, orders, relation):
  """(the orders, one round's RDP at each, read-only)."""
  key = (_value_key(event.to_named_tuple()), _value_key(orders), relation)
  if key not in _ONE_ROUND_RDP:
    ledger = rdp.RdpAccountant(orders, relation)
    ledger.compose(event)
    per_round = np.array(ledger.rdp, dtype=np.float64)
    per_round.setflags(write=False)
    if len(_ONE_ROUND_RDP) >= _ONE_ROUND_RDP_ENTRIES:
      _ONE_ROUND_RDP.clear()
    _ONE_ROUND_RDP[key] = tuple(ledger.orders), per_round
  return _ONE_ROUND_RDP[key]


def _value_key(value):
  """A hashable stand-in for `value` (an event's named tuple, orders): lists
  become tuples, and each leaf keeps its type, so that 0.8 and float32 0.8
  are different keys."""
  if isinstance(value, tuple) and hasattr(value, '_fields'):
    return type(value).__name__, tuple(
      (field, _value_key(getattr(value, field))) for field in value._fields
    )
  if isinstance(value, (list, tuple)):
    return tuple(_value_key(v) for v in value)
  return type(value).__name__, value


def _one_round_pld(event, interval):
  """The PLD of one Poisson-subsampled round."""
  # The PLD accountant takes only a plain Gaussian under Poisson sampling:
  # the equivalent single Gaussian (1/z² = Σ 1/z_i²) stands for adaptive
  # clipping's pair.
  inner = event.event
  parts = (
    inner.events
    if isinstance(inner, dp_accounting.ComposedDpEvent)
    else [inner]
  )
  z = sum(p.noise_multiplier**-2 for p in parts) ** -0.5
  return pld.privacy_loss_distribution.from_gaussian_mechanism(
    standard_deviation=z,
    sensitivity=1,
    sampling_prob=event.sampling_probability,
    value_discretization_interval=interval,
  )


def _cohort_and_population(
  sampling, num_clients, clients_per_round, noise_cohort_size, population
):
  """(clients per accounted round, population they are drawn from)."""
  n = _count(num_clients, 'num_clients')
  k = _count(clients_per_round, 'clients_per_round')
  if k > n:
    what = (
      'the sampling rate q = K/N would exceed 1'
      if sampling == POISSON
      else 'a cohort cannot be larger than the population'
    )
    raise ValueError(f'clients_per_round K = {k} > num_clients N = {n}: {what}')
  if noise_cohort_size is None:
    if population is not None:
      raise ValueError(
        'population is the population of the noise cohort: '
        'it needs noise_cohort_size'
      )
    return k, n
  m = _count(noise_cohort_size, 'noise_cohort_size')
  population = n if population is None else _count(population, 'population')
  if m < k:
    raise ValueError(
      f'noise_cohort_size M = {m} < clients_per_round K = {k}'
      ': the noise would be smaller than that of the K '
      'clients simulated (pfl-research requires M ≥ K too)'
    )
  if m > population:
    raise ValueError(
      f'noise_cohort_size M = {m} > population {population}: '
      'pass the population of the run being simulated'
    )
  return m, population


def _check_choice(value, choices, name):
  if value not in choices:
    raise ValueError(
      f'{name} must be one of {", ".join(choices)}; got {value!r}'
    )


def _probability(delta):
  if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
    raise ValueError(f'delta must be a number, got {delta!r}')
  delta = float(delta)
  if not 0 < delta < 1:  # NaN too.
    raise ValueError(f'delta must be in (0, 1), got {delta}')
  return delta


def _count(value, name):
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise ValueError(f'{name} must be a whole number, got {value!r}')
  if value < 1:
    raise ValueError(f'{name} must be >= 1, got {value}')
  return int(value)


def _rounds(rounds):
  if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral):
    raise ValueError(f'rounds must be a whole number, got {rounds!r}')
  if rounds < 0:
    raise ValueError(f'rounds must be >= 0, got {rounds}')
  return int(rounds)
