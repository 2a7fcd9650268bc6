"""The builders take TFF's production arguments: DP, secure
aggregation and compression with every algorithm, TFF's optimizers, and
nothing a client computes leaves it outside the configured aggregators."""

import contextlib
import functools
import inspect

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedisgd
from tff_algos.algorithms import fedprox
from tff_algos.algorithms import fedsgd

EPOCHS, CLIENTS = 2, 3
sgdm = tff.learning.optimizers.build_sgdm


def _model_fn():
  return helpers.task_and_arrays()[0].model_fn


def _client_data():
  return helpers.client_datasets(CLIENTS)


# Each algorithm's production build; `kwargs` are TFF's arguments.
BUILDERS = {
  'fedavg': lambda m, **kwargs: fedavg.build_fed_avg(
    m, 0.5, client_input=learning.DatasetInput(EPOCHS), **kwargs
  ),
  'fedprox': lambda m, **kwargs: fedprox.build_fed_prox(
    m, 0.5, mu=0.5, client_input=learning.DatasetInput(EPOCHS), **kwargs
  ),
  'fedisgd': lambda m, **kwargs: fedisgd.build_fed_isgd(
    m,
    0.5,
    lam=0.5,
    server_learning_rate=0.75,
    client_input=learning.DatasetInput(EPOCHS),
    **kwargs,
  ),
  'fedsgd': lambda m, **kwargs: fedsgd.build_fed_sgd(
    m, 0.5, client_input=learning.DatasetInput(1), **kwargs
  ),
}
DP_CLIP = 0.1  # tff.learning.dp_aggregator's initial (adaptive) L2 clip.
AGGREGATORS = {
  'dp': lambda: dict(
    model_aggregator=tff.learning.dp_aggregator(
      noise_multiplier=0.1, clients_per_round=CLIENTS
    )
  ),
  'secure': lambda: dict(
    model_aggregator=tff.learning.secure_aggregator(weighted=True),
    metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize,
  ),
  'compression': lambda: dict(
    model_aggregator=tff.learning.compression_aggregator(weighted=True)
  ),
}


@functools.cache
def _process(algorithm, aggregator):
  """The production build with `aggregator`, measuring the update spread
  (the statistic that once sent raw updates around the aggregator)."""
  return BUILDERS[algorithm](
    _model_fn(), report_update_spread=True, **AGGREGATORS[aggregator]()
  )


@functools.cache
def _map_reduce_form(algorithm, aggregator):
  return tff.backends.mapreduce.get_map_reduce_form_for_computation(
    _process(algorithm, aggregator).next
  )


def _two_rounds(process, context=contextlib.nullcontext()):  # noqa: B008 (stateless)
  state = process.initialize()
  initial = process.get_model_weights(state)
  with context:
    for _ in range(2):
      output = process.next(state, _client_data())
      state = output.state
  return helpers.max_abs_diff(initial, process.get_model_weights(state)), (
    output.metrics
  )


@pytest.mark.slow
@pytest.mark.parametrize('aggregator', sorted(AGGREGATORS))
@pytest.mark.parametrize('algorithm', sorted(BUILDERS))
def test_every_algorithm_runs_and_compiles_with_tffs_aggregators(
  algorithm, aggregator
):
  process = _process(algorithm, aggregator)
  # TFF's native runtime cannot run secure sums ("Cannot embed a federated
  # value"; TFF's own builders neither): TFF's test compiler's context can.
  moved, metrics = _two_rounds(
    process,
    runtime.test_context()
    if aggregator == 'secure'
    else contextlib.nullcontext(),
  )
  assert 0 < moved < np.inf
  assert np.isfinite(metrics['client_work']['update_spread'])
  assert isinstance(
    _map_reduce_form(algorithm, aggregator),
    tff.backends.mapreduce.MapReduceForm,
  )
  to_distribute_aggregate = (
    tff.backends.mapreduce.get_distribute_aggregate_form_for_computation
  )
  if aggregator == 'secure' and algorithm != 'fedprox':
    # TFF takes ~22 s to put a secure sum into a DistributeAggregateForm;
    # the algorithms share one composition (algorithms/core.py), so FedProx
    # stands for them here. Each one's MapReduceForm is built above.
    return
  if aggregator != 'compression':
    assert isinstance(
      to_distribute_aggregate(process.next),
      tff.backends.mapreduce.DistributeAggregateForm,
    )
    return
  # TFF 0.87 cannot put compression into a DistributeAggregateForm, its
  # own FedAvg neither (docs/guide/porting.md): the same error for both.
  with pytest.raises(ValueError, match=_NO_DISTRIBUTE_AGGREGATE):
    to_distribute_aggregate(process.next)
  _builtin_refuses_distribute_aggregate_with_compression()


