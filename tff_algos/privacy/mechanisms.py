"""Differentially private model aggregation whose noise is seeded.

TFF's DP aggregators draw their Gaussian noise from TensorFlow's unseeded
random ops: two runs of the same DP experiment end at different models, and
a run resumed from a checkpoint draws different noise from the
uninterrupted one. Here the noise of round t is a function of (seed, t)
only: `tf.random.stateless_normal` keyed by the seed and a round counter
that live in the aggregator's state. The same seed gives byte-identical
runs, and a process state saved after round t and restored continues with
exactly the noise an uninterrupted run draws.

Everything else is tensorflow_privacy's and TFF's: the factories below
build the queries of `tff.aggregators.DifferentiallyPrivateFactory
.gaussian_fixed` / `.gaussian_adaptive` (tensorflow_privacy's
`GaussianSumQuery`, `QuantileAdaptiveClipSumQuery` and `NormalizedQuery`)
with only the Gaussian draws replaced, and TFF's factory aggregates them.
So clipping, normalization, the clip's adaptation and the DP events in the
state are TFF's:

  * fixed clipping: each client's update is clipped to L2 norm C, the
    clipped updates are summed, N(0, (z·C)²) noise is added to each
    coordinate of the sum, and the sum is divided by `clients_per_round`
    (the expected cohort size, not the number of clients that reported, as
    TFF does: the count would leak under Poisson sampling). The mean
    carries noise of stddev z·C/K;
  * adaptive clipping (Andrew et al. 2021): the clip follows the
    `target_unclipped_quantile` (default 0.5) of the update norms,
    geometrically at `learning_rate` 0.2 from `initial_l2_norm_clip` 0.1,
    using a noised count of unclipped clients. TFF splits the user's z
    between that count (stddev σ_b = 0.05·K unless given) and the updates
    (z_v = (z⁻² − (2σ_b)⁻²)^(−1/2)), so that the two releases together cost
    what z alone would (`tff_algos.privacy.accounting` accounts for it);
  * a noise cohort M ≥ K (pfl-research's `noise_cohort_size`): noise
    calibrated as if M clients took part while K are simulated. The sum of
    the K updates gets K/M times the noise of M (stddev z·C·K/M, divided by
    K), so the mean is as noisy as that of a round of M clients. Adaptive
    clipping splits z as a run of M would. The accountant's ε is then that
    of the M-client run (`privacy.accounting`);
  * zeroing (optional, off by default): `tff.learning.dp_aggregator` first
    zeroes updates whose norm is far above the others' (TFF's constants).
    Its threshold follows the clients' norms without noise, a release the
    DP accounting does not cover, so it stays off unless asked for.

A seed is for simulation only: whoever knows it can compute each round's
noise and subtract it from the released model. The seed is a constant of
the initial state and the state goes to checkpoints, so a deployment
builds with `seed=None`: TF's unseeded draws, nothing kept (the production
build does: `algorithms.aggregators`).

Each factory returns an `UnweightedAggregationFactory` for the builders'
`model_aggregator=` (they wrap it with `tff.aggregators
.as_weighted_aggregator`: uniform weights). It compiles to TFF's
MapReduceForm. The noise is drawn at the server, as TFF's is.
"""

import collections
import collections.abc
import math
import numbers

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_algos.privacy import budget

# TFF's defaults (`DifferentiallyPrivateFactory.gaussian_adaptive`).
INITIAL_L2_NORM_CLIP = 0.1
TARGET_UNCLIPPED_QUANTILE = budget.TARGET_UNCLIPPED_QUANTILE
CLIP_LEARNING_RATE = 0.2
# The random streams of one round: the updates' noise and the count's.
_VALUE_STREAM, _COUNT_STREAM = 0, 1
_MAX_SEED = 2**63 - 1


class _RoundKey:
  """The key of the round whose result a `SeededQuery` is releasing.

  Set by `SeededQuery.get_noised_result` while its inner query draws noise
  (during tracing: the key is a tensor of the computation), so that every
  Gaussian draw inside, however deeply nested, is a function of the
  round's key. It is None otherwise.
  """

  def __init__(self):
    self.current = None

  def seed(self, stream, index):
    """The stateless seed of draw `index` of `stream` this round."""
    if self.current is None:
      raise RuntimeError(
        'seeded Gaussian queries draw noise only inside '
        'the SeededQuery that holds their key'
      )
    key = tf.random.experimental.stateless_fold_in(self.current, stream)
    return tf.random.experimental.stateless_fold_in(key, index)


