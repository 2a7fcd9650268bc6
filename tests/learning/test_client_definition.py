"""A client's work defined once (`learning.ClientDefinition`), built for
the per-client reference and for the compiled clients: FedNova
(examples/fednova.py) as a user writes it, against the per-client path,
FedAvg (its own reduction: equal local steps) and numpy."""

import collections
import dataclasses
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import helpers
from tff_algos import cli
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import registry
from tff_algos.learning import client_definition
from tff_algos.simulation import compiled
from tff_algos.simulation import experiment
from tff_algos.simulation import trainer
from tff_algos.simulation.client_tensors import ClientTensors
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

QUICK = helpers.QUICK_RUN


@pytest.fixture(scope='module')
def fednova():
  """examples/fednova.py, imported as --import does; unregistered after."""
  (path,) = cli.import_modules(['examples/fednova.py'])
  (module,) = [
    m for m in list(sys.modules.values()) if getattr(m, '__file__', '') == path
  ]
  registry.register(module.ALGORITHM)  # Again, if imported before.
  yield module
  registry.unregister('fednova')
  registry.unregister('fednova_strings')


def _settings(execution='auto', **overrides):
  return resolve(
    Config.create(
      **{**QUICK, 'algo': 'fednova', **overrides}, client_execution=execution
    ),
    num_clients=30,
  )


@pytest.mark.parametrize(
  'overrides',
  [
    {},  # One input for the round's clients: a mean aggregates them alike.
    dict(  # Each client's own input, and unequal steps.
      aggregator='dp',
      dp_noise_multiplier=0.5,
      dp_clip=0.5,
      straggler_fraction=0.5,
      epochs=3,
    ),
  ],
  ids=['mean', 'dp_stragglers'],
)
def test_fednova_compiled_trains_the_per_client_model(fednova, overrides):
  task, arrays = helpers.task_and_arrays()
  compiled_loop, compiled_weights = helpers.final_weights(
    _settings('auto', **overrides), task.model_fn, arrays
  )
  per_client_loop, per_client_weights = helpers.final_weights(
    _settings('per_client', **overrides), task.model_fn, arrays
  )
  assert isinstance(compiled_loop.process, learning.ComputedProcess)
  assert compiled_loop.computed.__self__.execution == 'compiled by XLA'
  assert not isinstance(per_client_loop.process, learning.ComputedProcess)
  for a, b in zip(compiled_weights, per_client_weights):
    scale = max(float(np.max(np.abs(b))), 1e-6)
    assert float(np.max(np.abs(a - b))) / scale < 1e-5


def test_fednova_runs_compiled_under_auto_and_the_header_says_so(fednova):
  task, _ = helpers.task_and_arrays()
  prepared = experiment.prepare(_settings('auto'), task)
  assert prepared.execution == 'compiled by XLA'
  assert prepared.provenance['execution'] == 'compiled by XLA'


def test_a_definition_xla_cannot_compile_trains_per_client_and_says_why(
  fednova,
):
  def step(state, batch):  # Adds zero, through an op XLA has no kernel for.
    weights, rate = fednova.step(state, batch)
    text = tf.strings.as_string(rate)
    return weights, rate + 0.0 * tf.strings.to_number(text)

  registry.register(
    dataclasses.replace(
      registry.get('fednova'),
      name='fednova_strings',
      build=lambda model_fn, settings, client_input: learning.build_process(
        model_fn,
        dataclasses.replace(fednova.FEDNOVA, step=step).client_work,
        tff.learning.optimizers.build_sgdm(1.0),
        client_input=client_input,
      ),
    )
  )
  task, arrays = helpers.task_and_arrays()
  settings = _settings(algo='fednova_strings')
  process, how = trainer.build_for_run(settings, task.model_fn)
  assert not isinstance(process, learning.ComputedProcess)
  assert how.startswith('per client (XLA has no kernel for')
  assert 'AsString' in how
  # Its clients read their data where they train (`StoredInput`), and
  # train FedNova's per-client model.
  assert learning.takes_stored_input(process)
  _, stored = helpers.final_weights(settings, task.model_fn, arrays, process)
  _, reference = helpers.final_weights(
    _settings('per_client'), task.model_fn, arrays
  )
  for a, b in zip(stored, reference):
    assert float(np.max(np.abs(a - b))) <= 1e-5 * float(np.max(np.abs(b)))


