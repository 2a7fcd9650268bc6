"""Clients trained in this process, compiled (`simulation.compiled`) and in
lockstep lanes (`simulation.lockstep`), against the per-client path: the
same rounds, the same models to float32 rounding, for every algorithm,
aggregator, straggler policy and sampling scheme; and where a run cannot
or should not use them, the per-client path (or lanes) and a reason."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import helpers
from tff_algos import learning
from tff_algos.learning import model_ops
from tff_algos.runtime import tracing
from tff_algos.simulation import compiled
from tff_algos.simulation import lockstep
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

QUICK = helpers.QUICK_RUN
CASES = helpers.EXECUTION_CASES


def _final_weights(settings, model_fn, arrays, process=None):
  loop = trainer.loop_for(settings, model_fn, arrays, process=process)
  state = loop.run(
    loop.initial_state(
      learning.initial_model_weights(model_fn, settings.run.seed)
    ),
    range(settings.run.rounds + 1),
  )
  return loop, loop.process.get_model_weights(state).trainable


def _step_ops(algo, proximal):
  """The op types of `algo`'s lockstep step on 3 lanes."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(Config(algo=algo, **QUICK), num_clients=30)
  process, _ = trainer.build_for_run(settings, task.model_fn)
  step = lockstep.Engine(process, arrays, 10)._step_for(3, proximal)
  return _op_types(step.graph.as_graph_def())


def _assert_in_process_trains_the_per_client_model(
  name, executions=('compiled', 'lockstep')
):
  task, arrays = helpers.task_and_arrays()

  def settings(execution):
    return resolve(
      Config.create(**dict(QUICK, **CASES[name]), client_execution=execution),
      num_clients=30,
    )

  # Compiled and lockstep clients take one process, built once: the build
  # reads no execution, `trainer.lockstep_engine` picks the engine from
  # the settings (checked below). That each execution's build is a
  # LockstepProcess, test_the_readme_example_algorithm_trains_in_this_process
  # checks.
  in_process, _ = trainer.build_for_run(settings(executions[0]), task.model_fn)
  runs = {
    execution: _final_weights(
      settings(execution), task.model_fn, arrays, process=in_process
    )
    for execution in executions
  }
  runs['per_client'] = _final_weights(
    settings('per_client'), task.model_fn, arrays
  )
  assert not isinstance(runs['per_client'][0].process, learning.LockstepProcess)
  for execution in executions:
    loop, weights = runs[execution]
    assert isinstance(loop.process, learning.LockstepProcess)
    assert loop.lockstep.__self__.execution == lockstep.EXECUTIONS[execution]
    for a, b in zip(weights, runs['per_client'][1]):
      scale = max(float(np.max(np.abs(b))), 1e-6)
      assert float(np.max(np.abs(a - b))) / scale < 1e-5, (name, execution)


@pytest.mark.parametrize('name', sorted(CASES))
def test_clients_in_process_train_the_per_client_model(name):
  _assert_in_process_trains_the_per_client_model(name)


def test_lockstep_with_its_products_on_onednn_trains_the_per_client_model(
  monkeypatch,
):
  """The kernel larger products take (oneDNN's, as MNIST's lanes' do):
  here every product, with the limit at 0."""
  monkeypatch.setattr(tracing, 'EIGEN_PRODUCT_MAX', 0)
  ops = _step_ops('fedprox', proximal=True)
  assert 'BatchMatMulV2' in ops and 'BatchMatMulV3' not in ops, ops
  _assert_in_process_trains_the_per_client_model(
    'fedprox_adaptive_mu', executions=('lockstep',)
  )


@pytest.mark.fast
def test_the_readme_example_algorithm_trains_in_this_process():
  from tff_algos import cli

  cli.import_modules(['tests/programs/user_modules/fedavgm_algorithm.py'])
  task, _ = helpers.task_and_arrays()
  for execution in ('auto', 'lockstep'):
    settings = resolve(
      Config(algo='fedavgm', client_execution=execution, **QUICK),
      num_clients=30,
    )
    process, how = trainer.build_for_run(settings, task.model_fn)
    assert isinstance(process, learning.LockstepProcess)
    assert how == ('compiled by XLA' if execution == 'auto' else 'lockstep')


