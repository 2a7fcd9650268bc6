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
on the sum of K, so the mean carries z·C/M, as in a round of M). ε then
describes the run being simulated, not the simulation: M clients per round
from a population of `population` clients (default: `num_clients`) with
noise z·C on their sum, sampling rate M/population. pfl-research does the
same (`PLDPrivacyAccountant(sampling_probability=max(K, M)/population,
noise_scale=K/M)`). The K-client simulation itself only has the guarantee
of noise multiplier z·K/M at rate K/N (`epsilons(z * K / M, ...)` without a
cohort).

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

import math
import numbers
from typing import Iterator, Sequence

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp

from tff_algos import dp_budget

UNIFORM, POISSON, PROPORTIONAL = 'uniform', 'poisson', 'proportional'
SAMPLINGS = tuple(dp_budget.ADJACENCY)  # The schemes the table covers.
RDP, PLD = 'rdp', 'pld'
ACCOUNTANTS = (RDP, PLD)
# TFF's split of adaptive clipping's noise (tests and callers use it here).
adaptive_noise_multipliers = dp_budget.adaptive_noise_multipliers

_RELATION = {
    dp_budget.REPLACE_ONE: dp_accounting.NeighboringRelation.REPLACE_ONE,
    dp_budget.ADD_OR_REMOVE_ONE:
    dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}

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
  return dp_budget.ADJACENCY[sampling]


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
  """One round's `dp_accounting.DpEvent`, under `adjacency(sampling)`.

  The arguments are those of `epsilons`. 'uniform' halves the noise
  multipliers (replace-one doubles the sensitivity: module docstring);
  z = 0 is a `NonPrivateDpEvent`.

  Raises:
    UncertifiedSamplingError: sampling 'proportional'.
    ValueError: an argument out of its range.
  """
  z = dp_budget.nonnegative(noise_multiplier, 'noise_multiplier')
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _refuse_uncertified(sampling)
  cohort, population = _cohort_and_population(
      sampling, num_clients, clients_per_round, noise_cohort_size,
      population)
  if z == 0:  # TFF adds no noise at all then (adaptive clipping included).
    return dp_accounting.NonPrivateDpEvent()
  if adaptive_clipping:
    value_z, count_stddev = dp_budget.adaptive_noise_multipliers(
        z, cohort, clipped_count_stddev)
    multipliers = [value_z, 2 * count_stddev]
  else:
    multipliers = [z]
  if sampling == UNIFORM:
    multipliers = [m / 2 for m in multipliers]
  gaussians = [dp_accounting.GaussianDpEvent(m) for m in multipliers]
  mechanism = (gaussians[0] if len(gaussians) == 1
               else dp_accounting.ComposedDpEvent(gaussians))
  if sampling == UNIFORM:
    return dp_accounting.SampledWithoutReplacementDpEvent(
        source_dataset_size=population, sample_size=cohort, event=mechanism)
  return dp_accounting.PoissonSampledDpEvent(
      sampling_probability=cohort / population, event=mechanism)


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
  """ε after each of rounds 1..`rounds` at `delta` (math.inf without noise).

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
    noise_cohort_size: M ≥ K: noise calibrated for M clients per round; ε
      is then that of M clients per round from `population`.
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
  return list(_epsilon_stream(
      noise_multiplier, rounds, delta, num_clients=num_clients,
      clients_per_round=clients_per_round, sampling=sampling,
      accountant=accountant, adaptive_clipping=adaptive_clipping,
      clipped_count_stddev=clipped_count_stddev,
      noise_cohort_size=noise_cohort_size, population=population,
      orders=orders,
      value_discretization_interval=value_discretization_interval))


def epsilon(noise_multiplier: float, rounds: int, delta: float,
            **kwargs) -> float:
  """ε after `rounds` rounds only (`epsilons`' arguments): one composition
  of T rounds, without the per-round values."""
  rounds = _rounds(rounds)
  event, relation, accountant, options = _setup(noise_multiplier, delta,
                                                **kwargs)
  if rounds == 0:
    return 0.0
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return math.inf
  if accountant == RDP:
    ledger = rdp.RdpAccountant(options['orders'], relation)
    ledger.compose(event, rounds)
    return float(ledger.get_epsilon(delta))
  one = _one_round_pld(event, options['value_discretization_interval'])
  return float(one.self_compose(rounds).get_epsilon_for_delta(delta))


def _epsilon_stream(noise_multiplier, rounds, delta, **kwargs
                    ) -> Iterator[float]:
  rounds = _rounds(rounds)
  event, relation, accountant, options = _setup(noise_multiplier, delta,
                                                **kwargs)
  if rounds == 0:
    return
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    yield from [math.inf] * rounds
    return
  if accountant == RDP:
    # One round's RDP, computed once; t rounds cost t times as much at
    # every order, as RdpAccountant.compose(event, t) adds it up.
    ledger = rdp.RdpAccountant(options['orders'], relation)
    ledger.compose(event)
    orders, per_round = ledger.orders, ledger.rdp
    for t in range(1, rounds + 1):
      yield float(rdp.compute_epsilon(orders, t * per_round, delta)[0])
    return
  one = _one_round_pld(event, options['value_discretization_interval'])
  composed = one
  yield float(composed.get_epsilon_for_delta(delta))
  for _ in range(rounds - 1):
    composed = composed.compose(one)
    yield float(composed.get_epsilon_for_delta(delta))


def _setup(noise_multiplier, delta, *, num_clients, clients_per_round,
           sampling=UNIFORM, accountant=RDP, adaptive_clipping=False,
           clipped_count_stddev=None, noise_cohort_size=None,
           population=None, orders=None,
           value_discretization_interval=PLD_VALUE_DISCRETIZATION_INTERVAL):
  """Checks the arguments; (one round's event, dp_accounting relation,
  accountant, accountant options)."""
  _check_choice(sampling, SAMPLINGS, 'sampling')
  _check_choice(accountant, ACCOUNTANTS, 'accountant')
  delta = _probability(delta)
  dp_budget.nonnegative(noise_multiplier, 'noise_multiplier')
  _refuse_uncertified(sampling)
  if accountant == PLD and sampling == UNIFORM:
    raise ValueError(
        "accountant 'pld' does not support sampling 'uniform' "
        '(dp_accounting 0.4.3 has no PLD for fixed-size sampling without '
        "replacement): use accountant 'rdp', or sampling 'poisson'")
  event = round_event(
      noise_multiplier, num_clients=num_clients,
      clients_per_round=clients_per_round, sampling=sampling,
      adaptive_clipping=adaptive_clipping,
      clipped_count_stddev=clipped_count_stddev,
      noise_cohort_size=noise_cohort_size, population=population)
  if orders is not None:
    orders = [float(o) for o in orders]
    if not orders or any(not math.isfinite(o) or o <= 1 for o in orders):
      raise ValueError(f'orders must be finite and > 1, got {orders}')
  interval = dp_budget.positive(value_discretization_interval,
                       'value_discretization_interval')
  return event, _RELATION[dp_budget.ADJACENCY[sampling]], accountant, dict(
      orders=orders, value_discretization_interval=interval)


def _refuse_uncertified(sampling):
  if sampling == PROPORTIONAL:
    raise UncertifiedSamplingError(
        "sampling 'proportional' (clients drawn with probability ∝ n_k) has "
        'no certified ε: the chance of drawing a client depends on its '
        'data (n_k), so neither replace-one nor add-or-remove-one '
        'amplification by sampling applies, and dp_accounting has no '
        "event for it. Use 'uniform' or 'poisson' sampling for a DP run")


def _one_round_pld(event, interval):
  """The PLD of one Poisson-subsampled round."""
  # The PLD accountant takes only a plain Gaussian under Poisson sampling:
  # the equivalent single Gaussian (1/z² = Σ 1/z_i²) stands for adaptive
  # clipping's pair.
  inner = event.event
  parts = (inner.events if isinstance(inner, dp_accounting.ComposedDpEvent)
           else [inner])
  z = sum(p.noise_multiplier**-2 for p in parts)**-0.5
  return pld.privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=z, sensitivity=1,
      sampling_prob=event.sampling_probability,
      value_discretization_interval=interval)


def _cohort_and_population(sampling, num_clients, clients_per_round,
                           noise_cohort_size, population):
  """(clients per accounted round, population they are drawn from)."""
  n = _count(num_clients, 'num_clients')
  k = _count(clients_per_round, 'clients_per_round')
  if k > n:
    what = ('the sampling rate q = K/N would exceed 1' if sampling == POISSON
            else 'a cohort cannot be larger than the population')
    raise ValueError(f'clients_per_round K = {k} > num_clients N = {n}: '
                     f'{what}')
  if noise_cohort_size is None:
    if population is not None:
      raise ValueError('population is the population of the noise cohort: '
                       'it needs noise_cohort_size')
    return k, n
  m = _count(noise_cohort_size, 'noise_cohort_size')
  population = n if population is None else _count(population, 'population')
  if m < k:
    raise ValueError(f'noise_cohort_size M = {m} < clients_per_round K = {k}'
                     ': the noise would be smaller than that of the K '
                     'clients simulated (pfl-research requires M ≥ K too)')
  if m > population:
    raise ValueError(f'noise_cohort_size M = {m} > population {population}: '
                     'pass the population of the run being simulated')
  return m, population


def _check_choice(value, choices, name):
  if value not in choices:
    raise ValueError(f'{name} must be one of {", ".join(choices)}; '
                     f'got {value!r}')


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
