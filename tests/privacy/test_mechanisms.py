"""The seeded DP aggregator: the same seed gives the same run, a restored
state continues with the same noise, and apart from the seeding it is TFF's
DP aggregation (its clipping, normalization, noise scale and DP events)."""

import asyncio
import math

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest
from scipy import stats
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos.algorithms import aggregators
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedprox
from tff_algos.privacy import accounting
from tff_algos.privacy import budget
from tff_algos.privacy import mechanisms
from tff_algos.simulation import trainer
from tff_algos.simulation.config import resolve

CLIENTS, CLIP, ROUNDS = 3, 0.1, 3
DP = tff.aggregators.DifferentiallyPrivateFactory


def _model_fn():
  return helpers.task_and_arrays()[0].model_fn


def _client_data():
  return helpers.client_datasets(CLIENTS)


def _build(aggregator, algorithm='fedprox'):
  """The production build of `algorithm` with `aggregator`."""
  if algorithm == 'fedavg':
    return fedavg.build_fed_avg(
      _model_fn(),
      0.5,
      model_aggregator=aggregator,
      client_input=learning.DatasetInput(2),
    )
  return fedprox.build_fed_prox(
    _model_fn(),
    0.5,
    mu=0.5,
    model_aggregator=aggregator,
    client_input=learning.DatasetInput(2),
  )


def _states(process, rounds=ROUNDS, state=None):
  """The states after each of `rounds` rounds from the seeded initial model
  (or from `state`)."""
  if state is None:
    state = process.set_model_weights(
      process.initialize(), learning.initial_model_weights(_model_fn(), 0)
    )
  states = []
  for _ in range(rounds):
    state = process.next(state, _client_data()).state
    states.append(state)
  return states


def _weights(process, state):
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


def _identical(a, b):
  return all(
    x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b)
  )


def _final_weights(aggregator, algorithm='fedprox'):
  process = _build(aggregator, algorithm)
  return _weights(process, _states(process)[-1])


FACTORIES = {
  'fixed': lambda z, seed, **kw: mechanisms.gaussian_fixed(
    z, CLIENTS, CLIP, seed=seed, **kw
  ),
  'adaptive': lambda z, seed, **kw: mechanisms.gaussian_adaptive(
    z, CLIENTS, seed=seed, **kw
  ),
}


@pytest.mark.parametrize('clipping', sorted(FACTORIES))
def test_the_same_seed_gives_the_same_run_another_seed_another(clipping):
  make = FACTORIES[clipping]
  z = 0.1  # Adaptive clipping needs z < 0.1·K (TFF's count noise).
  first = _final_weights(make(z, seed=7))
  assert _identical(first, _final_weights(make(z, seed=7)))
  other = _final_weights(make(z, seed=8))
  assert not any(np.array_equal(a, b) for a, b in zip(first, other))
  without_noise = _final_weights(make(0.0, seed=7))
  assert not any(np.array_equal(a, b) for a, b in zip(first, without_noise))


def test_tffs_own_noise_is_not_seeded():
  """What the seeding is for: TFF's factory, built twice, differs."""
  runs = [
    _final_weights(DP.gaussian_fixed(1.0, float(CLIENTS), CLIP))
    for _ in range(2)
  ]
  assert not _identical(*runs)


@pytest.mark.parametrize('clip', [CLIP, None])  # Fixed, adaptive.
def test_a_production_build_draws_its_noise_unseeded(clip):
  """A deployment must not hold a seed that would let whoever reads the
  state or the export compute the noise: the production build of a DP run
  draws afresh each time, the simulation build of the same settings not."""
  settings = resolve(
    helpers.quick_config(
      algo='fedprox',
      aggregator='dp',
      dp_noise_multiplier=0.1,
      dp_clip=clip,
      clients_per_round=CLIENTS,
      seed=7,
    ),
    num_clients=30,
  )

  def final(client_input):
    process = trainer.build_process(settings, _model_fn(), client_input)
    return _weights(process, _states(process)[-1])

  production = learning.DatasetInput(2)
  assert not _identical(final(production), final(production))
  seeded = settings.algorithm.aggregator
  assert _identical(
    *[_final_weights(aggregators.build(seeded)) for _ in range(2)]
  )


