# Copyright 2018, The TensorFlow Federated Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Modified: run on this repository's builders (see the docstring).
"""TFF's own builder tests, run on our builders: the TFF builder contract.

`FedAvgTest` and `FunctionalFedAvgTest` are TFF 0.87's
`tensorflow_federated/python/learning/algorithms/fed_avg_test.py` (the
version whose API is 0.87's: `loop_implementation`, TFF optimizers only);
`FedProxConstructionTest` is its `fed_prox_test.py`, whose available version
predates 0.87 (it passes `tf.keras` optimizers and
`use_experimental_simulation_loop`, which TFF 0.87's own FedProx no longer
takes); those cases are brought to 0.87's API as fed_avg_test.py was.

The imports are swapped: TFF's internal modules become the public names
our code uses (below), and TFF's builders become ours through
`fed_avg` and `fed_prox`. Ours has one builder per algorithm for weighted
and unweighted means: an unweighted `model_aggregator` makes the mean
uniform. The builds are production builds (`learning.DatasetInput`), TFF's
client data. Every assertion that differs on purpose says why in an
`# Ours:` comment; docs/guide/porting.md lists the differences.
"""

import collections
import functools
import types
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import learning
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedprox

# TFF's internal modules, by the public names of what the tests use.
factory_utils = tff.aggregators
model_update_aggregator = tff.learning
aggregator = tff.learning.metrics
iterative_process = tff.templates
distributors = tff.learning.templates
model_weights = tff.learning.models
sgdm = tff.learning.optimizers
loop_builder = tff.learning
static_assert = tff.test


def _linear_regression(feature_dim=2):
  """A linear regression VariableModel, zero-initialized, as TFF's test
  model `model_examples.LinearRegression` (not in TFF's pip package)."""
  return tff.learning.models.from_keras_model(
    tf.keras.Sequential(
      [
        tf.keras.layers.Dense(
          1, kernel_initializer='zeros', input_shape=(feature_dim,)
        )
      ]
    ),
    loss=tf.keras.losses.MeanSquaredError(),
    input_spec=collections.OrderedDict(
      x=tf.TensorSpec([None, feature_dim], tf.float32),
      y=tf.TensorSpec([None, 1], tf.float32),
    ),
  )


def _functional_linear_regression(feature_dim=2):
  """A linear regression FunctionalModel counting its examples, as TFF's
  `test_models.build_functional_linear_regression` (not in the pip
  package)."""

  @tf.function
  def predict_on_batch(weights, x, training=True):
    del training  # Unused.
    (kernel, bias), _ = weights
    return x @ kernel + bias

  def loss(output, label, sample_weight=None):
    del sample_weight  # Unused.
    return tf.reduce_mean(tf.square(output - label))

  @tf.function
  def initialize_metrics():
    return collections.OrderedDict(num_examples=tf.constant(0))

  @tf.function
  def update_metrics(state, labels, batch_output, sample_weight=None):
    del batch_output, sample_weight  # Unused.
    return collections.OrderedDict(
      num_examples=state['num_examples'] + tf.shape(labels)[0]
    )

  return tff.learning.models.FunctionalModel(
    initial_weights=(
      (np.zeros([feature_dim, 1], np.float32), np.zeros([1], np.float32)),
      (),
    ),
    predict_on_batch_fn=predict_on_batch,
    loss_fn=loss,
    metrics_fns=(
      initialize_metrics,
      update_metrics,
      tf.function(lambda state: state),
    ),
    input_spec=(
      tf.TensorSpec([None, feature_dim], tf.float32),
      tf.TensorSpec([None, 1], tf.float32),
    ),
  )


model_examples = types.SimpleNamespace(LinearRegression=_linear_regression)
test_models = types.SimpleNamespace(
  build_functional_linear_regression=_functional_linear_regression
)


def _weighted(build):
  """TFF's build_weighted_*: our builder's production build."""

  def build_weighted(model_fn, **kwargs):
    return build(model_fn, client_input=learning.DatasetInput(1), **kwargs)

  return build_weighted