_NO_DISTRIBUTE_AGGREGATE = 'not contain `tff.FederatedType`s'


@functools.cache
def _builtin_refuses_distribute_aggregate_with_compression():
  """TFF's FedAvg with compression, put into a DistributeAggregateForm,
  raises the error our builds raise (once: it takes no algorithm of ours)."""
  builtin = tff.learning.algorithms.build_weighted_fed_avg(
    _model_fn(),
    sgdm(0.5),
    model_aggregator=AGGREGATORS['compression']()['model_aggregator'],
  )
  with pytest.raises(ValueError, match=_NO_DISTRIBUTE_AGGREGATE):
    tff.backends.mapreduce.get_distribute_aggregate_form_for_computation(
      builtin.next
    )


def _model_shapes(process):
  """The shapes of the model's variables (scalars aside)."""
  weights = process.get_model_weights(process.initialize())
  return {np.shape(w) for w in weights.trainable} - {()}


def _client_outputs(algorithm, aggregator):
  """What one client sends the server in the MapReduceForm: the values of
  `work` outside the secure sums, and in them, run on one client."""
  map_reduce = _map_reduce_form(algorithm, aggregator)
  broadcast = map_reduce.prepare(_process(algorithm, aggregator).initialize())
  return map_reduce.work(_client_data()[0], broadcast)


@pytest.mark.slow
@pytest.mark.parametrize('algorithm', sorted(BUILDERS))
def test_with_secure_aggregation_no_model_shaped_value_leaves_in_the_clear(
  algorithm,
):
  process = _process(algorithm, 'secure')
  shapes = _model_shapes(process)
  clear, *secure = _client_outputs(algorithm, 'secure')
  in_clear = [np.shape(v) for v in tf.nest.flatten(clear)]
  in_secure_sums = [np.shape(v) for v in tf.nest.flatten(secure)]
  assert shapes <= set(in_secure_sums)  # The update, securely summed...
  assert not shapes & set(in_clear), in_clear  # ...and nothing else.


@pytest.mark.slow
@pytest.mark.parametrize('algorithm', sorted(BUILDERS))
def test_with_dp_only_the_clipped_update_leaves_the_client(algorithm):
  process = _process(algorithm, 'dp')
  shapes = _model_shapes(process)
  clear, *_ = _client_outputs(algorithm, 'dp')
  leaving = [v for v in tf.nest.flatten(clear) if np.shape(v) in shapes]
  assert len(leaving) == len(shapes)  # One update...
  norm = np.sqrt(sum(np.sum(np.square(v)) for v in leaving))
  assert 0 < norm <= DP_CLIP * (1 + 1e-5)  # ...clipped.
  # The raw update is far longer than the clip (so clipping was needed).
  assert _raw_update_norm() > 10 * DP_CLIP


@functools.cache
def _raw_update_norm():
  """‖u‖ of one client's unclipped update from the seeded initial model
  (the same client work and data for every algorithm's DP case)."""
  work = learning.build_proximal_sgd_client_work(
    _model_fn(), sgdm(0.5), client_input=learning.DatasetInput(EPOCHS)
  )
  weights = learning.initial_model_weights(_model_fn(), 0)
  raw = work.next(work.initialize(), [weights], _client_data()[:1])
  return np.sqrt(sum(np.sum(np.square(u)) for u in raw.result[0].update))