@pytest.mark.parametrize('algorithm', ['fedavg', 'fedprox'])
def test_without_noise_it_is_tffs_gaussian_fixed(algorithm):
  ours = _final_weights(
    mechanisms.gaussian_fixed(0.0, CLIENTS, CLIP, seed=3), algorithm
  )
  tffs = _final_weights(DP.gaussian_fixed(0.0, float(CLIENTS), CLIP), algorithm)
  assert _identical(ours, tffs)


def test_without_noise_it_is_tffs_adaptive_clipping_and_dp_aggregator():
  # The clip's adaptation, and TFF's zeroing in front of it.
  assert _identical(
    _final_weights(mechanisms.gaussian_adaptive(0.0, CLIENTS, seed=1)),
    _final_weights(DP.gaussian_adaptive(0.0, float(CLIENTS))),
  )
  assert _identical(
    _final_weights(
      mechanisms.gaussian_adaptive(0.0, CLIENTS, seed=1, zeroing=True)
    ),
    _final_weights(tff.learning.dp_aggregator(0.0, CLIENTS)),
  )


@pytest.mark.parametrize('clipping', sorted(FACTORIES))
def test_a_state_restored_after_round_2_gives_the_same_round_3(
  clipping, tmp_path
):
  process = _build(FACTORIES[clipping](0.1, seed=5))
  states = _states(process)
  manager = tff.program.FileProgramStateManager(str(tmp_path))
  asyncio.run(manager.save(states[1], 2))
  restored, version = asyncio.run(manager.load_latest(process.initialize()))
  assert version == 2
  # A new build of the same aggregator, as a restarted program has.
  again = _build(FACTORIES[clipping](0.1, seed=5))
  (resumed,) = _states(again, 1, restored)
  assert _identical(_weights(again, resumed), _weights(process, states[2]))
  # The noise comes from the state: the round-2 model with a fresh
  # aggregator state (round counter 0) draws other noise.
  fresh = again.set_model_weights(
    again.initialize(), again.get_model_weights(restored)
  )
  (from_fresh,) = _states(again, 1, fresh)
  assert not _identical(
    _weights(again, from_fresh), _weights(process, states[2])
  )


# The aggregation process alone: K clients' vectors of d coordinates.

DIM = 40_000


def _aggregate(factory, values, rounds=1):
  process = factory.create(tff.TensorType(np.float32, [DIM]))
  state = process.initialize()
  outputs = []
  for _ in range(rounds):
    output = process.next(state, values)
    state = output.state
    outputs.append(output)
  return outputs


def _client_values(k, rng):
  """Updates of norms 0.05 to 4 (some clipped at C = 0.1, some not)."""
  values = rng.normal(size=(k, DIM)).astype(np.float32)
  norms = np.linspace(0.05, 4.0, k)
  return list(
    values
    / np.linalg.norm(values, axis=1, keepdims=True)
    * norms[:, None].astype(np.float32)
  )


def _clipped_mean(values, clip, denominator):
  clipped = [
    v * min(1.0, clip / np.linalg.norm(v.astype(np.float64))) for v in values
  ]
  return np.sum(clipped, axis=0) / denominator


def _check_gaussian(noise, stddev):
  """`noise` looks like N(0, stddev²) draws: the sample stddev within 6
  standard errors (1/sqrt(2n) relative), the mean within 6 of its own, and
  a Kolmogorov–Smirnov test."""
  n = noise.size
  assert abs(np.std(noise) / stddev - 1) < 6 / math.sqrt(2 * n)
  assert abs(np.mean(noise)) < 6 * stddev / math.sqrt(n)
  assert stats.kstest(noise / stddev, 'norm').pvalue > 1e-4


