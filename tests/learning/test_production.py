"""Production builds (tf.data client datasets) ≡ simulation builds, and both
compile to TFF's production forms."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedisgd
from tff_algos.algorithms import fedprox
from tff_algos.algorithms import fedsgd
from tff_algos.learning import client_work
from tff_algos.simulation import client_inputs
from tff_algos.simulation.sampling import ClientSampler

EPOCHS, BATCH, ROUNDS = 2, 10, 3
# (name, builder(model_fn, client_input)) of every algorithm, μ = 0 and > 0.
BUILDS = {
  'fedavg': lambda m, i: fedavg.build_fed_avg(m, 0.05, client_input=i),
  'fedsgd': lambda m, i: fedsgd.build_fed_sgd(m, 0.3, client_input=i),
  'fedprox_mu0': lambda m, i: fedprox.build_fed_prox(
    m, 0.05, mu=0.0, client_input=i
  ),
  'fedprox_mu0.5': lambda m, i: fedprox.build_fed_prox(
    m, 0.05, mu=0.5, client_input=i
  ),
  'fedisgd_lam0': lambda m, i: fedisgd.build_fed_isgd(
    m, 0.05, lam=0.0, server_learning_rate=0.75, client_input=i
  ),
  'fedisgd_lam0.5': lambda m, i: fedisgd.build_fed_isgd(
    m,
    0.05,
    lam=0.5,
    server_learning_rate=0.75,
    server_lr_decay=0.5,
    server_lr_decay_every=2,
    client_input=i,
  ),
}


@functools.cache
def _process(name, production):
  task, _ = helpers.task_and_arrays()
  epochs = 1 if name == 'fedsgd' else EPOCHS
  return BUILDS[name](
    task.model_fn,
    learning.DatasetInput(epochs) if production else learning.ScheduledInput(),
  )


def _same_order_every_epoch(round_input, epochs):
  """A scheduled input whose every epoch repeats the first one's order (a
  production client repeats its dataset), and that one epoch as the
  production client's dataset."""
  (element,) = round_input
  n = len(element['data']['y'])
  one_epoch = collections.OrderedDict(
    data=element['data'],
    example_order=element['example_order'][:n],
    batch_ends=element['batch_ends'][element['batch_ends'] <= n],
  )
  scheduled = collections.OrderedDict(
    data=element['data'],
    example_order=np.tile(one_epoch['example_order'], epochs),
    batch_ends=np.concatenate(
      [one_epoch['batch_ends'] + e * n for e in range(epochs)]
    ),
  )
  return [scheduled], client_inputs.as_dataset([one_epoch])


@pytest.mark.parametrize('name', sorted(BUILDS))
def test_production_build_equals_simulation_build(name):
  """3 rounds on the same minibatch sequences: the same model."""
  task, arrays = helpers.task_and_arrays()
  epochs = 1 if name == 'fedsgd' else EPOCHS
  sampler = ClientSampler(len(arrays), 4, epochs, seed=2)
  scheduled, datasets = [], []
  for round_num in range(1, ROUNDS + 1):
    inputs = client_inputs.round_inputs(
      sampler,
      sampler.round_plan(round_num),
      arrays,
      round_num,
      -1 if name == 'fedsgd' else BATCH,
    )
    pairs = [_same_order_every_epoch(i, epochs) for i in inputs]
    scheduled.append([p[0] for p in pairs])
    datasets.append([p[1] for p in pairs])
  simulation = helpers.train(_process(name, False), task.model_fn, scheduled)
  production = helpers.train(_process(name, True), task.model_fn, datasets)
  initial = learning.initial_model_weights(task.model_fn, 0)
  if name == 'fedisgd_lam0':  # Its server step η_g·λ is 0: w stays w_0.
    assert helpers.max_abs_diff(simulation, initial) == 0
  else:
    assert helpers.max_abs_diff(simulation, initial) > 1e-3  # It trained...
  assert helpers.max_abs_diff(simulation, production) <= 1e-5  # ...alike.


@pytest.mark.slow
@pytest.mark.parametrize(
  'production', [False, True], ids=['simulation', 'production']
)
@pytest.mark.parametrize(
  'name', ['fedavg', 'fedsgd', 'fedprox_mu0.5', 'fedisgd_lam0.5']
)
def test_both_builds_compile_to_the_production_forms(name, production):
  process = _process(name, production)
  mapreduce = tff.backends.mapreduce
  map_reduce = mapreduce.get_map_reduce_form_for_computation(process.next)
  distribute = mapreduce.get_distribute_aggregate_form_for_computation(
    process.next
  )
  assert isinstance(map_reduce, mapreduce.MapReduceForm)
  assert isinstance(distribute, mapreduce.DistributeAggregateForm)
  data = process.next.type_signature.parameter[1].member
  assert map_reduce.work.type_signature.parameter[0].is_equivalent_to(data)


def _two_pass_spread(updates):
  """(1/K)Σ_k‖u_k − ū‖², ū = (1/K)Σ_k u_k, in two passes (the reference)."""
  mean = [
    np.mean([u[i] for u in updates], axis=0) for i in range(len(updates[0]))
  ]
  return np.mean(
    [
      sum(np.sum((u[i] - mean[i]) ** 2) for i in range(len(mean)))
      for u in updates
    ]
  )


