"""Clients trained compiled in this process (`simulation.compiled`)
against the per-client path: the same rounds, the same models to float32
rounding, for every algorithm, aggregator, straggler policy and sampling
scheme; and where a run cannot or should not train them compiled, the
per-client path and a reason."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import helpers
from tff_algos import learning
from tff_algos.learning import model_ops
from tff_algos.simulation import compiled
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

QUICK = helpers.QUICK_RUN
CASES = helpers.EXECUTION_CASES


def _assert_compiled_trains_the_per_client_model(name):
  task, arrays = helpers.task_and_arrays()

  def settings(execution):
    return resolve(
      Config.create(**dict(QUICK, **CASES[name]), client_execution=execution),
      num_clients=30,
    )

  runs = {
    execution: helpers.final_weights(settings(execution), task.model_fn, arrays)
    for execution in ('compiled', 'per_client')
  }
  assert not isinstance(runs['per_client'][0].process, learning.ComputedProcess)
  loop, weights = runs['compiled']
  assert isinstance(loop.process, learning.ComputedProcess)
  assert loop.computed.__self__.execution == compiled.EXECUTION
  for a, b in zip(weights, runs['per_client'][1]):
    scale = max(float(np.max(np.abs(b))), 1e-6)
    assert float(np.max(np.abs(a - b))) / scale < 1e-5, name


@pytest.mark.parametrize('name', sorted(CASES))
def test_compiled_clients_train_the_per_client_model(name):
  _assert_compiled_trains_the_per_client_model(name)


@pytest.mark.fast
def test_the_readme_example_algorithm_trains_in_this_process():
  from tff_algos import cli

  cli.import_modules(['tests/commands/user_modules/fedavgm_algorithm.py'])
  task, _ = helpers.task_and_arrays()
  settings = resolve(Config(algo='fedavgm', **QUICK), num_clients=30)
  process, how = trainer.build_for_run(settings, task.model_fn)
  assert isinstance(process, learning.ComputedProcess)
  assert how == 'compiled by XLA'


def test_a_round_sends_the_clients_results_not_their_data():
  """A mean's round gets one input for all its clients: the same size
  whatever their data."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(Config(algo='fedavg', **QUICK), num_clients=30)
  process, _ = trainer.build_for_run(settings, task.model_fn)
  engine = compiled.Engine(process, arrays, 10)
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
      'compiled',
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
      'slower, so they train faster per client',
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
      'runs its layers lstm slower',
    ),
    (lambda t: lambda: t.model_fn(), 'compiled', 'not a learning.'),
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
  assert not isinstance(process, learning.ComputedProcess)
  assert how.startswith('per client (') and reason in how


def test_a_step_xla_cannot_compile_trains_per_client_and_says_why():
  """A model of an op XLA has no kernel for (here, in a branch that adds
  zero) asked to run compiled: its clients train per client, and the
  header says why."""
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
  task, _ = helpers.task_and_arrays()
  settings = resolve(
    Config(algo='fedavg', client_execution='compiled', **QUICK), num_clients=30
  )
  process, how = trainer.build_for_run(settings, model_fn)
  assert not isinstance(process, learning.ComputedProcess)
  assert how.startswith(
    "per client (XLA has no kernel for its step's AsString; each reads"
  ), how


@pytest.mark.fast
def test_a_compiled_rounds_clients_are_laid_out_one_after_another():
  minibatches = [  # (examples in order, batch sizes) by client.
    (np.array([3, 4, 5, 6]), np.array([3, 1])),
    (np.array([], int), np.array([], int)),  # No steps: an update of zero.
    (np.array([1, 2]), np.array([2])),
  ]
  indices, valid, starts, examples, steps, clients = compiled.layout(
    minibatches, 3, [7, 0, 2], [2, 0, 1]
  )
  assert indices.shape == valid.shape == (compiled.MIN_BUCKET, 3)
  assert examples[:4].tolist() == [7, 0, 2, 0] and clients == 3
  assert steps[:4].tolist() == [2, 0, 1, 0]
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
def test_a_run_recorded_before_compiled_clients_reads_as_per_client():
  old = {
    k: v
    for k, v in resolve(Config(**QUICK)).to_json().items()
    if k != 'client_execution'
  }
  assert Config.from_json(old).client_execution == 'per_client'
  lanes = dict(old, client_execution='lockstep')  # Lanes are gone.
  assert Config.from_json(lanes).client_execution == 'compiled'


def _round_inputs(model_fn, **overrides):
  """Round 1's compiled inputs of a FedProx run on the default task's
  data with the model of `model_fn`: (the inputs, the engine)."""
  _, arrays = helpers.task_and_arrays()
  settings = resolve(
    Config(algo='fedprox', **dict(QUICK, **overrides)), num_clients=30
  )
  process, _ = trainer.build_for_run(settings, model_fn)
  engine = compiled.Engine(process, arrays, 10)
  state = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(model_fn, 0)
  )
  sampler = trainer.sampler(settings, arrays)
  from tff_algos.simulation import client_inputs

  plans = sampler.participants(1, settings.policy)
  schedules = client_inputs.schedules(sampler, plans, arrays, 1, 10)
  return engine.inputs(state, schedules, 1), engine