# ------------------------------------------------------------ optimizers
def _with_optimizers(algorithm, server, client):
  """`algorithm`'s production build with TFF optimizers (FedSGD has no
  client optimizer)."""
  if algorithm == 'fedsgd':
    return fedsgd.build_fed_sgd(
      _model_fn(),
      server_optimizer_fn=server,
      client_input=learning.DatasetInput(1),
    )
  build, own = {
    'fedavg': (fedavg.build_fed_avg, {}),
    'fedprox': (fedprox.build_fed_prox, dict(mu=0.5)),
    'fedisgd': (fedisgd.build_fed_isgd, dict(lam=0.5)),
  }[algorithm]
  return build(
    _model_fn(),
    client_optimizer_fn=client,
    server_optimizer_fn=server,
    client_input=learning.DatasetInput(EPOCHS),
    **own,
  )


@pytest.mark.parametrize('algorithm', sorted(BUILDERS))
def test_client_adam_and_server_fedadam_fedyogi_run(algorithm):
  """Reddi et al. 2021's FedAdam and FedYogi server steps, client Adam."""
  for server in (
    tff.learning.optimizers.build_adam(0.01),
    tff.learning.optimizers.build_yogi(0.01),
  ):
    process = _with_optimizers(
      algorithm, server, tff.learning.optimizers.build_adam(0.01)
    )
    moved, _ = _two_rounds(process)
    assert 0 < moved < np.inf
    hparams = process.get_hparams(process.initialize())
    assert {'beta_1', 'beta_2', 'epsilon'} <= set(hparams['finalizer'])
    if algorithm != 'fedsgd':
      assert {'beta_1', 'beta_2', 'epsilon'} <= set(hparams['client_work'])


# -------------------------------------------------- TFF's builders' names
@pytest.mark.fast
@pytest.mark.parametrize(
  'ours, theirs',
  [
    (fedavg.build_fed_avg, tff.learning.algorithms.build_weighted_fed_avg),
    (fedprox.build_fed_prox, tff.learning.algorithms.build_weighted_fed_prox),
    (fedsgd.build_fed_sgd, tff.learning.algorithms.build_fed_sgd),
  ],
)
def test_every_argument_of_tffs_builder_is_accepted(ours, theirs):
  accepted = set(inspect.signature(ours).parameters)
  tffs = set(inspect.signature(theirs).parameters)
  assert tffs <= accepted, tffs - accepted


def test_switching_from_tffs_fed_avg_is_a_change_of_import():
  arguments = dict(
    client_optimizer_fn=sgdm(0.1),
    server_optimizer_fn=sgdm(0.5),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    model_aggregator=tff.aggregators.MeanFactory(),
    metrics_aggregator=tff.learning.metrics.sum_then_finalize,
    loop_implementation=tff.learning.LoopImplementation.DATASET_REDUCE,
  )
  theirs = tff.learning.algorithms.build_weighted_fed_avg(
    _model_fn(), **arguments
  )
  ours = fedavg.build_fed_avg(
    _model_fn(), **arguments, client_input=learning.DatasetInput(1)
  )
  data = [_client_data()] * 2
  assert (
    helpers.max_abs_diff(
      helpers.train(theirs, _model_fn(), data),
      helpers.train(ours, _model_fn(), data),
    )
    <= 1e-5
  )


def test_tffs_proximal_term_has_the_opposite_sign():
  """TFF 0.87's build_weighted_fed_prox adds strength·(w_t − w) to the
  gradient; FedProx's ∇ μ/2‖w − w_t‖² is μ(w − w_t): TFF's strength 1 is
  our client work at μ = −1, and our proximal_strength=1 is the paper's."""
  data = [_client_data()] * 2
  theirs = helpers.train(
    tff.learning.algorithms.build_weighted_fed_prox(
      _model_fn(), proximal_strength=1.0, client_optimizer_fn=sgdm(0.1)
    ),
    _model_fn(),
    data,
  )
  ours = helpers.train(
    fedprox.build_fed_prox(
      _model_fn(),
      proximal_strength=1.0,
      client_optimizer_fn=sgdm(0.1),
      client_input=learning.DatasetInput(1),
    ),
    _model_fn(),
    data,
  )
  reversed_sign = helpers.train(
    learning.build_process(
      _model_fn(),
      functools.partial(
        learning.build_proximal_sgd_client_work, optimizer=sgdm(0.1), mu=-1.0
      ),
      sgdm(1.0),
      client_input=learning.DatasetInput(1),
    ),
    _model_fn(),
    data,
  )
  assert helpers.max_abs_diff(theirs, reversed_sign) <= 1e-6
  assert helpers.max_abs_diff(theirs, ours) > 1e-4


