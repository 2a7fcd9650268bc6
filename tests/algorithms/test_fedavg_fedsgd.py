"""FedAvg and FedSGD: equivalences and behaviour."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedsgd
from tff_algos.simulation import client_inputs
from tff_algos.simulation.sampling import ClientSampler


def test_fed_avg_matches_tff_build_weighted_fed_avg():
  task, arrays = helpers.task_and_arrays()
  arrays = arrays[:6]
  sampler = ClientSampler(num_clients=6, clients_per_round=4, epochs=2, seed=3)
  ours_inputs, tff_inputs = [], []
  for round_num in range(1, 4):
    plans = sampler.round_plan(round_num)
    inputs = client_inputs.round_inputs(sampler, plans, arrays, round_num, 10)
    ours_inputs.append(inputs)
    tff_inputs.append([client_inputs.as_dataset(i) for i in inputs])
  ours = helpers.train(
    fedavg.build_fed_avg(task.model_fn, 0.05), task.model_fn, ours_inputs
  )
  builtin = helpers.train(
    tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    ),
    task.model_fn,
    tff_inputs,
  )
  initial = learning.initial_model_weights(task.model_fn, 0)
  assert helpers.max_abs_diff(ours, initial) > 1e-2  # It trained...
  assert helpers.max_abs_diff(ours, builtin) <= 1e-5  # ...exactly like TFF.


@pytest.mark.fast
def test_fed_sgd_with_one_client_is_one_full_batch_gradient_step():
  task, arrays = helpers.task_and_arrays()
  data = arrays[2]
  sampler = ClientSampler(num_clients=1, clients_per_round=1, epochs=1, seed=0)
  inputs = client_inputs.round_inputs(
    sampler, sampler.round_plan(1), [data], 1, batch_size=-1
  )
  learning_rate = 0.3
  result = helpers.train(
    fedsgd.build_fed_sgd(task.model_fn, learning_rate), task.model_fn, [inputs]
  )

  initial = learning.initial_model_weights(task.model_fn, 0)
  kernel, bias = (tf.Variable(w) for w in initial.trainable)
  with tf.GradientTape() as tape:
    logits = tf.matmul(data['x'], kernel) + bias
    loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(data['y'], logits)
    )
  grads = tape.gradient(loss, [kernel, bias])
  expected = [
    w - learning_rate * g.numpy() for w, g in zip(initial.trainable, grads)
  ]
  for got, want in zip(result.trainable, expected):
    np.testing.assert_allclose(got, want, atol=1e-5)
  assert np.max(np.abs(expected[0] - initial.trainable[0])) > 1e-3


def test_fed_avg_lowers_the_global_training_loss(tmp_path):
  _, rows = helpers.run(
    tmp_path,
    'fedavg',
    algo='fedavg',
    rounds=20,
    clients_per_round=10,
    epochs=20,
  )
  losses = [float(r['train_loss']) for r in rows]
  assert len(losses) == 21  # Round 0 (the initial model) and 20 rounds.
  assert losses[-1] < 0.6 * losses[0]
  assert min(losses[10:]) < min(losses[:5])


def test_same_seed_same_metrics_and_other_seed_other_clients(tmp_path):
  first, _ = helpers.run(tmp_path, 'a', algo='fedavg', seed=7)
  again, _ = helpers.run(tmp_path, 'b', algo='fedavg', seed=7)
  other, _ = helpers.run(tmp_path, 'c', algo='fedavg', seed=8)
  assert first == again
  assert first != other
  plans = [
    [p.client for p in ClientSampler(30, 10, 20, seed).round_plan(1)]
    for seed in (7, 8)
  ]
  assert plans[0] != plans[1]


def test_train_loss_is_the_global_objective_over_all_clients(tmp_path):
  task, arrays = helpers.task_and_arrays()
  _, rows = helpers.run(tmp_path, 'r', algo='fedavg', rounds=1)
  initial = learning.initial_model_weights(task.model_fn, 0)
  kernel, bias = initial.trainable
  x = np.concatenate([a['x'] for a in arrays])
  y = np.concatenate([a['y'] for a in arrays])
  loss = tf.reduce_mean(
    tf.nn.sparse_softmax_cross_entropy_with_logits(y, x @ kernel + bias)
  )
  assert abs(float(rows[0]['train_loss']) - float(loss)) < 1e-4


def _embedding_model_fn():
  """A tiny model whose embedding gradient is sparse (tf.IndexedSlices)."""
  spec = collections.OrderedDict(
    x=tf.TensorSpec([None, 5], tf.int32), y=tf.TensorSpec([None], tf.int32)
  )
  return tff.learning.models.from_keras_model(
    tf.keras.Sequential(
      [
        tf.keras.layers.Embedding(20, 4),
        tf.keras.layers.GlobalAveragePooling1D(),
        tf.keras.layers.Dense(3),
      ]
    ),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=spec,
  )


def test_fed_avg_with_an_embedding_matches_tff_build_weighted_fed_avg():
  rng = np.random.default_rng(0)
  arrays = [
    collections.OrderedDict(
      x=rng.integers(0, 20, size=(n, 5)).astype(np.int32),
      y=rng.integers(0, 3, size=n).astype(np.int32),
    )
    for n in (12, 7, 20)
  ]
  sampler = ClientSampler(num_clients=3, clients_per_round=3, epochs=2, seed=0)
  inputs = client_inputs.round_inputs(
    sampler, sampler.round_plan(1), arrays, 1, 5
  )
  ours = helpers.train(
    fedavg.build_fed_avg(_embedding_model_fn, 0.1),
    _embedding_model_fn,
    [inputs],
  )
  builtin = helpers.train(
    tff.learning.algorithms.build_weighted_fed_avg(
      _embedding_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    ),
    _embedding_model_fn,
    [[client_inputs.as_dataset(i) for i in inputs]],
  )
  initial = learning.initial_model_weights(_embedding_model_fn, 0)
  assert helpers.max_abs_diff(ours, initial) > 1e-3
  assert helpers.max_abs_diff(ours, builtin) <= 1e-5