@pytest.mark.parametrize('weighting', ['uniform', 'num_examples'])
def test_compiled_clients_report_the_per_client_update_spread(
  tmp_path, weighting
):
  """The update spread (from Σ_k‖u_k‖², sent only where it is asked for)
  of compiled clients, as one input for all (a uniform mean) or one each
  (weighted: the spread's uniform mean needs each update), is the
  per-client path's."""
  spreads = {}
  for execution in ('compiled', 'per_client'):
    _, rows = helpers.run(
      tmp_path,
      execution,
      algo='fedavg',
      client_weighting=weighting,
      update_spread=True,
      client_execution=execution,
    )
    spreads[execution] = [float(r['update_spread']) for r in rows[1:]]
  assert all(s > 0 for s in spreads['per_client'])
  np.testing.assert_allclose(
    spreads['compiled'], spreads['per_client'], rtol=1e-5
  )


def test_a_client_trains_alike_in_rounds_of_any_size():
  """Rounds of other buckets of clients and steps (other XLA programs, the
  third traced once for any) give a client the same result, bit for bit."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(
    Config.create(
      algo='fedprox',
      mu=0.5,
      aggregator='robust',
      **dict(QUICK, clients_per_round=30),
    ),
    num_clients=30,
  )
  model_fn = task.model_fn
  process, _ = trainer.build_for_run(settings, model_fn)
  engine = compiled.Engine(process, arrays, 10)
  assert not process.mean_of_updates  # An input a client.
  state = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(model_fn, 0)
  )
  from tff_algos.simulation import client_inputs

  sampler = trainer.sampler(settings, arrays)
  plans = sampler.participants(1, settings.policy)
  schedules = client_inputs.schedules(sampler, plans, arrays, 1, 10)
  sizes = (1, 12, 30)
  shapes = set()
  for n in sizes:
    minibatches = [engine._minibatches(*s) for s in schedules[:n]]
    steps = [len(b) for _, b in minibatches]
    shapes.add(compiled.layout(minibatches, 10, steps, steps).indices.shape)
  assert len(shapes) == len(sizes)
  first = [engine.inputs(state, schedules[:n], 1)[0] for n in sizes]
  for other in first[1:]:
    for a, b in zip(first[0]['update'], other['update']):
      np.testing.assert_array_equal(a, b)


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
  monkeypatch.setattr(compiled, '_ROUNDS', collections.OrderedDict())
  helpers.run(tmp_path, 'first', algo='fedprox', mu=0.25)
  traced = list(compiled._ROUNDS.values())
  assert traced
  reused, _ = helpers.run(tmp_path, 'reused', algo='fedprox', mu=0.5)
  assert list(compiled._ROUNDS.values()) == traced
  compiled._ROUNDS.clear()
  anew, _ = helpers.run(tmp_path, 'anew', algo='fedprox', mu=0.5)
  assert compiled._ROUNDS and not set(compiled._ROUNDS.values()) & set(traced)
  assert reused == anew


def test_an_edited_model_gets_a_round_of_its_own(monkeypatch):
  """A model edited in the same process (its weights' shapes unchanged)
  is a step of other content: its round is traced for it, and computes
  what it computes with nothing traced before."""
  monkeypatch.setattr(compiled, '_ROUNDS', collections.OrderedDict())
  task, _ = helpers.task_and_arrays()
  edited = dataclasses.replace(
    task.model_fn,
    keras_model_fn=lambda: tf.keras.Sequential(
      [tf.keras.layers.Dense(10, activation='relu', input_shape=(60,))]
    ),
  )
  original, _ = _round_inputs(task.model_fn)
  kept = dict(compiled._ROUNDS)
  after_original, engine = _round_inputs(edited)
  added = [k for k in compiled._ROUNDS if k not in kept]
  assert len(added) == 1
  assert engine._round is compiled._ROUNDS[added[0]]
  compiled._ROUNDS.clear()
  alone, _ = _round_inputs(edited)
  assert _same_values(after_original, alone)
  assert not _same_values(original, alone)


@pytest.mark.fast
def test_the_rounds_key_is_the_content_of_the_work_it_runs():
  """The same code traced twice gives one key, a changed constant (in a
  branch, where the step's optimizer runs) another, another signature
  another; a work that captures a tensor of the process (whose value its
  graph does not hold) gives none, and is not kept."""

  def traced(scale):
    return tf.function(
      lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x * scale, lambda: x)
    ).get_concrete_function(tf.TensorSpec([3], tf.float32))

  signature = [tf.TensorSpec([3], tf.float32)]
  key = compiled.round_key
  assert key(signature, traced(2.0)) == key(signature, traced(2.0))
  assert key(signature, traced(2.0)) != key(signature, traced(3.0))
  assert key(signature, traced(2.0)) != key(signature * 2, traced(2.0))
  assert key(signature, traced(tf.constant(2.0))) is None