class SeededGaussianSumQuery(tfp.GaussianSumQuery):
  """tensorflow_privacy's Gaussian sum query, its noise drawn from the
  round's key: same clipping, same stddev, same DP event.

  `key` is the `SeededQuery.key` it is built with (`SeededQuery`'s
  `build_inner`); queries of one `SeededQuery` need distinct `stream`s.
  """

  def __init__(self, l2_norm_clip, stddev, key: _RoundKey, stream: int = 0):
    super().__init__(l2_norm_clip, stddev)
    self._key = key
    self._stream = stream

  def get_noised_result(self, sample_state, global_state):
    def add_noise(index, value):
      noise = tf.random.stateless_normal(
        tf.shape(value),
        seed=self._key.seed(self._stream, index),
        stddev=global_state.stddev,
        dtype=tf.float32,
      )
      return value + tf.cast(noise, value.dtype)

    flat = tf.nest.flatten(sample_state)
    result = tf.nest.pack_sequence_as(
      sample_state, [add_noise(i, v) for i, v in enumerate(flat)]
    )
    event = dp_accounting.GaussianDpEvent(
      global_state.stddev / global_state.l2_norm_clip
    )
    return result, global_state, event


class _SeededQuantileEstimatorQuery(tfp.QuantileEstimatorQuery):
  """The clip's quantile estimate, its clipped-count noise seeded."""

  def __init__(self, key: _RoundKey, *args, **kwargs):
    self._key = key  # Read by the constructor, through the hook below.
    super().__init__(*args, **kwargs)

  def _construct_below_estimate_query(
    self, below_estimate_stddev, expected_num_records
  ):
    # tensorflow_privacy's: counts shifted to ±0.5 (sensitivity 0.5),
    # normalized by the expected number of records.
    return tfp.NormalizedQuery(
      SeededGaussianSumQuery(
        0.5, below_estimate_stddev, self._key, _COUNT_STREAM
      ),
      denominator=expected_num_records,
    )


class _SeededQuantileAdaptiveClipSumQuery(tfp.QuantileAdaptiveClipSumQuery):
  """tensorflow_privacy's adaptive-clip sum query with both of its Gaussian
  releases (the updates' sum and the clipped count) seeded."""

  def __init__(
    self,
    key: _RoundKey,
    initial_l2_norm_clip,
    noise_multiplier,
    target_unclipped_quantile,
    learning_rate,
    clipped_count_stddev,
    expected_num_records,
  ):
    super().__init__(
      initial_l2_norm_clip,
      noise_multiplier,
      target_unclipped_quantile,
      learning_rate,
      clipped_count_stddev,
      expected_num_records,
      geometric_update=True,
    )
    # The two queries the parent's methods use, as it builds them, seeded.
    self._sum_query = SeededGaussianSumQuery(
      initial_l2_norm_clip,
      noise_multiplier * initial_l2_norm_clip,
      key,
      _VALUE_STREAM,
    )
    self._quantile_estimator_query = _SeededQuantileEstimatorQuery(
      key,
      initial_l2_norm_clip,
      target_unclipped_quantile,
      learning_rate,
      clipped_count_stddev,
      expected_num_records,
      geometric_update=True,
    )


class SeededQuery(tfp.SumAggregationDPQuery):
  """A DP query whose noise is a function of (seed, round).

  The global state is (the inner query's state, the seed pair, the round
  counter). Releasing a result draws the inner query's noise from the key
  fold_in(seed, round) and advances the counter. `build_inner(key)` builds
  the inner query; its Gaussian draws must be `SeededGaussianSumQuery`s
  built with that key, e.g. fixed clipping with a secure sum:

    query = SeededQuery(lambda key: tfp.NormalizedQuery(
        SeededGaussianSumQuery(clip, z * clip, key), denominator=k), seed=0)
    tff.aggregators.DifferentiallyPrivateFactory(
        query, record_aggregation_factory=tff.aggregators.SecureSumFactory(
            upper_bound_threshold=clip, lower_bound_threshold=-clip))
  """

  _GlobalState = collections.namedtuple(
    '_GlobalState', ['inner', 'seed', 'round']
  )

  def __init__(self, build_inner, seed: int):
    """`build_inner(key)` → the inner query, its draws keyed by `key`."""
    self._seed = _seed(seed)
    self._key = _RoundKey()
    self._inner = build_inner(self._key)
    if not isinstance(self._inner, tfp.SumAggregationDPQuery):
      raise TypeError(
        'the inner query must be a tensorflow_privacy '
        'SumAggregationDPQuery, got '
        f'{type(self._inner).__name__}'
      )

  def initial_global_state(self):
    return self._GlobalState(
      self._inner.initial_global_state(),
      tf.constant([self._seed, 0], tf.int64),
      tf.constant(0, tf.int64),
    )

  def derive_sample_params(self, global_state):
    return self._inner.derive_sample_params(global_state.inner)

  def initial_sample_state(self, template=None):
    return self._inner.initial_sample_state(template)

  def preprocess_record(self, params, record):
    return self._inner.preprocess_record(params, record)

  def get_noised_result(self, sample_state, global_state):
    self._key.current = tf.random.experimental.stateless_fold_in(
      global_state.seed, global_state.round
    )
    try:
      result, inner_state, event = self._inner.get_noised_result(
        sample_state, global_state.inner
      )
    finally:
      self._key.current = None
    return (
      result,
      self._GlobalState(inner_state, global_state.seed, global_state.round + 1),
      event,
    )

  def derive_metrics(self, global_state):
    return self._inner.derive_metrics(global_state.inner)


