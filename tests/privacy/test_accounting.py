"""The privacy accountant against computations written here, independently
of dp_accounting's code (no TensorFlow).

  * Poisson sampling, RDP: the binomial sum of Mironov, Talwar & Zhang 2019
    ("Rényi Differential Privacy of the Sampled Gaussian Mechanism",
    integer α), converted to ε with the conversion dp_accounting uses
    (Balle et al. 2020 Prop. 12 / Canonne, Kamath & Steinke 2020), written
    out below.
  * Fixed-size sampling without replacement (replace-one), RDP: above, the
    general bound of Wang, Balle & Kasiviswanathan 2019 (Thm. 27), of which
    dp_accounting computes a tightened form; below, the Rényi divergence
    and the ε of one concrete pair of neighbouring datasets, integrated
    numerically, which no valid bound may undercut; at q = 1 the
    unsubsampled Gaussian of sensitivity 2C, in closed form.
  * PLD: at q = 1 the analytic Gaussian mechanism (Balle & Wang 2018); for
    q < 1 the exact hockey-stick divergence of the T-fold composed pair,
    bracketed by rounding its privacy losses down and up on a grid and
    convolving them with an FFT.
"""

import functools
import math
import subprocess
import sys

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest
from scipy import optimize
from scipy import special
from scipy import stats

from conftest import REPO
from tff_algos.privacy import accounting
from tff_algos.privacy import budget
from tff_algos.simulation.sampling import SamplingScheme

INTEGER_ORDERS = list(range(2, 65)) + [128, 256]
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


# Independent computations.


def _log_binomial(n, k):
  return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _poisson_gaussian_rdp(q, z, alpha):
  """RDP at integer order α of the Poisson-subsampled Gaussian (noise
  multiplier z, add-or-remove-one): Mironov, Talwar & Zhang 2019, the
  binomial expansion of A_α = E_{x∼N(0,z²)}[((1−q) + q·e^{(2x−1)/(2z²)})^α]."""
  if q == 1:
    return alpha / (2 * z**2)
  terms = [
    _log_binomial(alpha, k)
    + k * math.log(q)
    + (alpha - k) * math.log1p(-q)
    + (k * k - k) / (2 * z**2)
    for k in range(alpha + 1)
  ]
  return special.logsumexp(terms) / (alpha - 1)


def _poisson_gaussian_rdp_integral(q, z, alpha):
  """The same RDP at any order α > 1, A_α integrated numerically."""
  x = np.linspace(-20 * z - 2, 20 * z + alpha + 2, 200_001)
  log_integrand = stats.norm.logpdf(x, 0, z) + alpha * np.logaddexp(
    math.log1p(-q), math.log(q) + (2 * x - 1) / (2 * z**2)
  )
  return special.logsumexp(log_integrand + math.log(x[1] - x[0])) / (alpha - 1)


@functools.cache
def _poisson_rdp_at_default_orders(q, z):
  return np.array(
    [
      _poisson_gaussian_rdp(q, z, int(a))
      if float(a).is_integer()
      else _poisson_gaussian_rdp_integral(q, z, a)
      for a in rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
    ]
  )


def _sampled_without_replacement_rdp_bound(q, z, alpha):
  """Wang, Balle & Kasiviswanathan 2019, Thm. 27, at integer α ≥ 2, for the
  Gaussian of noise z·C on a sum of updates of norm ≤ C: under replace-one
  its sensitivity is 2C, so its RDP is ε(j) = j·(2C)²/(2(zC)²) = 2j/z², and
  ε(∞) = ∞ (so min{2, (e^{ε(∞)} − 1)^j} = 2)."""
  if q == 1:
    return 2 * alpha / z**2
  eps = lambda j: 2 * j / z**2
  terms = [
    0.0,  # log 1
    2 * math.log(q)
    + _log_binomial(alpha, 2)
    + min(math.log(4) + math.log(math.expm1(eps(2))), eps(2) + math.log(2)),
  ]
  terms += [
    j * math.log(q) + _log_binomial(alpha, j) + math.log(2) + (j - 1) * eps(j)
    for j in range(3, alpha + 1)
  ]
  return special.logsumexp(terms) / (alpha - 1)