@pytest.mark.parametrize('compile_clients', [True, False])
def test_a_round_sends_the_clients_results_not_their_data(compile_clients):
  """A mean's round gets one input for all its clients: the same size
  whatever their data."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(Config(algo='fedavg', **QUICK), num_clients=30)
  process, _ = trainer.build_for_run(settings, task.model_fn)
  engine = lockstep.Engine(process, arrays, 10, compile_clients=compile_clients)
  state = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(task.model_fn, 0)
  )
  sampler = trainer.sampler(settings, arrays)
  plans = sampler.participants(1, settings.policy)
  from tff_algos.simulation import client_inputs

  schedules = client_inputs.schedules(sampler, plans, arrays, 1, 10)
  (one,) = engine.inputs(state, schedules, 1)
  assert one['participants'] == 5
  assert one['weight'] == sum(len(arrays[p.client]['y']) for p in plans)
  shapes = [np.shape(u) for u in one['update']]
  assert shapes == [(60, 10), (10,)]


def _op_types(graph_def):
  nodes = [*graph_def.node]
  for function in graph_def.library.function:
    nodes.extend(function.node_def)
  return {node.op for node in nodes}


@pytest.mark.fast
def test_the_lanes_products_are_traced_for_eigens_kernel():
  """The step's small batched products, forward and gradient, are
  BatchMatMulV3 (which TensorFlow's oneDNN build leaves to Eigen's
  kernel), a larger one (here 6 lanes where the limit is 5) is
  BatchMatMulV2 (oneDNN's); outside the step's tracing, TensorFlow's
  `tf.matmul` makes BatchMatMulV2 again, and the two products agree to
  float32 rounding."""
  ops = _step_ops('fedavg', proximal=False)
  assert 'BatchMatMulV3' in ops and 'BatchMatMulV2' not in ops, ops

  def product(x, y):
    return tf.function(tf.matmul).get_concrete_function(x, y)

  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(3, 10, 60)).astype(np.float32))
  y = tf.constant(rng.normal(size=(3, 60, 10)).astype(np.float32))
  with tracing.batched_products_on_eigen():
    on_eigen = product(x, y)
  on_onednn = product(x, y)
  assert _op_types(on_eigen.graph.as_graph_def()) >= {'BatchMatMulV3'}
  assert _op_types(on_onednn.graph.as_graph_def()) >= {'BatchMatMulV2'}
  larger = tf.concat([x, x], axis=0)
  with tracing.batched_products_on_eigen(max_multiply_adds=5 * 10 * 60 * 10):
    assert _op_types(product(x, y).graph.as_graph_def()) >= {'BatchMatMulV3'}
    on_onednn_still = product(larger, tf.concat([y, y], axis=0))
  assert 'BatchMatMulV3' not in _op_types(on_onednn_still.graph.as_graph_def())
  a, b = on_eigen(x, y).numpy(), on_onednn(x, y).numpy()
  assert np.max(np.abs(a - b)) <= 1e-6 * np.max(np.abs(b))  # 60 terms.


@pytest.mark.fast
def test_pack_keeps_each_clients_minibatches_in_order_in_one_lane():
  """Each client's minibatches, in order, in whole passes of one lane: it
  starts at a pass's first step and finishes at a pass's end; a client
  without batches takes one pass of no examples."""
  batches = [
    [np.array([1, 2]), np.array([3])],
    [np.array([4])],
    [np.array([5]), np.array([6]), np.array([7]), np.array([8, 9])] * 2,
    [],
  ]
  plan = lockstep.pack(batches, 2, 2)
  steps, lanes, _ = plan.indices.shape
  passes = steps // lockstep.UNROLL
  assert lanes == 2 and plan.start.shape == plan.finish.shape == (passes, 2)
  found = {}
  for lane in range(lanes):
    first = 0
    while first < passes and plan.start[first, lane]:
      last = first + int(np.argmax(plan.finish[first:, lane] >= 0))
      assert not plan.start[first + 1 : last + 1, lane].any()
      found[int(plan.finish[last, lane])] = [
        list(plan.indices[s, lane][plan.valid[s, lane] > 0])
        for s in range(first * lockstep.UNROLL, (last + 1) * lockstep.UNROLL)
        if plan.valid[s, lane].any()
      ]
      first = last + 1
    assert not plan.valid[first * lockstep.UNROLL :, lane].any()
  assert found == {c: [list(b) for b in bs] for c, bs in enumerate(batches)}


def _keras_model_fn(layers):
  spec = collections.OrderedDict(
    x=tf.TensorSpec([None, 60], tf.float32), y=tf.TensorSpec([None], tf.int32)
  )
  return model_ops.KerasModelFn(
    lambda: tf.keras.Sequential([tf.keras.Input([60]), *layers()]),
    lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    spec,
  )


@pytest.mark.parametrize(
  'model, execution, reason',
  [
    (
      lambda t: _keras_model_fn(
        lambda: [tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(10)]
      ),
      'lockstep',
      'draw randomness',
    ),
    (
      lambda t: _keras_model_fn(
        lambda: [
          tf.keras.layers.Reshape((60, 1)),
          tf.keras.layers.Conv1D(4, 3),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(1000),
          tf.keras.layers.Dense(10),
        ]
      ),
      'auto',
      'slower and lanes of its',
    ),
    (
      lambda t: _keras_model_fn(
        lambda: [
          tf.keras.layers.Reshape((6, 10)),
          tf.keras.layers.LSTM(4),
          tf.keras.layers.Dense(10),
        ]
      ),
      'auto',
      'slower and lanes run its recurrent layers',
    ),
    (lambda t: lambda: t.model_fn(), 'lockstep', 'not a learning.'),
  ],
)
def test_a_run_that_cannot_or_should_not_runs_per_client_and_says_why(
  model, execution, reason
):
  task, _ = helpers.task_and_arrays()
  settings = resolve(
    Config(algo='fedavg', client_execution=execution, **QUICK), num_clients=30
  )
  process, how = trainer.build_for_run(settings, model(task))
  assert not isinstance(process, learning.LockstepProcess)
  assert how.startswith('per client (') and reason in how


def test_a_step_xla_cannot_compile_trains_in_lanes_and_says_why():
  """A model of an op XLA has no kernel for (here, in a branch that adds
  zero) asked to run compiled: its clients train in lanes, to the
  per-client path's model, and the header says why."""
  model_fn = dataclasses.replace(
    _keras_model_fn(
      lambda: [
        tf.keras.layers.Lambda(
          lambda x: (
            x
            + 0.0
            * tf.stop_gradient(tf.strings.to_number(tf.strings.as_string(x)))
          )
        ),
        tf.keras.layers.Dense(10),
      ]
    ),
    metrics_fn=lambda: [tf.keras.metrics.SparseCategoricalAccuracy('accuracy')],
  )
  _, arrays = helpers.task_and_arrays()
  runs = {}
  for execution in ('compiled', 'per_client'):
    settings = resolve(
      Config(algo='fedavg', client_execution=execution, **QUICK),
      num_clients=30,
    )
    runs[execution] = _final_weights(settings, model_fn, arrays)
  engine = runs['compiled'][0].lockstep.__self__
  assert (
    engine.execution == "lockstep (XLA has no kernel for its step's AsString)"
  )
  for a, b in zip(runs['compiled'][1], runs['per_client'][1]):
    assert float(np.max(np.abs(a - b))) < 1e-5 * float(np.max(np.abs(b)))


@pytest.mark.fast
def test_a_compiled_rounds_clients_are_laid_out_one_after_another():
  minibatches = [  # (examples in order, batch sizes) by client.
    (np.array([3, 4, 5, 6]), np.array([3, 1])),
    (np.array([], int), np.array([], int)),  # No steps: an update of zero.
    (np.array([1, 2]), np.array([2])),
  ]
  indices, valid, starts = compiled.layout(minibatches, 3)
  assert indices.shape == valid.shape == (compiled.MIN_BUCKET, 3)
  assert indices[:3].tolist() == [[3, 4, 5], [6, 0, 0], [1, 2, 0]]
  assert valid[:4].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]]
  assert starts.tolist() == [0, 2, 2] + [3] * (compiled.MIN_BUCKET - 2)
  assert [compiled.bucket(n) for n in (0, 16, 17, 3000)] == [16, 16, 32, 4096]