def _unweighted(build):
  """TFF's build_unweighted_*: our builder with uniform client weights and,
  by default, TFF's unweighted mean."""

  def build_unweighted(model_fn, *, model_aggregator=None, **kwargs):
    return build(
      model_fn,
      client_input=learning.DatasetInput(1),
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
      model_aggregator=(
        model_aggregator or tff.aggregators.UnweightedMeanFactory()
      ),
      **kwargs,
    )

  return build_unweighted


fed_avg = types.SimpleNamespace(
  build_weighted_fed_avg=_weighted(fedavg.build_fed_avg),
  build_unweighted_fed_avg=_unweighted(fedavg.build_fed_avg),
)
fed_prox = types.SimpleNamespace(
  build_weighted_fed_prox=_weighted(fedprox.build_fed_prox),
  build_unweighted_fed_prox=_unweighted(fedprox.build_fed_prox),
)


@functools.cache
def _without_loop_implementation(algorithm):
  """Ours: the process the loop-implementation tests build, built without
  `loop_implementation` (once per algorithm)."""
  if algorithm == 'fed_avg':
    return fed_avg.build_weighted_fed_avg(
      model_fn=model_examples.LinearRegression,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
    )
  return fed_prox.build_weighted_fed_prox(
    model_fn=model_examples.LinearRegression,
    proximal_strength=1.0,
    client_optimizer_fn=sgdm.build_sgdm(1.0),
  )


def _builds_through_the_core_once(build):
  """Ours: `build()` passes through `learning.build_process` once."""
  with mock.patch.object(
    learning, 'build_process', wraps=learning.build_process
  ) as core:
    build()
  return core.call_count == 1