# ------------------------------------------ the process, round by round
LEARNING_RATE = 0.05


def _fednova_process(fednova, client_input=None):
  clients = dataclasses.replace(
    fednova.FEDNOVA, hparams={'learning_rate': LEARNING_RATE}
  )
  return learning.build_process(
    helpers.task_and_arrays()[0].model_fn,
    clients.client_work,
    tff.learning.optimizers.build_sgdm(1.0),
    client_input=client_input,
  )


def _schedules(arrays, batch_sizes_by_client):
  """(client, example order, batch ends) of clients 0, 1, ... taking
  batches of the given sizes, in their data's order."""
  return [
    (
      client,
      np.arange(len(arrays[client]['y']), dtype=np.int32),
      np.cumsum(sizes).astype(np.int32),
    )
    for client, sizes in enumerate(batch_sizes_by_client)
  ]


def _scheduled_inputs(arrays, schedules):
  return [
    [collections.OrderedDict(data=arrays[c], example_order=o, batch_ends=e)]
    for c, o, e in schedules
  ]


def _start(process, model_fn):
  return process.set_model_weights(
    process.initialize(), learning.initial_model_weights(model_fn, 0)
  )


def _trained(process, model_fn, inputs, rounds=1):
  state = _start(process, model_fn)
  for _ in range(rounds):
    state = process.next(state, inputs).state
  return process.get_model_weights(state).trainable


def test_fednova_with_equal_local_steps_is_fedavg(fednova):
  """The paper's reduction: every τ_k = τ gives τ_eff = τ and
  τ Σ p_k (w_t − w_k)/τ = FedAvg's step, here 4 steps of batches of
  different sizes. Bit for bit: dividing by 4 and multiplying by it are
  exact in float32, and so is the weighted mean Σ_k n_k·4 / Σ_k n_k."""
  task, arrays = helpers.task_and_arrays()
  inputs = _scheduled_inputs(
    arrays, _schedules(arrays, [[3, 3, 3, 3], [5, 2, 4, 1], [1, 1, 6, 2]])
  )
  nova = _trained(_fednova_process(fednova), task.model_fn, inputs, rounds=2)
  avg = _trained(
    fedavg.build_fed_avg(task.model_fn, LEARNING_RATE),
    task.model_fn,
    inputs,
    rounds=2,
  )
  initial = learning.initial_model_weights(task.model_fn, 0).trainable
  assert max(np.max(np.abs(a - b)) for a, b in zip(avg, initial)) > 1e-3
  for a, b in zip(nova, avg):
    np.testing.assert_array_equal(a, b)


def _numpy_fednova_round(weights, arrays, schedules):
  """FedNova's first round in float64 (multinomial logistic regression,
  the mean cross-entropy of each batch): w_t − τ_eff Σ p_k d_k."""
  w_t = [np.asarray(w, np.float64) for w in weights]
  sizes = np.array([len(arrays[c]['y']) for c, _, _ in schedules], np.float64)
  p = sizes / sizes.sum()
  normalized, steps = [], []
  for client, order, ends in schedules:
    kernel, bias = (w.copy() for w in w_t)
    for start, end in zip(np.concatenate([[0], ends[:-1]]), ends):
      batch = order[start:end]
      x = arrays[client]['x'][batch].astype(np.float64)
      y = np.eye(10)[arrays[client]['y'][batch]]
      logits = x @ kernel + bias
      softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
      softmax /= softmax.sum(axis=1, keepdims=True)
      error = (softmax - y) / len(batch)
      kernel -= LEARNING_RATE * x.T @ error
      bias -= LEARNING_RATE * error.sum(axis=0)
    steps.append(len(ends))
    normalized.append(
      [(w_t[0] - kernel) / len(ends), (w_t[1] - bias) / len(ends)]
    )
  tau_eff = float(np.dot(p, steps))
  return [
    w - tau_eff * sum(p_k * d[i] for p_k, d in zip(p, normalized))
    for i, w in enumerate(w_t)
  ]


