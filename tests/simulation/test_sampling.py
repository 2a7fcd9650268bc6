"""Client sampling schemes: the default's draws, Poisson and n_k-proportional
selection, and every draw a function of (seed, round, client) only.

The statistical tests use fixed seeds, so they give the same result on every
run; their bounds are at least 5 standard deviations of the estimate, so a
correct sampler passes them for (nearly) any seed too.
"""

import collections
import itertools
from unittest import mock

import numpy as np
import pytest

from tff_algos.simulation import client_inputs
from tff_algos.simulation.sampling import ClientPlan
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import SamplingScheme
from tff_algos.simulation.sampling import StragglerPolicy


def _uniform_plan_as_before(num_clients, k, epochs, seed, fraction, round_num):
  """Round `round_num`'s plan as the sampler drew it with a single scheme
  (K of N uniformly without replacement), written out independently."""

  def rng(stream, client=0):
    return np.random.default_rng([seed, round_num, client, stream])

  selected = np.sort(rng(0).choice(num_clients, size=k, replace=False))
  num_stragglers = k - int(round(k * (1.0 - fraction)))
  stragglers = set(
    rng(1).choice(selected, size=num_stragglers, replace=False).tolist()
  )
  return [
    ClientPlan(
      c,
      int(rng(2, c).integers(1, max(epochs, 2))) if c in stragglers else epochs,
      c in stragglers,
    )
    for c in selected.tolist()
  ]


def _stragglers_after(selected, seed, fraction, round_num):
  """The straggler set drawn from `selected`, as for the uniform scheme."""
  k = len(selected)
  num_stragglers = k - int(round(k * (1.0 - fraction)))
  return set(
    np.random.default_rng([seed, round_num, 0, 1])
    .choice(np.asarray(selected), size=num_stragglers, replace=False)
    .tolist()
  )


@pytest.mark.fast
@pytest.mark.parametrize(
  'num_clients,k,epochs,fraction',
  [(30, 10, 20, 0.5), (30, 10, 20, 0.0), (100, 7, 1, 0.9), (5, 5, 3, 1.0)],
)
def test_default_draws_are_unchanged(num_clients, k, epochs, fraction):
  for seed in (0, 1, 7):
    samplers = [
      ClientSampler(num_clients, k, epochs, seed, fraction),
      ClientSampler(num_clients, k, epochs, seed, fraction, scheme='uniform'),
      ClientSampler(
        num_clients,
        k,
        epochs,
        seed,
        fraction,
        SamplingScheme.UNIFORM,
        client_sizes=range(1, num_clients + 1),
      ),
    ]
    for round_num in (1, 2, 3, 50, 199):
      want = _uniform_plan_as_before(
        num_clients, k, epochs, seed, fraction, round_num
      )
      for sampler in samplers:
        assert sampler.round_plan(round_num) == want
  assert ClientSampler(30, 10, 4, 0).scheme is SamplingScheme.UNIFORM


def _sampler(scheme, num_clients=20, k=5, seed=3, fraction=0.5, sizes=None):
  if sizes is None:
    sizes = [1 + (7 * c) % 11 for c in range(num_clients)]
  return ClientSampler(
    num_clients,
    k,
    epochs=4,
    seed=seed,
    straggler_fraction=fraction,
    scheme=scheme,
    client_sizes=sizes,
  )


@pytest.mark.fast
@pytest.mark.parametrize('scheme', list(SamplingScheme))
def test_draws_are_a_function_of_seed_and_round_only(scheme):
  rounds = list(range(1, 40))
  forward = _sampler(scheme)
  plans = {r: forward.round_plan(r) for r in rounds}
  backward = _sampler(scheme)  # A resumed run: a fresh sampler, other order.
  for r in reversed(rounds):
    assert backward.participants(r, StragglerPolicy.PARTIAL) == plans[r]
    # Whatever the policy, the same clients, stragglers and epochs: DROP
    # only leaves the stragglers out.
    assert backward.participants(r, StragglerPolicy.DROP) == [
      p for p in plans[r] if not p.straggler
    ]
    assert backward.round_plan(r) == plans[r]
  other_seed = _sampler(scheme, seed=4)
  assert sum(other_seed.round_plan(r) != plans[r] for r in rounds) > 30
  assert len({tuple(p.client for p in plans[r]) for r in rounds}) > 30