def _epsilon_from_rdp(orders, rdps, delta):
  """min over α of ε = rdp + log(1 − 1/α) − (log δ + log α)/(α − 1), and 0
  where the KL bound δ ≥ sqrt(1 − e^{−rdp}) already holds."""
  best = math.inf
  for alpha, r in zip(orders, rdps):
    if delta**2 + math.expm1(-r) > 0:
      return 0.0
    best = min(
      best,
      r
      + math.log1p(-1 / alpha)
      - (math.log(delta) + math.log(alpha)) / (alpha - 1),
    )
  return max(best, 0.0)


def _gaussian_epsilon(mu, delta):
  """ε at δ of the Gaussian mechanism with sensitivity/stddev μ, exactly
  (Balle & Wang 2018: δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ))."""

  def excess(eps):
    return (
      stats.norm.cdf(mu / 2 - eps / mu)
      - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)
      - delta
    )

  return optimize.brentq(excess, 0, 100, xtol=1e-12)


def _grid(z):
  x = np.linspace(-12 * z - 2, 12 * z + 2, 400_001)
  return x, x[1] - x[0]


def _mixture_logpdf(x, z, q, shift):
  return np.logaddexp(
    np.log1p(-q) + stats.norm.logpdf(x, 0, z),
    np.log(q) + stats.norm.logpdf(x, shift, z),
  )


def _poisson_pairs(q, z):
  """Add-or-remove-one: the removal pair (mixture, N(0, z²)) and the
  addition pair (N(0, z²), mixture), as log densities on a grid (C = 1)."""
  x, dx = _grid(z)
  mixture = (
    _mixture_logpdf(x, z, q, 1.0) if q < 1 else stats.norm.logpdf(x, 1, z)
  )
  plain = stats.norm.logpdf(x, 0, z)
  return [(mixture, plain, dx), (plain, mixture, dx)]


def _replace_pair(q, z):
  """Replace-one, K of N without replacement: the client whose update +C
  becomes −C is in the cohort with probability q = K/N, everyone else sends
  0. Output: (1−q)N(0, z²) + qN(±1, z²) (C = 1)."""
  x, dx = _grid(z)
  return (_mixture_logpdf(x, z, q, 1.0), _mixture_logpdf(x, z, q, -1.0), dx)


def _renyi_divergence(log_p, log_q, dx, alpha):
  return special.logsumexp(
    alpha * log_p + (1 - alpha) * log_q + math.log(dx)
  ) / (alpha - 1)


def _composed_epsilon_bracket(log_p, log_q, dx, rounds, delta, width=1e-3):
  """(lower, upper) bounds on ε at δ of the pair (P^T, Q^T).

  δ(ε) = E_{P^T}[(1 − e^{ε − L})₊] with L the sum of T independent privacy
  losses log(p/q)(X), X ∼ P. Rounding every loss down (up) to the grid can
  only lower (raise) δ(ε), so the ε's of the two roundings enclose the
  exact one. Mass outside the x-grid counts as infinite loss above.
  """
  mass = np.exp(log_p) * dx
  loss = log_p - log_q
  missing = max(0.0, 1.0 - mass.sum()) * rounds
  bounds = []
  for rounding, extra in ((np.floor, 0.0), (np.ceil, missing)):
    bins = rounding(loss / width).astype(np.int64)
    low = bins.min()
    pmf = np.bincount(bins - low, weights=mass)
    size = rounds * (len(pmf) - 1) + 1
    n = 1 << (size - 1).bit_length()
    composed = np.fft.irfft(np.fft.rfft(pmf, n) ** rounds, n)[:size]
    composed = np.maximum(composed, 0.0)
    losses = (rounds * low + np.arange(size)) * width

    def excess(eps, composed=composed, losses=losses, extra=extra):
      above = losses > eps
      return np.sum(composed[above] * -np.expm1(eps - losses[above])) + (
        extra - delta
      )

    bounds.append(
      0.0
      if excess(0.0) <= 0
      else optimize.brentq(excess, 0.0, losses.max(), xtol=1e-9)
    )
  return tuple(bounds)