@pytest.mark.fast
@pytest.mark.parametrize(
  'k, z, cohort, seed',
  [
    (3, 1.0, None, 11),
    (10, 0.5, None, 11),
    (10, 2.0, 40, 11),
    (10, 2.0, 40, None),  # None: a production build's unseeded noise.
  ],
)
def test_the_noise_is_gaussian_of_stddev_z_c_over_the_cohort(
  k, z, cohort, seed
):
  rng = np.random.default_rng(k)
  values = _client_values(k, rng)
  outputs = _aggregate(
    mechanisms.gaussian_fixed(z, k, CLIP, seed=seed, noise_cohort_size=cohort),
    values,
    rounds=2,
  )
  expected_mean = _clipped_mean(values, CLIP, k)  # TFF divides by K.
  noises = [np.asarray(o.result, np.float64) - expected_mean for o in outputs]
  stddev = z * CLIP / (cohort or k)  # A round of M clients' noise on a mean.
  for noise in noises:
    _check_gaussian(noise, stddev)
  # Each round draws afresh.
  assert abs(np.corrcoef(*noises)[0, 1]) < 6 / math.sqrt(DIM)


def test_tffs_noise_has_the_same_scale():
  """The reference for the scale above: TFF's own factory."""
  rng = np.random.default_rng(0)
  values = _client_values(10, rng)
  (output,) = _aggregate(DP.gaussian_fixed(0.5, 10.0, CLIP), values)
  _check_gaussian(
    np.asarray(output.result, np.float64) - _clipped_mean(values, CLIP, 10),
    0.5 * CLIP / 10,
  )


@pytest.mark.parametrize('cohort', [None, 40])
def test_adaptive_clipping_noises_updates_and_count_as_tff_splits_them(cohort):
  k, z, clip = 10, 0.5, 1.0
  rng = np.random.default_rng(1)
  values = _client_values(k, rng)
  factory = mechanisms.gaussian_adaptive(
    z, k, seed=2, initial_l2_norm_clip=clip, noise_cohort_size=cohort
  )
  (output,) = _aggregate(factory, values)
  value_z, count_stddev = budget.adaptive_noise_multipliers(z, cohort or k)
  scale = k / (cohort or k)
  _check_gaussian(
    np.asarray(output.result, np.float64) - _clipped_mean(values, clip, k),
    value_z * clip * scale / k,
  )
  # The count: the clip moves by exp(−lr·(b − 0.5)), b the noised fraction
  # of unclipped clients (here 5 of 10 exactly), so each seed's clip
  # reveals its count noise, whose stddev on b is σ_b·(K/M)/K.
  process = factory.create(tff.TensorType(np.float32, [DIM]))
  state = process.initialize()
  query_state = state.query_state
  small = [np.zeros(DIM, np.float32)] * 5 + [
    np.full(DIM, 1.0, np.float32)
  ] * 5  # Norms 0 and 200 for a clip of 1.
  count_noise = []
  for seed in range(300):
    seeded = state._replace(
      query_state=query_state._replace(seed=np.array([seed, 0], np.int64))
    )
    new_clip = process.next(seeded, small).measurements['dp_query_metrics'][
      'clip'
    ]
    fraction = 0.5 - math.log(new_clip / clip) / 0.2
    count_noise.append(fraction - 0.5)
  count_noise = np.array(count_noise)
  expected = count_stddev * scale / k
  assert abs(np.std(count_noise) / expected - 1) < 6 / math.sqrt(600)
  assert abs(np.mean(count_noise)) < 6 * expected / math.sqrt(300)