@pytest.mark.parametrize('weighting', ['uniform', 'num_examples'])
def test_update_spread_from_the_aggregators_equals_the_two_pass_value(
  weighting,
):
  """The spread comes from Σ‖u_k‖² (metrics aggregator) and ū (the model
  aggregator: its own mean when uniform, else a second, unit-weight
  aggregation), and equals the two-pass spread of the clients' updates."""
  task, arrays = helpers.task_and_arrays()
  optimizer = tff.learning.optimizers.build_sgdm(0.05)
  work = learning.build_proximal_sgd_client_work(
    task.model_fn, optimizer, mu=0.5, client_weighting=weighting
  )
  process = fedprox.build_fed_prox(
    task.model_fn,
    0.05,
    mu=0.5,
    client_weighting=weighting,
    report_update_spread=True,
  )
  sampler = ClientSampler(len(arrays), 6, 3, seed=4)
  inputs = client_inputs.round_inputs(
    sampler, sampler.round_plan(1), arrays, 1, BATCH
  )
  weights = learning.initial_model_weights(task.model_fn, 0)
  updates = [
    [np.asarray(u, np.float64) for u in r.update]
    for r in work.next(
      work.initialize(), [weights] * len(inputs), inputs
    ).result
  ]
  reference = _two_pass_spread(updates)
  state = process.set_model_weights(process.initialize(), weights)
  work_metrics = process.next(state, inputs).metrics['client_work']
  assert reference > 0 and work_metrics['participants'] == 6
  assert work_metrics['update_spread'] == pytest.approx(reference, rel=1e-5)


@pytest.mark.fast
def test_a_production_client_that_stops_early_weighs_its_local_examples():
  """A device whose data source stops at a deadline in its second pass
  (here: after 15 batches in all) still weighs n_k, its number of local
  examples counted once in its first pass, as a simulated straggler does;
  not the examples it processed divided by E (which under-reports it)."""
  _, arrays = helpers.task_and_arrays()
  data = arrays[0]
  n, epochs, budget = len(data['y']), 3, 15
  assert -(-n // BATCH) < budget < epochs * -(-n // BATCH)
  fetched = tf.Variable(0)
  device = (
    tf.data.Dataset.from_tensor_slices(data)
    .batch(BATCH)
    .take_while(lambda _: fetched.assign_add(1) <= budget)
  )
  for_each_batch = client_work.dataset_batches(device, epochs)
  steps, n_k = tf.function(
    lambda: for_each_batch(lambda batch, steps: steps + 1, tf.constant(0))
  )()
  assert (steps, n_k) == (budget, n)


@pytest.mark.fast
def test_a_production_client_takes_a_new_order_each_pass():
  """A pipeline built with `shuffle(..., reshuffle_each_iteration=True)`
  (docs/guide/porting.md) gives each of the client's passes an order of its own,
  and each pass sees every example once."""
  n, epochs = 12, 3
  data = (
    tf.data.Dataset.range(n)
    .shuffle(n, seed=5, reshuffle_each_iteration=True)
    .batch(5)
  )
  for_each_batch = client_work.dataset_batches(data, epochs)

  def record(batch, carry):
    position, order = carry
    at = position + tf.range(tf.size(batch, out_type=tf.int64))
    return position + tf.size(batch, out_type=tf.int64), (
      tf.tensor_scatter_nd_update(order, at[:, None], batch)
    )

  (_, order), n_k = tf.function(
    lambda: for_each_batch(
      record, (tf.constant(0, tf.int64), tf.zeros([epochs * n], tf.int64))
    )
  )()
  passes = order.numpy().reshape(epochs, n)
  assert n_k == n
  assert all(sorted(p) == list(range(n)) for p in passes)
  assert len({tuple(p) for p in passes}) == epochs


@pytest.mark.fast
@pytest.mark.parametrize('client_input', ['dataset', 'computed'])
def test_model_weights_are_read_from_the_state_only_where_the_process_does(
  client_input,
):
  """`learning.model_weights` reads a composed process's weights from its
  state (what its get_model_weights computation returns; TFF's composition
  and ours for clients' results computed outside), and runs the
  computation of a process whose weights are something else."""
  if client_input == 'dataset':
    process = _process('fedavg', production=True)
  else:
    task, _ = helpers.task_and_arrays()
    process = fedavg.build_fed_avg(
      task.model_fn, 0.05, client_input=learning.ComputedInput()
    )
    assert isinstance(process, learning.ComputedProcess)
  state = process.initialize()
  read = learning.model_weights(process, state)
  assert read is state.global_model_weights
  computed = process.get_model_weights(state)
  tf.nest.assert_same_structure(read, computed)
  for a, b in zip(tf.nest.flatten(read), tf.nest.flatten(computed)):
    assert a.dtype == b.dtype and np.array_equal(a, b)

  @tff.tensorflow.computation(
    process.get_model_weights.type_signature.parameter
  )
  def doubled(state):
    return tf.nest.map_structure(lambda w: 2.0 * w, state.global_model_weights)

  other = tff.learning.templates.LearningProcess(
    process.initialize,
    process.next,
    doubled,
    process.set_model_weights,
  )
  for w, twice in zip(
    state.global_model_weights.trainable,
    learning.model_weights(other, state).trainable,
  ):
    np.testing.assert_array_equal(twice, 2.0 * w)