# ---------------------------------------------------- argument checking
@pytest.mark.parametrize(
  'build, message',
  [
    (lambda m: fedprox.build_fed_prox(m, 0.1, mu=-1.0), 'mu must be'),
    (lambda m: fedprox.build_fed_prox(m, 0.1, mu=float('nan')), 'mu must be'),
    (
      lambda m: fedprox.build_fed_prox(m, float('inf'), mu=1.0),
      'client_learning_rate must be a positive finite number',
    ),
    (
      lambda m: fedprox.build_fed_prox(m, 0.1, mu=1.0, proximal_strength=1.0),
      'not both',
    ),
    (lambda m: fedprox.build_fed_prox(m, 0.1), 'give mu'),
    (
      lambda m: fedavg.build_fed_avg(m, 0.1, client_optimizer_fn=sgdm(0.1)),
      'not both',
    ),
    (lambda m: fedavg.build_fed_avg(m), 'give client_learning_rate'),
    (
      lambda m: fedavg.build_fed_avg(m, 0.1, server_learning_rate=0.0),
      'server_learning_rate must be',
    ),
    (lambda m: fedsgd.build_fed_sgd(m), 'give learning_rate'),
    (
      lambda m: fedisgd.build_fed_isgd(m, 0.1, lam=1.0),
      'give server_learning_rate',
    ),
    (
      lambda m: fedisgd.build_fed_isgd(
        m, 0.1, lam=1.0, server_learning_rate=1.0, server_lr_decay=2.0
      ),
      'server_lr_decay must be in',
    ),
    (
      lambda m: fedisgd.build_fed_isgd(
        m, 0.1, lam=1.0, server_learning_rate=1.0, server_optimizer_fn=sgdm(1.0)
      ),
      'not both',
    ),
    (
      lambda m: fedavg.build_fed_avg(
        m,
        0.1,
        client_weighting='num_examples',
        model_aggregator=tff.learning.dp_aggregator(0.1, 3),
      ),
      'unweighted model_aggregator',
    ),
  ],
)
def test_bad_arguments_are_a_clear_value_error(build, message):
  with pytest.raises(ValueError, match=message):
    build(_model_fn())


@pytest.mark.fast
@pytest.mark.parametrize(
  'build, message',
  [
    (
      lambda m: fedavg.build_fed_avg(m, client_optimizer_fn=0.1),
      'client_optimizer_fn must be a tff.learning.optimizers.Optimizer',
    ),
    (
      lambda m: fedavg.build_fed_avg(m, 0.1, model_aggregator=sgdm(1.0)),
      'model_aggregator must be',
    ),
    (
      lambda m: fedavg.build_fed_avg(m, 0.1, model_distributor=sgdm(1.0)),
      'model_distributor must be',
    ),
  ],
)
def test_arguments_of_the_wrong_kind_are_a_type_error(build, message):
  with pytest.raises(TypeError, match=message):
    build(_model_fn())


def test_an_unweighted_aggregator_makes_the_weights_uniform():
  """As TFF's build_unweighted_fed_avg: the clients' mean is unweighted."""
  data = [_client_data()] * 2
  unweighted = helpers.train(
    fedavg.build_fed_avg(
      _model_fn(),
      0.1,
      model_aggregator=tff.aggregators.UnweightedMeanFactory(),
      client_input=learning.DatasetInput(1),
    ),
    _model_fn(),
    data,
  )
  uniform = helpers.train(
    fedavg.build_fed_avg(
      _model_fn(),
      0.1,
      client_weighting='uniform',
      client_input=learning.DatasetInput(1),
    ),
    _model_fn(),
    data,
  )
  weighted = helpers.train(
    fedavg.build_fed_avg(
      _model_fn(), 0.1, client_input=learning.DatasetInput(1)
    ),
    _model_fn(),
    data,
  )
  assert helpers.max_abs_diff(unweighted, uniform) <= 1e-6
  assert helpers.max_abs_diff(unweighted, weighted) > 1e-4