def test_remote_workers_and_the_flag_take_the_per_client_path():
  task, _ = helpers.task_and_arrays()
  settings = resolve(Config(algo='fedavg', **QUICK), num_clients=30)
  _, how = trainer.build_for_run(settings, task.model_fn, workers='localhost:1')
  assert 'remote workers' in how
  per_client = resolve(
    Config(algo='fedavg', client_execution='per_client', **QUICK),
    num_clients=30,
  )
  _, how = trainer.build_for_run(per_client, task.model_fn)
  assert how == 'per client (--client_execution=per_client)'


@pytest.mark.fast
def test_a_run_recorded_before_lockstep_clients_reads_as_per_client():
  old = {
    k: v
    for k, v in resolve(Config(**QUICK)).to_json().items()
    if k != 'client_execution'
  }
  assert Config.from_json(old).client_execution == 'per_client'


def _round_inputs(model_fn, **overrides):
  """Round 1's lockstep inputs of a FedProx run on the default task's
  data with the model of `model_fn`: (the inputs, the engine)."""
  _, arrays = helpers.task_and_arrays()
  settings = resolve(
    Config(algo='fedprox', **dict(QUICK, **overrides)), num_clients=30
  )
  process, _ = trainer.build_for_run(settings, model_fn)
  engine = lockstep.Engine(process, arrays, 10)
  state = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(model_fn, 0)
  )
  sampler = trainer.sampler(settings, arrays)
  from tff_algos.simulation import client_inputs

  plans = sampler.participants(1, settings.policy)
  schedules = client_inputs.schedules(sampler, plans, arrays, 1, 10)
  return engine.inputs(state, schedules, 1), engine