# ------------------------------------------------------ fed_avg_test.py
class FedAvgTest(parameterized.TestCase):
  """Tests construction of the FedAvg training process."""

  def test_construction_calls_model_fn(self):
    # Assert that the process building does not call `model_fn` too many times.
    # `model_fn` can potentially be expensive (loading weights, processing, etc
    # ).
    mock_model_fn = mock.Mock(side_effect=model_examples.LinearRegression)
    fed_avg.build_weighted_fed_avg(
      model_fn=mock_model_fn,
      client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1),
      model_aggregator=model_update_aggregator.robust_aggregator(),
    )
    self.assertEqual(mock_model_fn.call_count, 3)

  @parameterized.named_parameters(
    ('dataset_reduce', loop_builder.LoopImplementation.DATASET_REDUCE),
    ('dataset_iterator', loop_builder.LoopImplementation.DATASET_ITERATOR),
  )
  def test_client_tf_dataset_reduce_fn(self, loop_implementation):
    # Ours: `loop_implementation` is accepted for TFF's signature, but our
    # client work is its own loop over the batches, not TFF's loop builder:
    # the local steps are the same whichever is asked for. So instead of
    # TFF's loop builder being called with it, every LoopImplementation
    # builds the same process, and what is not one is a TypeError.
    process = fed_avg.build_weighted_fed_avg(
      model_fn=model_examples.LinearRegression,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      loop_implementation=loop_implementation,
    )
    self.assertEqual(
      process.next.type_signature,
      _without_loop_implementation('fed_avg').next.type_signature,
    )
    with self.assertRaisesRegex(TypeError, 'loop_implementation must be'):
      fed_avg.build_weighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        loop_implementation=loop_implementation.name,
      )

  @pytest.mark.fast
  def test_build_weighted_fed_avg_called_by_unweighted_fed_avg(self):
    # Ours: one builder for weighted and unweighted means, so instead of the
    # unweighted builder calling the weighted one, an unweighted build goes
    # once through the one core, `learning.build_process`.
    self.assertTrue(
      _builds_through_the_core_once(
        lambda: fed_avg.build_unweighted_fed_avg(
          model_fn=model_examples.LinearRegression,
          client_optimizer_fn=sgdm.build_sgdm(1.0),
        )
      )
    )

  def test_aggregation_wrapper_called_by_unweighted(self):
    # Ours: no weighted builder to mock (there is one builder), so the
    # wrapper is watched (`wraps`) rather than replaced, and the build runs
    # to the end.
    with mock.patch.object(
      factory_utils,
      'as_weighted_aggregator',
      wraps=factory_utils.as_weighted_aggregator,
    ) as mock_as_weighted:
      fed_avg.build_unweighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
      )
    self.assertEqual(mock_as_weighted.call_count, 1)

  def test_raises_on_callable_non_model_fn(self):
    with self.assertRaisesRegex(TypeError, 'callable returned type:'):
      fed_avg.build_weighted_fed_avg(
        model_fn=lambda: 0, client_optimizer_fn=sgdm.build_sgdm()
      )
    with self.assertRaisesRegex(TypeError, 'callable returned type:'):
      fed_avg.build_unweighted_fed_avg(
        model_fn=lambda: 0, client_optimizer_fn=sgdm.build_sgdm()
      )

  def test_raises_on_invalid_client_weighting(self):
    # Ours: a weighting's name ('uniform', 'num_examples') is accepted as
    # well as a tff.learning.ClientWeighting (the command line and configs
    # give names); what is neither a ClientWeighting nor a name is a
    # TypeError, an unknown name a ValueError.
    uniform = fed_avg.build_weighted_fed_avg(
      model_fn=model_examples.LinearRegression,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      client_weighting='uniform',
    )
    self.assertIsInstance(uniform, tff.learning.templates.LearningProcess)
    with self.assertRaisesRegex(TypeError, 'client_weighting'):
      fed_avg.build_weighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        client_weighting=1,
      )
    with self.assertRaisesRegex(ValueError, 'client_weighting'):
      fed_avg.build_weighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        client_weighting='median',
      )

  def test_weighted_fed_avg_raises_on_unweighted_aggregator(self):
    # Ours: one builder takes both kinds of aggregator; an unweighted one
    # makes the mean uniform (TFF's build_unweighted_fed_avg), so it is
    # refused only with a weighting it would ignore, a ValueError; what is
    # no aggregation factory is the TypeError.
    model_aggregator = model_update_aggregator.robust_aggregator(weighted=False)
    fed_avg.build_weighted_fed_avg(
      model_fn=model_examples.LinearRegression,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_aggregator,
    )
    with self.assertRaisesRegex(ValueError, 'ignores the client weights'):
      fed_avg.build_weighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=model_aggregator,
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      )
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      fed_avg.build_weighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=sgdm.build_sgdm(1.0),
      )

  def test_unweighted_fed_avg_raises_on_weighted_aggregator(self):
    # Ours: uniform client weights through a weighted aggregator are an
    # unweighted mean, so the unweighted build takes a weighted aggregator;
    # what is no aggregation factory is the TypeError.
    model_aggregator = model_update_aggregator.robust_aggregator(weighted=True)
    fed_avg.build_unweighted_fed_avg(
      model_fn=model_examples.LinearRegression,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_aggregator,
    )
    with self.assertRaisesRegex(TypeError, 'UnweightedAggregationFactory'):
      fed_avg.build_unweighted_fed_avg(
        model_fn=model_examples.LinearRegression,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=sgdm.build_sgdm(1.0),
      )


class FunctionalFedAvgTest(parameterized.TestCase):
  """Tests construction of the FedAvg training process."""

  @parameterized.named_parameters(
    ('weighted', fed_avg.build_weighted_fed_avg),
    ('unweighted', fed_avg.build_unweighted_fed_avg),
  )
  def test_raises_on_non_callable_or_functional_model(self, constructor):
    with self.assertRaisesRegex(TypeError, 'is not a callable'):
      constructor(
        model_fn=0, client_optimizer_fn=sgdm.build_sgdm(learning_rate=0.1)
      )