@pytest.mark.parametrize(
  'scheme', [SamplingScheme.POISSON, SamplingScheme.PROPORTIONAL]
)
def test_stragglers_are_drawn_after_selection_as_for_uniform(scheme):
  seed, fraction = 5, 0.3
  sampler = _sampler(scheme, num_clients=30, k=8, seed=seed, fraction=fraction)
  sizes_seen = set()
  for round_num in range(1, 60):
    plans = sampler.round_plan(round_num)
    selected = [p.client for p in plans]
    assert selected == sorted(set(selected))  # Sorted, distinct.
    assert selected == sampler.selected(round_num).tolist()
    sizes_seen.add(len(selected))
    if not plans:
      continue
    stragglers = _stragglers_after(selected, seed, fraction, round_num)
    assert {p.client for p in plans if p.straggler} == stragglers
    for p in plans:
      if p.straggler:
        assert p.epochs == np.random.default_rng(
          [seed, round_num, p.client, 2]
        ).integers(1, 4)
      else:
        assert p.epochs == 4
  if scheme == SamplingScheme.POISSON:
    assert len(sizes_seen) > 5  # The cohort size varies...
  else:
    assert sizes_seen == {8}  # ...or is always K.


def test_poisson_cohorts_have_mean_k_and_inclusion_q():
  num_clients, k, rounds = 40, 8, 5000
  q = k / num_clients
  sampler = ClientSampler(num_clients, k, epochs=1, seed=11, scheme='poisson')
  included = np.zeros((rounds, num_clients), bool)
  for r in range(rounds):
    included[r, sampler.selected(r + 1)] = True
  sizes = included.sum(axis=1)
  # Mean K: the estimate's sd is sqrt(N q (1 - q) / R) = 0.036.
  assert abs(sizes.mean() - k) < 5 * np.sqrt(num_clients * q * (1 - q) / rounds)
  # Binomial(N, q) spread, not a fixed K: var N q (1 - q) = 6.4 (the sample
  # variance's sd here is about 0.13).
  assert abs(sizes.var() - num_clients * q * (1 - q)) < 0.7
  # Every client with probability q, independently of the others.
  frequencies = included.mean(axis=0)
  assert np.all(np.abs(frequencies - q) < 5 * np.sqrt(q * (1 - q) / rounds))
  pair = (included[:, 0] & included[:, 1]).mean()
  assert abs(pair - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / rounds)


def test_poisson_rounds_without_clients_train_nothing():
  num_clients, k, rounds = 4, 1, 4000
  sampler = ClientSampler(
    num_clients, k, epochs=3, seed=2, straggler_fraction=0.5, scheme='poisson'
  )
  empty = [r for r in range(1, rounds + 1) if not sampler.round_plan(r)]
  p_empty = (1 - k / num_clients) ** num_clients  # 0.316
  assert abs(len(empty) / rounds - p_empty) < 5 * np.sqrt(
    p_empty * (1 - p_empty) / rounds
  )
  for policy in StragglerPolicy:
    assert sampler.participants(empty[0], policy) == []
  assert client_inputs.round_inputs(sampler, [], [], empty[0], 10) == []

  # The round loop: no call of the process, w_{t+1} = w_t, 0 participants.
  from tff_algos.simulation import loop as loop_lib

  process = mock.Mock()
  arrays = [
    collections.OrderedDict(
      x=np.zeros((3, 2), np.float32), y=np.zeros(3, np.int32)
    )
  ] * num_clients
  loop = loop_lib.Loop(
    process=process,
    sampler=sampler,
    policy=StragglerPolicy.PARTIAL,
    batch_size=2,
    train_arrays=arrays,
  )
  state = object()
  new_state, row, _ = loop.train(state, empty[0])
  assert new_state is state
  assert row['participants'] == 0 and row['local_steps'] == 0
  process.next.assert_not_called()


def _successive_sampling_inclusion(p, k):
  """Each item's probability of being among k drawn one after another
  without replacement, each draw ∝ p among the items left: exact, summing
  over every ordered sequence of draws."""
  inclusion = np.zeros(len(p))
  for sequence in itertools.permutations(range(len(p)), k):
    probability, left = 1.0, 1.0
    for item in sequence:
      probability *= p[item] / left
      left -= p[item]
    inclusion[list(sequence)] += probability
  return inclusion