def gaussian_fixed(
  noise_multiplier: float,
  clients_per_round: float,
  clip: float,
  *,
  seed: int | None,
  noise_cohort_size: int | None = None,
  zeroing: bool = False,
  record_aggregation_factory: tff.aggregators.UnweightedAggregationFactory
  | None = None,
) -> tff.aggregators.UnweightedAggregationFactory:
  """`DifferentiallyPrivateFactory.gaussian_fixed(noise_multiplier,
  clients_per_round, clip)` with noise a function of (seed, round).

  Args:
    noise_multiplier: z ≥ 0: noise stddev z·C on the clipped sum.
    clients_per_round: K > 0, the expected cohort: the sum's divisor.
    clip: C > 0, the L2 norm each client's update is clipped to.
    seed: a whole number in [0, 2⁶³): the noise's seed; None: TF's
      unseeded draws, as TFF's own factories (a deployment's: module
      docstring).
    noise_cohort_size: M ≥ K: noise as for M clients (stddev z·C·K/M on the
      sum of K); None: M = K.
    zeroing: first zero outlying updates, as `tff.learning.dp_aggregator`
      does (not covered by the DP accounting: module docstring).
    record_aggregation_factory: sums the clipped updates (default TFF's
      `SumFactory`; e.g. `tff.aggregators.SecureSumFactory`).
  """
  z = budget.nonnegative(noise_multiplier, 'noise_multiplier')
  clients = budget.positive(clients_per_round, 'clients_per_round')
  clip = budget.positive(clip, 'clip')
  scale = _noise_scale(clients, noise_cohort_size)
  if seed is None:
    query = tfp.NormalizedQuery(
      tfp.GaussianSumQuery(clip, z * clip * scale), denominator=clients
    )
  else:
    query = SeededQuery(
      lambda key: tfp.NormalizedQuery(
        SeededGaussianSumQuery(clip, z * clip * scale, key, _VALUE_STREAM),
        denominator=clients,
      ),
      seed,
    )
  return _factory(query, zeroing, record_aggregation_factory)