def _same_values(a, b):
  return all(
    np.array_equal(x, y) for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b))
  )


def test_a_round_traced_before_from_the_same_step_is_reused_bit_identically(
  tmp_path, monkeypatch
):
  """Runs whose clients train by the same step (μ ≠ 0 is a
  hyper-parameter, an input of the step) share the round's trace, and a
  run served from it writes the metrics.csv of the same run traced
  anew."""
  monkeypatch.setattr(lockstep, '_ROUNDS', collections.OrderedDict())
  helpers.run(tmp_path, 'first', algo='fedprox', mu=0.25)
  traced = list(lockstep._ROUNDS.values())
  assert traced
  reused, _ = helpers.run(tmp_path, 'reused', algo='fedprox', mu=0.5)
  assert list(lockstep._ROUNDS.values()) == traced
  lockstep._ROUNDS.clear()
  anew, _ = helpers.run(tmp_path, 'anew', algo='fedprox', mu=0.5)
  assert lockstep._ROUNDS and not set(lockstep._ROUNDS.values()) & set(traced)
  assert reused == anew


def test_an_edited_model_gets_a_round_of_its_own(monkeypatch):
  """A model edited in the same process (its weights' shapes unchanged)
  is a step of other content: its round is traced for it, and computes
  what it computes with nothing traced before."""
  monkeypatch.setattr(lockstep, '_ROUNDS', collections.OrderedDict())
  task, _ = helpers.task_and_arrays()
  edited = dataclasses.replace(
    task.model_fn,
    keras_model_fn=lambda: tf.keras.Sequential(
      [tf.keras.layers.Dense(10, activation='relu', input_shape=(60,))]
    ),
  )
  original, _ = _round_inputs(task.model_fn)
  kept = dict(lockstep._ROUNDS)
  after_original, engine = _round_inputs(edited)
  added = [k for k in lockstep._ROUNDS if k not in kept]
  assert len(added) == 1
  assert engine._rounds[max(engine._rounds)] is lockstep._ROUNDS[added[0]]
  lockstep._ROUNDS.clear()
  alone, _ = _round_inputs(edited)
  assert _same_values(after_original, alone)
  assert not _same_values(original, alone)


@pytest.mark.fast
def test_the_rounds_key_is_the_content_of_the_functions_it_calls():
  """The same code traced twice gives one key, a changed constant (in a
  branch, where the step's optimizer runs) another; a function that
  captures a tensor of the process (whose value its graph does not hold)
  gives none, and is not kept."""

  def traced(scale):
    return tf.function(
      lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x * scale, lambda: x)
    ).get_concrete_function(tf.TensorSpec([3], tf.float32))

  signature = [tf.TensorSpec([3], tf.float32)]
  assert lockstep._round_key(signature, False, traced(2.0)) == (
    lockstep._round_key(signature, False, traced(2.0))
  )
  assert lockstep._round_key(signature, False, traced(2.0)) != (
    lockstep._round_key(signature, False, traced(3.0))
  )
  assert lockstep._round_key(signature, True, traced(2.0)) != (
    lockstep._round_key(signature, False, traced(2.0))
  )
  assert lockstep._round_key(signature, False, traced(tf.constant(2.0))) is None