def test_proportional_inclusion_is_numpy_weighted_sampling_without_replacement():
  sizes = [1, 2, 4, 8, 16, 32]
  k, rounds = 3, 20000
  p = np.asarray(sizes) / sum(sizes)
  exact = _successive_sampling_inclusion(p, k)
  assert exact.sum() == pytest.approx(k)
  sampler = ClientSampler(
    len(sizes), k, epochs=1, seed=0, scheme='proportional', client_sizes=sizes
  )
  counts = np.zeros(len(sizes))
  for r in range(1, rounds + 1):
    selected = sampler.selected(r)
    assert len(selected) == k == len(set(selected.tolist()))  # No repeats.
    counts[selected] += 1
  frequencies = counts / rounds
  sd = np.sqrt(exact * (1 - exact) / rounds)
  np.testing.assert_array_less(np.abs(frequencies - exact), 5 * sd)
  # Ordered by n_k (the exact gaps are far wider than the estimates' sd)...
  assert np.all(np.diff(exact) > 10 * sd.max())
  assert np.all(np.diff(frequencies) > 0)
  # ...and not K p_k, which sampling with replacement would give: the
  # largest client (K p_k = 1.52) is in at most every round.
  assert k * p[-1] > 1 > frequencies[-1]
  assert abs(frequencies[0] - k * p[0]) > 5 * sd[0]


def test_proportional_with_equal_sizes_is_uniform():
  num_clients, k, rounds = 10, 4, 5000
  sampler = ClientSampler(
    num_clients,
    k,
    epochs=1,
    seed=1,
    scheme='proportional',
    client_sizes=[7] * num_clients,
  )
  counts = np.zeros(num_clients)
  for r in range(1, rounds + 1):
    counts[sampler.selected(r)] += 1
  q = k / num_clients
  assert np.all(np.abs(counts / rounds - q) < 5 * np.sqrt(q * (1 - q) / rounds))


def test_schemes_draw_from_their_own_streams():
  """Adding the schemes left the uniform stream alone; each scheme's draws
  differ from the others' (not one stream read three ways)."""
  sizes = [5] * 30
  plans = {
    s: [
      _sampler(s, 30, 10, 0, 0.0, sizes).selected(r).tolist()
      for r in range(1, 20)
    ]
    for s in SamplingScheme
  }
  assert plans[SamplingScheme.UNIFORM] != plans[SamplingScheme.PROPORTIONAL]
  assert plans[SamplingScheme.UNIFORM] != plans[SamplingScheme.POISSON]


@pytest.mark.parametrize(
  'kwargs,message',
  [
    (dict(scheme='importance'), 'unknown sampling scheme'),
    (dict(scheme='poisson', clients_per_round=11), 'poisson sampling'),
    (dict(scheme='poisson', clients_per_round=0), 'poisson sampling'),
    (dict(scheme='uniform', clients_per_round=11), 'clients_per_round'),
    (dict(scheme='proportional'), 'needs client_sizes'),
    (
      dict(scheme='proportional', client_sizes=[3] * 9 + [0]),
      r'client\(s\) \[9\] have none',
    ),
    (dict(scheme='proportional', client_sizes=[3] * 9), '9 entries'),
    (dict(scheme='proportional', client_sizes=[3.5] * 10), 'whole numbers'),
    (dict(scheme='uniform', client_sizes=[3] * 11), '11 entries'),
  ],
)
def test_invalid_settings_are_value_errors(kwargs, message):
  settings = dict(num_clients=10, clients_per_round=3, epochs=1, seed=0)
  settings.update(kwargs)
  with pytest.raises(ValueError, match=message):
    ClientSampler(**settings)


@pytest.mark.fast
def test_settings_are_normalized():
  sampler = ClientSampler(
    3, 2, 1, 0, scheme='proportional', client_sizes=np.array([4, 5, 6])
  )
  assert sampler.scheme is SamplingScheme.PROPORTIONAL
  assert sampler.client_sizes == (4, 5, 6)
  assert all(type(n) is int for n in sampler.client_sizes)
  assert sampler == ClientSampler(
    3, 2, 1, 0, scheme='proportional', client_sizes=[4, 5, 6]
  )
  hash(sampler)  # Still a frozen, hashable value.