def gaussian_adaptive(
  noise_multiplier: float,
  clients_per_round: float,
  *,
  seed: int | None,
  initial_l2_norm_clip: float = INITIAL_L2_NORM_CLIP,
  target_unclipped_quantile: float = TARGET_UNCLIPPED_QUANTILE,
  learning_rate: float = CLIP_LEARNING_RATE,
  clipped_count_stddev: float | None = None,
  noise_cohort_size: int | None = None,
  zeroing: bool = False,
  record_aggregation_factory: tff.aggregators.UnweightedAggregationFactory
  | None = None,
) -> tff.aggregators.UnweightedAggregationFactory:
  """`DifferentiallyPrivateFactory.gaussian_adaptive(...)` (TFF's defaults)
  with noise a function of (seed, round).

  Args:
    noise_multiplier: z ≥ 0, the total, as TFF takes it: split between the
      updates and the clipped count (module docstring).
    clients_per_round: K > 0, the expected cohort.
    seed: a whole number in [0, 2⁶³): the noise's seed; None: TF's
      unseeded draws, as TFF's own factories (a deployment's: module
      docstring).
    initial_l2_norm_clip: the clip before the first round.
    target_unclipped_quantile: the quantile of update norms the clip
      follows.
    learning_rate: the clip's geometric learning rate.
    clipped_count_stddev: σ_b, the count's noise for the (noise) cohort
      (default 0.05·M, M the noise cohort or K); z must be < 2σ_b.
    noise_cohort_size: M ≥ K: noise as for M clients.
    zeroing: as in `gaussian_fixed`.
    record_aggregation_factory: as in `gaussian_fixed`.
  """
  z = budget.nonnegative(noise_multiplier, 'noise_multiplier')
  clients = budget.positive(clients_per_round, 'clients_per_round')
  initial_clip = budget.positive(initial_l2_norm_clip, 'initial_l2_norm_clip')
  quantile = budget.real(target_unclipped_quantile, 'target_unclipped_quantile')
  if not 0 <= quantile <= 1:
    raise ValueError(
      f'target_unclipped_quantile must be in [0, 1], got {quantile}'
    )
  learning_rate = budget.nonnegative(learning_rate, 'learning_rate')
  scale = _noise_scale(clients, noise_cohort_size)
  cohort = clients / scale
  value_z, count_stddev = budget.adaptive_noise_multipliers(
    z, cohort, clipped_count_stddev
  )
  if seed is None:
    query = tfp.NormalizedQuery(
      tfp.QuantileAdaptiveClipSumQuery(
        initial_clip,
        value_z * scale,
        quantile,
        learning_rate,
        count_stddev * scale,
        clients,
        geometric_update=True,
      ),
      denominator=clients,
    )
  else:
    query = SeededQuery(
      lambda key: tfp.NormalizedQuery(
        _SeededQuantileAdaptiveClipSumQuery(
          key,
          initial_clip,
          value_z * scale,
          quantile,
          learning_rate,
          count_stddev * scale,
          clients,
        ),
        denominator=clients,
      ),
      seed,
    )
  return _factory(query, zeroing, record_aggregation_factory)


def dp_events(state) -> list[dp_accounting.DpEvent]:
  """The DP events of every `tff.aggregators.DifferentiallyPrivateFactory`
  aggregator in a process state (e.g. a learning process's, however its
  model aggregator is wrapped): each round's release as the aggregator
  itself reports it (TFF's `extract_dp_event_from_state`, which 0.87 does
  not export; an initial state holds the event its rounds will report).
  The noise multipliers are Python floats: dp_accounting's RDP accountant
  reads a composed event of float32 multipliers as its first Gaussian
  alone (`privacy.accounting`)."""
  found = []

  def walk(value):
    if _is_dp_state(value):
      found.append(
        _python_floats(dp_accounting.DpEvent.from_named_tuple(value.dp_event))
      )
    elif isinstance(value, collections.abc.Mapping):
      for item in value.values():
        walk(item)
    elif isinstance(value, (tuple, list)):
      for item in value:
        walk(item)

  walk(state)
  return found


# The fields of TFF's `DPAggregatorState` (not exported by TFF 0.87).
_DP_STATE_FIELDS = ('query_state', 'agg_state', 'dp_event', 'is_init_state')


def _is_dp_state(value) -> bool:
  return (
    isinstance(value, tuple)
    and getattr(value, '_fields', None) == _DP_STATE_FIELDS
  )


def _python_floats(event):
  """`event` with its Gaussian noise multipliers as Python floats."""
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return dp_accounting.GaussianDpEvent(float(event.noise_multiplier))
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return dp_accounting.ComposedDpEvent(
      [_python_floats(e) for e in event.events]
    )
  return event


def _factory(query, zeroing, record_aggregation_factory):
  factory = tff.aggregators.DifferentiallyPrivateFactory(
    query, record_aggregation_factory=record_aggregation_factory
  )
  if not zeroing:
    return factory
  # `tff.learning.dp_aggregator`'s zeroing: a threshold that adapts quickly
  # to somewhat above the largest norms seen.
  return tff.aggregators.zeroing_factory(
    zeroing_norm=tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
      initial_estimate=10.0,
      target_quantile=0.98,
      learning_rate=math.log(10.0),
      multiplier=2.0,
      increment=1.0,
    ),
    inner_agg_factory=factory,
  )


def _noise_scale(clients, noise_cohort_size):
  """K/M: the share of the noise cohort's noise the K clients' sum gets."""
  if noise_cohort_size is None:
    return 1.0
  cohort = budget.positive(noise_cohort_size, 'noise_cohort_size')
  if cohort < clients:
    raise ValueError(
      f'noise_cohort_size {cohort} < clients_per_round '
      f'{clients}: the noise would be below that of the '
      'clients taking part'
    )
  return clients / cohort


def _seed(seed):
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
    raise TypeError(f'seed must be a whole number, got {seed!r}')
  if not 0 <= seed <= _MAX_SEED:
    raise ValueError(f'seed must be in [0, 2**63), got {seed}')
  return int(seed)
