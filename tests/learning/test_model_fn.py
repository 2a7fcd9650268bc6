"""The builders' model argument is TFF's: a no-argument callable returning
a `tff.learning.models.VariableModel`, or a `tff.learning.models.
FunctionalModel`, in both client-input flavours; anything else is a
TypeError saying what it was."""

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

EPOCHS, BATCH, ROUNDS, CLIENTS = 2, 10, 3, 3
BUILDS = {
  'fedavg': lambda m, i: fedavg.build_fed_avg(m, 0.05, client_input=i),
  'fedprox': lambda m, i: fedprox.build_fed_prox(
    m, 0.05, mu=0.5, client_input=i
  ),
}
# The production clients' datasets hold all epochs of the simulation's
# schedules (`_round_data`): one pass over them.
INPUTS = {
  'simulation': learning.ScheduledInput(),
  'production': learning.DatasetInput(1),
}
LOSS = functools.partial(
  tf.keras.losses.SparseCategoricalCrossentropy, from_logits=True
)
ACCURACY = functools.partial(
  tf.keras.metrics.SparseCategoricalAccuracy, name='accuracy'
)


def _keras_model():
  """The task's model (multinomial logistic regression) as a Keras model."""
  task, _ = helpers.task_and_arrays()
  features, classes = task.model_fn().trainable_variables[0].shape
  return tf.keras.Sequential(
    [tf.keras.layers.Dense(classes, input_shape=(features,))]
  )


@functools.cache
def _models():
  """(the FunctionalModel of a Keras model, a model_fn of VariableModels of
  the same Keras model) with the same loss and accuracy metric."""
  task, _ = helpers.task_and_arrays()
  input_spec = task.model_fn().input_spec
  tf.keras.utils.set_random_seed(0)
  functional = tff.learning.models.functional_model_from_keras(
    _keras_model(),
    LOSS(),
    input_spec,
    metrics_constructor=collections.OrderedDict(accuracy=ACCURACY),
  )

  def variable_model_fn():
    return tff.learning.models.from_keras_model(
      _keras_model(), loss=LOSS(), input_spec=input_spec, metrics=[ACCURACY()]
    )

  return functional, variable_model_fn


def _round_data(production):
  """ROUNDS rounds of the same clients' minibatch sequences (EPOCHS epochs
  of B): the scheduled inputs, or the same minibatches as tf.data
  datasets."""
  _, arrays = helpers.task_and_arrays()
  sampler = ClientSampler(len(arrays), CLIENTS, EPOCHS, seed=1)
  rounds = []
  for round_num in range(1, ROUNDS + 1):
    inputs = client_inputs.round_inputs(
      sampler, sampler.round_plan(round_num), arrays, round_num, BATCH
    )
    rounds.append(
      [client_inputs.as_dataset(i) for i in inputs] if production else inputs
    )
  return rounds


def _train(process, initial_weights, rounds):
  state = process.set_model_weights(process.initialize(), initial_weights)
  for data in rounds:
    output = process.next(state, data)
    state = output.state
  return process.get_model_weights(state), output.metrics['client_work']


@pytest.mark.parametrize('client_input', sorted(INPUTS))
@pytest.mark.parametrize('algorithm', sorted(BUILDS))
def test_a_functional_model_trains_as_the_variable_model_of_its_keras_model(
  algorithm, client_input
):
  functional, variable_model_fn = _models()
  build = BUILDS[algorithm]
  from_functional = build(functional, INPUTS[client_input])
  from_variable = build(variable_model_fn, INPUTS[client_input])
  initial = learning.initial_model_weights(functional, seed=0)
  # The process starts from the functional model's weights, as TFF's does.
  assert (
    helpers.max_abs_diff(
      initial, from_functional.get_model_weights(from_functional.initialize())
    )
    == 0
  )
  rounds = _round_data(client_input == 'production')
  trained, metrics = _train(from_functional, initial, rounds)
  reference, reference_metrics = _train(from_variable, initial, rounds)
  assert helpers.max_abs_diff(trained, initial) > 1e-3  # It trained...
  assert helpers.max_abs_diff(trained, reference) <= 1e-6  # ...alike,
  # and reports the functional model's own metrics.
  assert set(metrics['train']) == {'accuracy'}
  assert metrics['train']['accuracy'] == pytest.approx(
    reference_metrics['train']['accuracy'], abs=1e-6
  )
  assert metrics['local_steps'] == reference_metrics['local_steps'] > 0