def _poisson_bracket(q, z, rounds, delta):
  """ε of T Poisson-subsampled Gaussian rounds: the larger of the removal
  and the addition direction, each bracketed."""
  lows, highs = zip(
    *(
      _composed_epsilon_bracket(*pair, rounds, delta)
      for pair in _poisson_pairs(q, z)
    )
  )
  return max(lows), max(highs)


def _ours(z, rounds, delta, q, sampling, **kwargs):
  """Our ε's for a cohort of K = q·N clients."""
  num_clients = 300
  return accounting.epsilons(
    z,
    rounds,
    delta,
    num_clients=num_clients,
    clients_per_round=round(q * num_clients),
    sampling=sampling,
    **kwargs,
  )


GRID = [(q, z) for q in (0.01, 0.1, 1 / 3) for z in (0.8, 1.0, 2.0)]
# Each checked after these many rounds (one stream of ε's: round t's
# value is that of composing t rounds, below).
ROUNDS = (1, 4, 100)


# Poisson sampling, add-or-remove-one.


@pytest.mark.parametrize('delta', [1e-5, 1e-8])
@pytest.mark.parametrize('q, z', GRID)
def test_poisson_rdp_is_the_closed_form_binomial_sum(q, z, delta):
  one_round = [_poisson_gaussian_rdp(q, z, a) for a in INTEGER_ORDERS]
  ours = _ours(z, ROUNDS[-1], delta, q, 'poisson', orders=INTEGER_ORDERS)
  for t in ROUNDS:
    assert ours[t - 1] == pytest.approx(
      _epsilon_from_rdp(INTEGER_ORDERS, [t * r for r in one_round], delta),
      rel=1e-9,
    ), t
  # dp_accounting's default orders, fractional ones included.
  orders = rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
  one_round = _poisson_rdp_at_default_orders(q, z)
  ours = _ours(z, ROUNDS[-1], delta, q, 'poisson')
  for t in ROUNDS:
    assert ours[t - 1] == pytest.approx(
      _epsilon_from_rdp(orders, t * one_round, delta), rel=1e-6
    ), t


@pytest.mark.fast
@pytest.mark.parametrize('z', [0.8, 1.0, 2.0])
def test_poisson_at_q_1_is_the_gaussian_mechanism(z):
  num = accounting.epsilons(
    z,
    5,
    1e-5,
    num_clients=10,
    clients_per_round=10,
    sampling='poisson',
    orders=INTEGER_ORDERS,
  )
  for rounds, eps in enumerate(num, 1):
    assert eps == pytest.approx(
      _epsilon_from_rdp(
        INTEGER_ORDERS, [rounds * a / (2 * z**2) for a in INTEGER_ORDERS], 1e-5
      ),
      rel=1e-9,
    )


@pytest.mark.parametrize(
  'q, z, rounds',
  [
    (0.01, 1.0, 16),
    (0.1, 1.0, 4),
    (1 / 3, 1.0, 4),
    (0.1, 2.0, 16),
    (1 / 3, 0.8, 1),
  ],
)
def test_poisson_pld_lies_in_the_exact_bracket_and_below_rdp(q, z, rounds):
  low, high = _poisson_bracket(q, z, rounds, 1e-5)
  assert high - low < 0.05 * high  # The bracket says something.
  ours = _ours(z, rounds, 1e-5, q, 'poisson', accountant='pld')
  assert low - 1e-6 <= ours[-1] <= high + 1e-6
  assert ours[-1] <= _ours(z, rounds, 1e-5, q, 'poisson')[-1]
  # RDP is an upper bound too: above the exact value's lower end.
  assert _ours(z, rounds, 1e-5, q, 'poisson')[-1] >= low