def test_the_dp_events_are_tffs_and_the_accountant_reads_them_alike():
  k, z = 20, 1.5
  values = _client_values(k, np.random.default_rng(2))
  (ours,) = _aggregate(mechanisms.gaussian_adaptive(z, k, seed=0), values)
  (tffs,) = _aggregate(DP.gaussian_adaptive(z, float(k)), values)
  events = [
    dp_accounting.DpEvent.from_named_tuple(o.state.dp_event)
    for o in (ours, tffs)
  ]
  multipliers = [[e.noise_multiplier for e in event.events] for event in events]
  value_z, count_stddev = budget.adaptive_noise_multipliers(z, k)
  for pair in multipliers:
    assert pair == pytest.approx([value_z, 2 * count_stddev], rel=1e-6)

  # TFF's ledger event, Poisson-sampled, gives the accountant's ε once its
  # float32 multipliers are Python floats: dp_accounting's RDP accountant
  # takes a non-float multiplier of a composed event for the whole event
  # and drops the clipped count's Gaussian.
  def epsilon(event):
    ledger = rdp.RdpAccountant()
    ledger.compose(dp_accounting.PoissonSampledDpEvent(k / 200, event), 50)
    return ledger.get_epsilon(1e-5)

  ours = accounting.epsilons(
    z,
    50,
    1e-5,
    num_clients=200,
    clients_per_round=k,
    sampling='poisson',
    adaptive_clipping=True,
  )[-1]
  as_floats = dp_accounting.ComposedDpEvent(
    [dp_accounting.GaussianDpEvent(float(m)) for m in multipliers[1]]
  )
  assert epsilon(as_floats) == pytest.approx(ours, rel=1e-5)
  assert epsilon(events[1]) < 0.9 * ours
  # And so does the fixed clip's.
  (fixed,) = _aggregate(mechanisms.gaussian_fixed(z, k, CLIP, seed=0), values)
  event = dp_accounting.DpEvent.from_named_tuple(fixed.state.dp_event)
  assert event.noise_multiplier == pytest.approx(z, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('clipping', sorted(FACTORIES))
def test_compiles_to_tffs_map_reduce_form(clipping):
  process = _build(FACTORIES[clipping](0.1, seed=0))
  assert isinstance(
    tff.backends.mapreduce.get_map_reduce_form_for_computation(process.next),
    tff.backends.mapreduce.MapReduceForm,
  )


@pytest.mark.fast
@pytest.mark.parametrize(
  'build, error, message',
  [
    (
      lambda: mechanisms.gaussian_fixed(-1.0, 3, 0.1, seed=0),
      ValueError,
      'noise_multiplier must be >= 0',
    ),
    (
      lambda: mechanisms.gaussian_fixed(1.0, 0, 0.1, seed=0),
      ValueError,
      'clients_per_round must be > 0',
    ),
    (
      lambda: mechanisms.gaussian_fixed(1.0, 3, 0.0, seed=0),
      ValueError,
      'clip must be > 0',
    ),
    (
      lambda: mechanisms.gaussian_fixed(1.0, 3, 0.1, seed=-1),
      ValueError,
      r'seed must be in \[0, 2\*\*63\)',
    ),
    (
      lambda: mechanisms.gaussian_fixed(1.0, 3, 0.1, seed=1.5),
      TypeError,
      'seed must be a whole number',
    ),
    (
      lambda: mechanisms.gaussian_fixed(
        1.0, 3, 0.1, seed=0, noise_cohort_size=2
      ),
      ValueError,
      'noise_cohort_size 2.0 < clients_per_round 3.0',
    ),
    (
      lambda: mechanisms.gaussian_adaptive(1.0, 3, seed=0),
      ValueError,
      'clipped_count_stddev',
    ),
    (
      lambda: mechanisms.gaussian_adaptive(
        0.1, 3, seed=0, target_unclipped_quantile=1.5
      ),
      ValueError,
      r'target_unclipped_quantile must be in \[0, 1\]',
    ),
  ],
)
def test_bad_arguments_are_refused_when_built(build, error, message):
  with pytest.raises(error, match=message):
    build()