@pytest.mark.parametrize(
  'build, client_input',
  [
    (
      lambda m, i: fedsgd.build_fed_sgd(m, 0.1, client_input=i),
      learning.DatasetInput(1),
    ),
    (
      lambda m, i: fedisgd.build_fed_isgd(
        m, 0.1, lam=0.5, server_learning_rate=1.0, client_input=i
      ),
      learning.ScheduledInput(),
    ),
  ],
  ids=['fedsgd_production', 'fedisgd_simulation'],
)
def test_every_builder_takes_a_functional_model(build, client_input):
  functional, _ = _models()
  process = build(functional, client_input)
  # Its clients take the functional model's batches...
  assert process.next.type_signature.parameter[1].member == (
    client_work.client_data_type(functional.input_spec, client_input)
  )
  assert (
    helpers.max_abs_diff(  # ...and it starts from its weights.
      learning.initial_model_weights(functional, seed=0),
      process.get_model_weights(process.initialize()),
    )
    == 0
  )


# ---------------------------------------------------- what is not a model
BUILDERS = {
  'fedavg': lambda m: fedavg.build_fed_avg(m, 0.1),
  'fedprox': lambda m: fedprox.build_fed_prox(m, 0.1, mu=1.0),
  'fedsgd': lambda m: fedsgd.build_fed_sgd(m, 0.1),
  'fedisgd': lambda m: fedisgd.build_fed_isgd(
    m, 0.1, lam=1.0, server_learning_rate=1.0
  ),
  'build_process': lambda m: learning.build_process(
    m,
    functools.partial(
      learning.build_proximal_sgd_client_work,
      optimizer=tff.learning.optimizers.build_sgdm(0.1),
    ),
    tff.learning.optimizers.build_sgdm(1.0),
    client_input=learning.DatasetInput(1),
  ),
}


@pytest.mark.parametrize(
  'returned, named',
  [
    (lambda: 0, 'int'),
    (_keras_model, 'Sequential.*from_keras_model'),
  ],
)
@pytest.mark.parametrize('builder', sorted(BUILDERS))
def test_a_model_fn_returning_something_else_is_a_type_error_naming_it(
  builder, returned, named
):
  with pytest.raises(
    TypeError,
    match='model_fn must return a tff.learning.'
    f'models.VariableModel.*returned type: {named}',
  ):
    BUILDERS[builder](returned)


@pytest.mark.fast
@pytest.mark.parametrize('not_a_model', [0, 'model'])
def test_a_model_fn_neither_callable_nor_functional_is_a_type_error(
  not_a_model,
):
  for build in [
    *BUILDERS.values(),
    lambda m: learning.initial_model_weights(m, 0),
  ]:
    with pytest.raises(
      TypeError,
      match='model_fn is not a callable or a tff.'
      'learning.models.FunctionalModel, got '
      f'{type(not_a_model).__name__}',
    ):
      build(not_a_model)


@pytest.mark.fast
def test_a_variable_model_instance_is_not_a_model_fn():
  """A built model, not a function that builds one (a common slip)."""
  task, _ = helpers.task_and_arrays()
  with pytest.raises(TypeError, match='is not a callable.*got _KerasModel'):
    fedprox.build_fed_prox(task.model_fn(), 0.1, mu=1.0)


@pytest.mark.fast
def test_initial_weights_of_a_functional_model_are_its_own():
  functional, _ = _models()
  weights = learning.initial_model_weights(functional, seed=3)
  trainable, non_trainable = functional.initial_weights
  assert len(weights.trainable) == len(trainable) and not non_trainable
  for ours, its in zip(weights.trainable, trainable):
    np.testing.assert_array_equal(ours, its)