@pytest.mark.parametrize('z, rounds', [(0.8, 1), (1.0, 7), (2.0, 100)])
def test_pld_at_q_1_is_the_analytic_gaussian(z, rounds):
  exact = _gaussian_epsilon(math.sqrt(rounds) / z, 1e-5)
  ours = accounting.epsilons(
    z,
    rounds,
    1e-5,
    num_clients=4,
    clients_per_round=4,
    sampling='poisson',
    accountant='pld',
  )[-1]
  assert exact - 1e-6 <= ours <= exact + 2e-3 * max(1.0, exact)


# Fixed-size sampling without replacement, replace-one.


@pytest.mark.parametrize('q, z', GRID)
def test_uniform_rdp_is_the_general_bound_and_above_the_pair(q, z):
  delta = 1e-5
  bound = [
    _sampled_without_replacement_rdp_bound(q, z, a) for a in INTEGER_ORDERS
  ]
  pair = _replace_pair(q, z)
  divergence = [_renyi_divergence(*pair, a) for a in INTEGER_ORDERS[:31]]
  ours = _ours(z, ROUNDS[-1], delta, q, 'uniform', orders=INTEGER_ORDERS)
  for t in ROUNDS:
    # dp_accounting takes, term by term, the smaller of this bound's and a
    # tighter forward-difference form; at these noise levels (z/2 ≤ 1 for
    # the doubled sensitivity) this bound's terms are the smaller ones.
    assert ours[t - 1] == pytest.approx(
      _epsilon_from_rdp(INTEGER_ORDERS, [t * b for b in bound], delta), rel=1e-9
    ), t
    # The concrete neighbouring pair's RDP, t rounds of it, converted the
    # same way: RDP bounds at or above it give ε at or above this.
    assert ours[t - 1] >= _epsilon_from_rdp(
      INTEGER_ORDERS[:31], [t * d for d in divergence], delta
    ), t


@pytest.mark.parametrize(
  'q, z', [(0.01, 0.8), (0.1, 1.0), (1 / 3, 1.0), (1 / 3, 2.0)]
)
def test_uniform_rdp_is_above_the_pairs_renyi_divergence_at_every_order(q, z):
  ledger = rdp.RdpAccountant(INTEGER_ORDERS[:31], REPLACE_ONE)
  ledger.compose(
    accounting.round_event(z, num_clients=300, clients_per_round=round(300 * q))
  )
  pair = _replace_pair(q, z)
  for alpha, bound in zip(INTEGER_ORDERS[:31], ledger.rdp):
    assert bound >= _renyi_divergence(*pair, alpha) * (1 - 1e-9), alpha


def test_z_itself_under_replace_one_would_undercut_a_real_pair():
  """Why the event carries z/2: the undoubled sensitivity gives an 'upper
  bound' below the divergence of two neighbouring datasets, and an ε below
  theirs."""
  q, z = 1 / 3, 1.0
  ledger = rdp.RdpAccountant([8], REPLACE_ONE)
  ledger.compose(
    dp_accounting.SampledWithoutReplacementDpEvent(
      300, 100, dp_accounting.GaussianDpEvent(z)
    )
  )
  pair = _replace_pair(q, z)
  assert ledger.rdp[0] < _renyi_divergence(*pair, 8)
  q, z = 0.5, 2.0
  ledger = rdp.RdpAccountant(neighboring_relation=REPLACE_ONE)
  ledger.compose(
    dp_accounting.SampledWithoutReplacementDpEvent(
      300, 150, dp_accounting.GaussianDpEvent(z)
    )
  )
  exact_lower, _ = _composed_epsilon_bracket(*_replace_pair(q, z), 1, 1e-5)
  assert ledger.get_epsilon(1e-5) < exact_lower
  assert _ours(z, 1, 1e-5, q, 'uniform')[-1] >= exact_lower