@pytest.mark.fast
def test_fednova_first_round_is_numpys_per_client_and_compiled(fednova):
  """Unequal local steps (2, 3 and 5), through the per-client process and
  through the compiled clients, against FedNova computed in numpy."""
  task, arrays = helpers.task_and_arrays()
  schedules = _schedules(arrays, [[4, 6], [2, 2, 7], [1, 3, 3, 3, 2]])
  expected = _numpy_fednova_round(
    learning.initial_model_weights(task.model_fn, 0).trainable,
    arrays,
    schedules,
  )
  per_client = _trained(
    _fednova_process(fednova),
    task.model_fn,
    _scheduled_inputs(arrays, schedules),
  )
  process = _fednova_process(fednova, learning.ComputedInput())
  engine = compiled.Engine(process, arrays, 10, ClientTensors())
  state = _start(process, task.model_fn)
  state = process.next(state, engine.inputs(state, schedules, 1)).state
  compiled_weights = process.get_model_weights(state).trainable
  for trained in (per_client, compiled_weights):
    for a, b in zip(trained, expected):
      assert np.max(np.abs(a - b)) <= 1e-5 * np.max(np.abs(b))


def test_fednova_takes_tf_data_clients_and_its_hparams_are_the_state(
  fednova,
):
  """A production build (`DatasetInput`: a tf.data.Dataset of batches per
  client) trains the scheduled build's model on the same batches; the
  learning rate is the client work's state, read and set as TFF's."""
  from tff_algos.simulation import client_inputs

  task, arrays = helpers.task_and_arrays()
  schedules = [
    (c, np.arange(n, dtype=np.int32), np.append(np.arange(10, n, 10), n))
    for c, n in enumerate(len(arrays[c]['y']) for c in range(3))
  ]
  scheduled = _scheduled_inputs(arrays, schedules)
  production = _fednova_process(fednova, learning.DatasetInput(epochs=1))
  on_datasets = _trained(
    production,
    task.model_fn,
    [client_inputs.as_dataset(i) for i in scheduled],
  )
  on_schedules = _trained(_fednova_process(fednova), task.model_fn, scheduled)
  for a, b in zip(on_datasets, on_schedules):
    assert float(np.max(np.abs(a - b))) <= 1e-6 * float(np.max(np.abs(b)))
  state = production.initialize()
  hparams = production.get_hparams(state)
  assert hparams['client_work'] == {'learning_rate': np.float32(LEARNING_RATE)}
  hparams['client_work']['learning_rate'] = np.float32(0.5)
  state = production.set_hparams(state, hparams)
  assert production.get_hparams(state)['client_work']['learning_rate'] == 0.5


def test_fednova_compiles_to_the_production_forms(fednova):
  """τ_eff is aggregated beside the updates (no broadcast after an
  aggregation): the round is a MapReduceForm and a
  DistributeAggregateForm."""
  process = _fednova_process(fednova, learning.DatasetInput(epochs=1))
  mapreduce = tff.backends.mapreduce
  assert isinstance(
    mapreduce.get_map_reduce_form_for_computation(process.next),
    mapreduce.MapReduceForm,
  )
  assert isinstance(
    mapreduce.get_distribute_aggregate_form_for_computation(process.next),
    mapreduce.DistributeAggregateForm,
  )


def test_fednova_scales_leave_the_clients_through_the_metrics_aggregator(
  fednova,
):
  """τ_k is a client's value like its metrics: the configured metrics
  aggregator (here secure aggregation's, recorded) sums w_k τ_k and w_k,
  and the round's τ_eff (update_scale) is the plain build's."""
  given = []

  def recording(finalizers, metrics_type):
    given.append(tff.structure.name_list(metrics_type))
    return tff.learning.metrics.secure_sum_then_finalize(
      finalizers, metrics_type
    )

  def process(metrics_aggregator=None):
    return learning.build_process(
      helpers.task_and_arrays()[0].model_fn,
      dataclasses.replace(
        fednova.FEDNOVA, hparams={'learning_rate': 0.1}
      ).client_work,
      tff.learning.optimizers.build_sgdm(1.0),
      client_input=learning.DatasetInput(epochs=2),
      metrics_aggregator=metrics_aggregator,
    )

  secure = process(recording)
  sums = set(client_definition.SCALE_SUMS)
  assert any(sums <= set(names) for names in given)
  data = helpers.client_datasets(3)
  with runtime.test_context():
    scaled = secure.next(secure.initialize(), data).metrics
  plain = process().next(process().initialize(), data).metrics
  assert scaled['client_work']['update_scale'] == pytest.approx(
    plain['client_work']['update_scale'], rel=1e-4
  )
  assert 'update_scale_weight' not in plain['client_work']