# ----------------------------------------------------- fed_prox_test.py
class FedProxConstructionTest(parameterized.TestCase):
  """Tests construction of the FedProx training process."""

  @parameterized.product(
    optimizer_fn=[
      tf.keras.optimizers.SGD,
      sgdm.build_sgdm(learning_rate=0.1),
    ],
    aggregation_factory=[
      model_update_aggregator.robust_aggregator,
      model_update_aggregator.compression_aggregator,
      model_update_aggregator.secure_aggregator,
    ],
  )
  def test_construction_calls_model_fn(self, optimizer_fn, aggregation_factory):
    # Assert that the process building does not call `model_fn` too many times.
    # `model_fn` can potentially be expensive (loading weights, processing, etc
    # ).
    mock_model_fn = mock.Mock(side_effect=model_examples.LinearRegression)
    if optimizer_fn is tf.keras.optimizers.SGD:
      # Ours, as TFF 0.87: a Keras optimizer is not a client optimizer (TFF
      # 0.87 fails on it with an AttributeError; ours says what it needs
      # before it calls `model_fn`).
      with self.assertRaisesRegex(TypeError, 'client_optimizer_fn must be'):
        fed_prox.build_weighted_fed_prox(
          model_fn=mock_model_fn,
          proximal_strength=1.0,
          client_optimizer_fn=optimizer_fn,
          model_aggregator=aggregation_factory(),
        )
      self.assertEqual(mock_model_fn.call_count, 0)
      return
    fed_prox.build_weighted_fed_prox(
      model_fn=mock_model_fn,
      proximal_strength=1.0,
      client_optimizer_fn=optimizer_fn,
      model_aggregator=aggregation_factory(),
    )
    self.assertEqual(mock_model_fn.call_count, 3)

  @parameterized.named_parameters(
    ('dataset_reduce', loop_builder.LoopImplementation.DATASET_REDUCE),
    ('dataset_iterator', loop_builder.LoopImplementation.DATASET_ITERATOR),
  )
  def test_client_tf_dataset_reduce_fn(self, loop_implementation):
    # TFF 0.87 replaced `use_experimental_simulation_loop` by
    # `loop_implementation` (as in fed_avg_test.py). Ours: as in
    # FedAvgTest.test_client_tf_dataset_reduce_fn, every LoopImplementation
    # builds the same process, and what is not one is a TypeError.
    process = fed_prox.build_weighted_fed_prox(
      model_fn=model_examples.LinearRegression,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      loop_implementation=loop_implementation,
    )
    self.assertEqual(
      process.next.type_signature,
      _without_loop_implementation('fed_prox').next.type_signature,
    )
    with self.assertRaisesRegex(TypeError, 'loop_implementation must be'):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        loop_implementation=True,
      )

  # Ours: TFF's original swaps the labels ('weighted' names the unweighted
  # builder); each label names its builder here.
  @parameterized.named_parameters(
    ('weighted', fed_prox.build_weighted_fed_prox),
    ('unweighted', fed_prox.build_unweighted_fed_prox),
  )
  def test_build_functional_model_fed_prox(self, build_fed_prox):
    model = test_models.build_functional_linear_regression(feature_dim=2)
    build_fed_prox(
      model_fn=model,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
    )

  def test_build_functional_model_fed_prox_non_tff_optimizer_fails(self):
    model = test_models.build_functional_linear_regression(feature_dim=2)
    # Ours: the same sentence as TFF's, without Markdown quotes around the
    # names (our messages have none).
    with self.assertRaisesRegex(
      TypeError,
      'client_optimizer_fn must be a tff.learning.optimizers.Optimizer',
    ):
      fed_prox.build_weighted_fed_prox(
        model_fn=model,
        proximal_strength=1.0,
        client_optimizer_fn=tf.keras.optimizers.SGD,
      )

  def test_build_weighted_fed_prox_called_by_unweighted_fed_prox(self):
    # Ours: as FedAvgTest's (one builder: one pass through the core).
    self.assertTrue(
      _builds_through_the_core_once(
        lambda: fed_prox.build_unweighted_fed_prox(
          model_fn=model_examples.LinearRegression,
          proximal_strength=1.0,
          client_optimizer_fn=sgdm.build_sgdm(1.0),
        )
      )
    )

  def test_aggregation_wrapper_called_by_unweighted(self):
    # Ours: as FedAvgTest's (the wrapper watched, not replaced).
    with mock.patch.object(
      factory_utils,
      'as_weighted_aggregator',
      wraps=factory_utils.as_weighted_aggregator,
    ) as mock_as_weighted:
      fed_prox.build_unweighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
      )
    self.assertEqual(mock_as_weighted.call_count, 1)

  def test_raises_on_non_callable_model_fn(self):
    with self.assertRaises(TypeError):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression(),
        proximal_strength=1.0,
        client_optimizer_fn=tf.keras.optimizers.SGD,
      )
    # Ours: the Keras optimizer above is refused first, so the model_fn is
    # checked with a TFF optimizer too.
    with self.assertRaisesRegex(TypeError, 'model_fn is not a callable'):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression(),
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
      )

  @pytest.mark.fast
  def test_raises_on_negative_proximal_strength(self):
    with self.assertRaises(ValueError):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=-1.0,
        client_optimizer_fn=tf.keras.optimizers.SGD,
      )

  @pytest.mark.fast
  def test_raises_on_invalid_distributor(self):
    model_weights_type = model_weights.weights_type_from_model(
      model_examples.LinearRegression
    )
    distributor = distributors.build_broadcast_process(model_weights_type)
    invalid_distributor = iterative_process.IterativeProcess(
      distributor.initialize, distributor.next
    )
    with self.assertRaises(TypeError):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_distributor=invalid_distributor,
      )

  def test_weighted_fed_avg_raises_on_unweighted_aggregator(self):
    # Ours: as FedAvgTest's (an unweighted aggregator makes the mean
    # uniform; refused only with a weighting it would ignore).
    model_aggregator = model_update_aggregator.robust_aggregator(weighted=False)
    fed_prox.build_weighted_fed_prox(
      model_fn=model_examples.LinearRegression,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_aggregator,
    )
    with self.assertRaisesRegex(ValueError, 'ignores the client weights'):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=model_aggregator,
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      )
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      fed_prox.build_weighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=sgdm.build_sgdm(1.0),
      )

  def test_unweighted_fed_avg_raises_on_weighted_aggregator(self):
    # Ours: as FedAvgTest's (uniform weights through a weighted aggregator
    # are an unweighted mean).
    model_aggregator = model_update_aggregator.robust_aggregator(weighted=True)
    fed_prox.build_unweighted_fed_prox(
      model_fn=model_examples.LinearRegression,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_aggregator,
    )
    with self.assertRaisesRegex(TypeError, 'UnweightedAggregationFactory'):
      fed_prox.build_unweighted_fed_prox(
        model_fn=model_examples.LinearRegression,
        proximal_strength=1.0,
        client_optimizer_fn=sgdm.build_sgdm(1.0),
        model_aggregator=sgdm.build_sgdm(1.0),
      )

  def test_weighted_fed_prox_with_only_secure_aggregation(self):
    model_fn = model_examples.LinearRegression
    # TFF 0.87 takes no Keras optimizer (its FedProx fails on one):
    # `tf.keras.optimizers.SGD(1.0)` became TFF's SGD, as in fed_avg_test.py.
    learning_process = fed_prox.build_weighted_fed_prox(
      model_fn,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_update_aggregator.secure_aggregator(weighted=True),
      metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    static_assert.assert_not_contains_unsecure_aggregation(
      learning_process.next
    )

  def test_unweighted_fed_prox_with_only_secure_aggregation(self):
    model_fn = model_examples.LinearRegression
    # As in the weighted test: TFF's SGD for the Keras optimizer.
    learning_process = fed_prox.build_unweighted_fed_prox(
      model_fn,
      proximal_strength=1.0,
      client_optimizer_fn=sgdm.build_sgdm(1.0),
      model_aggregator=model_update_aggregator.secure_aggregator(
        weighted=False
      ),
      metrics_aggregator=aggregator.secure_sum_then_finalize,
    )
    static_assert.assert_not_contains_unsecure_aggregation(
      learning_process.next
    )