@pytest.mark.parametrize(
  'q, z, rounds', [(0.1, 1.0, 4), (1 / 3, 1.0, 4), (0.5, 2.0, 16)]
)
def test_uniform_epsilon_is_above_the_pairs_exact_epsilon(q, z, rounds):
  exact_lower, _ = _composed_epsilon_bracket(*_replace_pair(q, z), rounds, 1e-5)
  assert _ours(z, rounds, 1e-5, q, 'uniform')[-1] >= exact_lower


@pytest.mark.fast
@pytest.mark.parametrize('z', [0.8, 1.0, 2.0])
def test_uniform_at_q_1_is_the_gaussian_of_sensitivity_2c(z):
  ours = accounting.epsilons(
    z, 3, 1e-5, num_clients=7, clients_per_round=7, orders=INTEGER_ORDERS
  )
  for rounds, eps in enumerate(ours, 1):
    assert eps == pytest.approx(
      _epsilon_from_rdp(
        INTEGER_ORDERS, [rounds * 2 * a / z**2 for a in INTEGER_ORDERS], 1e-5
      ),
      rel=1e-9,
    )


@pytest.mark.parametrize('sampling', ['uniform', 'poisson'])
def test_epsilon_grows_with_rounds_and_sampling_rate_and_falls_with_noise(
  sampling,
):
  def eps(z=1.0, k=30, rounds=20):
    return accounting.epsilons(
      z, rounds, 1e-5, num_clients=300, clients_per_round=k, sampling=sampling
    )

  curve = eps()
  assert all(a < b for a, b in zip(curve, curve[1:]))
  by_noise = [eps(z=z)[-1] for z in (0.6, 0.8, 1.0, 1.5, 3.0)]
  assert all(a > b for a, b in zip(by_noise, by_noise[1:]))
  by_rate = [eps(k=k)[-1] for k in (3, 10, 30, 100, 300)]
  assert all(a < b for a, b in zip(by_rate, by_rate[1:]))


# The per-round values.

# Every sampling scheme with every accountant that takes it (PLD has no
# fixed-size sampling).
ACCOUNTED = [('uniform', 'rdp'), ('poisson', 'rdp'), ('poisson', 'pld')]


@pytest.mark.parametrize('sampling, accountant', ACCOUNTED)
def test_each_rounds_value_is_that_of_composing_that_many_rounds(
  sampling, accountant
):
  kwargs = dict(
    num_clients=200,
    clients_per_round=20,
    sampling=sampling,
    accountant=accountant,
  )
  curve = accounting.epsilons(1.1, 12, 1e-6, **kwargs)
  assert len(curve) == 12
  for rounds in (1, 5, 12):
    assert curve[rounds - 1] == pytest.approx(
      accounting.epsilon(1.1, rounds, 1e-6, **kwargs), rel=1e-6
    )
  assert accounting.epsilons(1.1, 5, 1e-6, **kwargs) == curve[:5]
  assert accounting.epsilons(1.1, 0, 1e-6, **kwargs) == []


@pytest.mark.parametrize('adaptive', [False, True])
def test_a_mechanism_asked_for_again_gets_what_dp_accounting_computes(
  adaptive,
):
  """One round's RDP is remembered by the mechanism's value (each seed of
  a sweep asks again): a second ask, and a mechanism whose z is float32's
  nearest to the same decimal, each get dp_accounting's own composition of
  their event, computed from scratch."""
  # TFF's adaptive clipping needs a cohort whose clipped count's noise
  # (0.05·K by default) leaves the update some of z.
  kwargs = dict(num_clients=100, clients_per_round=20)

  def released(z):
    return accounting.mechanism(
      z, clients_per_round=20, adaptive_clipping=adaptive
    )

  def from_scratch(z):
    event = accounting.sampled_event(released(z), **kwargs)
    values = []
    for t in (1, 2, 3):
      ledger = rdp.RdpAccountant(
        None, dp_accounting.NeighboringRelation.REPLACE_ONE
      )
      ledger.compose(event, t)
      values.append(ledger.get_epsilon(1e-3))
    return values

  curves = []
  for z in (0.8, 0.8, np.float32(0.8)):
    curves.append(accounting.epsilons_of(released(z), 3, 1e-3, **kwargs))
    assert curves[-1] == from_scratch(z)
  assert curves[0] != curves[2]


@pytest.mark.fast
def test_no_noise_is_no_privacy():
  for sampling, accountant in (('uniform', 'rdp'), ('poisson', 'pld')):
    assert (
      accounting.epsilons(
        0.0,
        3,
        1e-5,
        num_clients=10,
        clients_per_round=2,
        sampling=sampling,
        accountant=accountant,
      )
      == [math.inf] * 3
    )


# Adaptive clipping and noise cohorts.


@pytest.mark.fast
@pytest.mark.parametrize(
  'z, clients, stddev',
  [(1.0, 100, None), (0.5, 20, None), (2.0, 50, 1.5), (3.9, 40, 2.0)],
)
def test_adaptive_split_spends_exactly_the_users_budget(z, clients, stddev):
  value_z, count_stddev = budget.adaptive_noise_multipliers(z, clients, stddev)
  assert count_stddev == (0.05 * clients if stddev is None else stddev)
  assert value_z > z
  assert value_z**-2 + (2 * count_stddev) ** -2 == pytest.approx(
    z**-2, rel=1e-12
  )


@pytest.mark.parametrize('sampling, accountant', ACCOUNTED)
def test_adaptive_clipping_costs_what_the_users_multiplier_says(
  sampling, accountant
):
  kwargs = dict(
    num_clients=400,
    clients_per_round=40,
    sampling=sampling,
    accountant=accountant,
  )
  fixed = accounting.epsilons(1.2, 6, 1e-5, **kwargs)
  adaptive = accounting.epsilons(1.2, 6, 1e-5, adaptive_clipping=True, **kwargs)
  assert adaptive == pytest.approx(fixed, rel=1e-9)
  event = accounting.round_event(
    1.2,
    adaptive_clipping=True,
    num_clients=400,
    clients_per_round=40,
    sampling=sampling,
  )
  value, count = event.event.events
  value_z, count_stddev = budget.adaptive_noise_multipliers(1.2, 40)
  scale = 2 if sampling == 'uniform' else 1  # Replace-one: 2C, and 2·0.5.
  assert value.noise_multiplier * scale == value_z
  assert count.noise_multiplier * scale == 2 * count_stddev


def test_adaptive_clipping_refuses_what_tff_refuses():
  # TFF: z must stay below 2·clipped_count_stddev (0.05·K by default).
  with pytest.raises(ValueError, match='clipped_count_stddev'):
    accounting.epsilons(
      1.0,
      3,
      1e-5,
      num_clients=100,
      clients_per_round=10,
      adaptive_clipping=True,
    )
  assert budget.adaptive_noise_multipliers(0.0, 10) == (0.0, 0.0)
  assert accounting.epsilons(
    1.0,
    3,
    1e-5,
    num_clients=100,
    clients_per_round=10,
    adaptive_clipping=True,
    clipped_count_stddev=1.0,
  )


@pytest.mark.parametrize('sampling', ['uniform', 'poisson'])
def test_a_noise_cohort_is_accounted_as_the_run_it_stands_for(sampling):
  # pfl-research: the rate is max(K, M)/population, the noise z for M.
  simulated = accounting.epsilons(
    1.0,
    5,
    1e-5,
    num_clients=100,
    clients_per_round=10,
    sampling=sampling,
    noise_cohort_size=40,
  )
  assert simulated == accounting.epsilons(
    1.0, 5, 1e-5, num_clients=100, clients_per_round=40, sampling=sampling
  )
  deployment = accounting.epsilons(
    1.0,
    5,
    1e-5,
    num_clients=100,
    clients_per_round=10,
    sampling=sampling,
    noise_cohort_size=1000,
    population=100_000,
  )
  assert deployment == accounting.epsilons(
    1.0, 5, 1e-5, num_clients=100_000, clients_per_round=1000, sampling=sampling
  )


def test_adjacency_of_each_scheme():
  assert accounting.adjacency('uniform') == 'replace-one'
  assert accounting.adjacency('poisson') == 'add-or-remove-one'
  assert accounting.adjacency('proportional') is None
  with pytest.raises(ValueError, match='sampling must be one of'):
    accounting.adjacency('stratified')


# Errors.


BASE = dict(num_clients=100, clients_per_round=10)


@pytest.mark.parametrize('z', [-0.1, -1, math.nan, math.inf, '1'])
def test_a_bad_noise_multiplier_is_refused(z):
  with pytest.raises(ValueError, match='noise_multiplier'):
    accounting.epsilons(z, 3, 1e-5, **BASE)


@pytest.mark.parametrize('delta', [0, 1, -1e-5, 1.5, math.nan])
def test_delta_outside_the_open_unit_interval_is_refused(delta):
  with pytest.raises(ValueError, match='delta must be in'):
    accounting.epsilons(1.0, 3, delta, **BASE)


def test_poisson_with_more_clients_per_round_than_clients_is_refused():
  with pytest.raises(ValueError, match='q = K/N would exceed 1'):
    accounting.epsilons(
      1.0, 3, 1e-5, num_clients=10, clients_per_round=11, sampling='poisson'
    )
  with pytest.raises(ValueError, match='clients_per_round K = 11 > '):
    accounting.epsilons(1.0, 3, 1e-5, num_clients=10, clients_per_round=11)


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (dict(num_clients=0, clients_per_round=1), 'num_clients must be >= 1'),
    (
      dict(num_clients=10, clients_per_round=0),
      'clients_per_round must be >= 1',
    ),
    (dict(num_clients=10.5, clients_per_round=1), 'whole number'),
    (dict(BASE, noise_cohort_size=5), 'noise_cohort_size M = 5 < '),
    (dict(BASE, noise_cohort_size=500), 'M = 500 > population 100'),
    (dict(BASE, population=1000), 'needs noise_cohort_size'),
    (dict(BASE, sampling='random'), 'sampling must be one of'),
    (dict(BASE, accountant='moments'), 'accountant must be one of'),
    (dict(BASE, accountant='pld'), "does not support sampling 'uniform'"),
    (dict(BASE, orders=[1, 2]), 'orders must be finite and > 1'),
  ],
)
def test_other_bad_arguments_are_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    accounting.epsilons(1.0, 3, 1e-5, **kwargs)


@pytest.mark.parametrize('rounds', [-1, 2.5, True])
def test_bad_rounds_are_refused(rounds):
  with pytest.raises(ValueError, match='rounds must be'):
    accounting.epsilons(1.0, rounds, 1e-5, **BASE)


def test_proportional_sampling_is_refused_with_the_reason():
  for call in (accounting.epsilons, accounting.epsilon):
    with pytest.raises(
      accounting.UncertifiedSamplingError, match='depends on its data'
    ):
      call(1.0, 3, 1e-5, sampling='proportional', **BASE)
  with pytest.raises(accounting.UncertifiedSamplingError):
    accounting.round_event(1.0, sampling='proportional', **BASE)


def test_imports_no_tensorflow():
  result = subprocess.run(
    [
      sys.executable,
      '-c',
      'import sys; from tff_algos.privacy import accounting; '
      'accounting.epsilons(1.0, 2, 1e-5, num_clients=9, clients_per_round=3, '
      "sampling='poisson', accountant='pld'); "
      'loaded = [m for m in sys.modules if m.split(".")[0] in '
      '("tensorflow", "tensorflow_federated", "keras")]; '
      'assert not loaded, loaded',
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr[-2000:]


def test_the_adjacency_table_covers_every_sampling_scheme():
  """The accountant's schemes (budget's adjacency table) are the
  sampler's, so no run's scheme lacks its neighbouring relation."""
  assert set(accounting.SAMPLINGS) == {s.value for s in SamplingScheme}
