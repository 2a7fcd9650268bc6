"""tools/crosscheck/numpy_fedavg.py, the plain-numpy FedAvg / FedProx that
docs/REPRODUCTION.md's cross-check runs: it imports nothing of ours and no
TensorFlow, defines rounds to target as we do, and, given our initial model
and our sampler's draws (the same clients, stragglers and minibatches in
the same order), ends a few rounds at our FedAvg's and FedProx's model to
float32 precision."""

import ast
import collections
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from conftest import SHARED_DATA
from tff_algos.simulation.config import resolve

PATH = REPO / 'tools' / 'crosscheck' / 'numpy_fedavg.py'


def _reference():
  spec = importlib.util.spec_from_file_location('numpy_fedavg', PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


REFERENCE = _reference()
FORBIDDEN = (
  'tensorflow',
  'tensorflow_federated',
  'keras',
  'tff_algos',
  'tasks',
  'jax',
  'torch',
)


def test_the_reference_imports_nothing_of_ours_and_no_tensorflow():
  tree = ast.parse(PATH.read_text())
  imported = [
    alias.name
    for node in ast.walk(tree)
    if isinstance(node, ast.Import)
    for alias in node.names
  ]
  imported += [
    node.module
    for node in ast.walk(tree)
    if isinstance(node, ast.ImportFrom) and node.module
  ]
  assert not [m for m in imported if m.split('.')[0] in FORBIDDEN], imported
  # Nor indirectly: loaded on its own, it pulls in none of them.
  code = (
    'import importlib.util, sys; '
    f'spec = importlib.util.spec_from_file_location("r", "{PATH}"); '
    'm = importlib.util.module_from_spec(spec); '
    'spec.loader.exec_module(m); '
    f'bad = [k for k in sys.modules if k.split(".")[0] in {FORBIDDEN}]; '
    'assert not bad, bad'
  )
  subprocess.run([sys.executable, '-c', code], check=True, cwd='/', timeout=120)


@pytest.mark.fast
def test_rounds_to_target_is_ours():
  from tff_algos.simulation import results

  curves = (
    ([0, 5, 10, 15], [0.1, 0.96, 0.95, 0.98]),
    ([0, 5], [0.5, 0.9]),
    ([0, 5, 10], [0.97, 0.99, 0.5]),
  )
  for rounds, accuracies in curves:
    assert REFERENCE.rounds_to_target(rounds, accuracies, 0.97) == (
      results.rounds_to_target(rounds, accuracies, 0.97)
    )


@pytest.mark.fast
def test_the_reference_gradients_are_the_derivative_of_its_loss():
  rng = np.random.default_rng(0)
  model = REFERENCE.Network((5, 4, 3))
  params = [p.astype(np.float64) for p in model.init(rng)]
  params[1] += 0.1  # Non-zero biases, so every term is exercised.
  x, y = rng.normal(size=(7, 5)), rng.integers(0, 3, 7)
  _, grads = model.loss_and_gradients(params, x, y)
  for i, p in enumerate(params):
    index = tuple(rng.integers(0, s) for s in p.shape)
    shifted = [q.copy() for q in params]
    shifted[i][index] += 1e-6
    numeric = (
      model.loss_and_gradients(shifted, x, y)[0]
      - model.loss_and_gradients(params, x, y)[0]
    ) / 1e-6
    assert abs(numeric - grads[i][index]) < 1e-4


def _ours_and_reference(config, model_fn, reference_model, train_arrays):
  """The global model after each of `config.rounds` rounds: ours (the
  run's loop, as run_experiment.py builds it) and the reference's, fed our
  initial weights and our sampler's draws. Returns [(ours, reference)]."""
  from tff_algos import learning
  from tff_algos.simulation import trainer

  settings = resolve(config)
  loop = trainer.loop_for(settings, model_fn, train_arrays, evaluate=False)
  initial = learning.initial_model_weights(model_fn, config.seed)
  state = loop.initial_state(initial)
  sampler, policy = loop.sampler, settings.policy

  def schedule(round_num):  # Our sampler's draws, as the reference's input.
    work = []
    for plan in sampler.participants(round_num, policy):
      n = len(train_arrays[plan.client]['y'])
      order, ends = sampler.minibatch_schedule(
        round_num, plan.client, n, plan.epochs, config.batch_size
      )
      work.append(REFERENCE.ClientWork(plan.client, np.split(order, ends[:-1])))
    return work

  clients = [(a['x'], a['y'].astype(np.int64)) for a in train_arrays]
  params = [np.asarray(w, np.float32) for w in initial.trainable]
  algorithm = settings.algorithm
  pairs = []
  for round_num in range(1, config.rounds + 1):
    end = loop.step(state, round_num)
    state, row = end.state, end.row
    assert row['participants'] >= 1
    ours = loop.process.get_model_weights(state).trainable
    history = REFERENCE.train(
      reference_model,
      clients,
      (clients[0][0], clients[0][1]),
      algorithm.client_optimizer.learning_rate,
      1,
      lambda _, r=round_num: schedule(r),
      params,
      mu=algorithm.hparams.get('mu', 0.0),
      eval_every=10**9,
    )
    params = history['params']
    pairs.append(([np.asarray(w) for w in ours], params))
  # The models moved: the comparison is not of two untrained models.
  moved = max(
    float(np.abs(a - b).max()) for a, b in zip(pairs[-1][0], initial.trainable)
  )
  assert moved > 1e-2, moved
  return pairs


def _assert_float32_close(pairs):
  worst = 0.0
  for ours, reference in pairs:
    for a, b in zip(ours, reference):
      assert a.shape == b.shape
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)
      worst = max(worst, float(np.abs(a - b).max()))
  print(f'largest difference ours − reference: {worst:.2e}')


@pytest.mark.slow
@pytest.mark.skipif(
  not (SHARED_DATA / 'mnist').is_dir(), reason='needs ../shared/data/mnist'
)
def test_reference_fedavg_2nn_is_ours_on_the_same_minibatches():
  """MNIST 2NN, FedAvg E = 1, B = 10 (a last, smaller batch too), 8 clients
  of 75 MNIST images (the reference reads the IDX files itself), K = 3, 3
  rounds, η = 0.1."""
  from tasks import image_models
  from tff_algos.simulation.config import Config

  x, y, _, _ = REFERENCE.read_mnist(str(SHARED_DATA))
  train_arrays = [
    collections.OrderedDict(
      x=x[i * 75 : (i + 1) * 75], y=y[i * 75 : (i + 1) * 75].astype(np.int32)
    )
    for i in range(8)
  ]
  config = Config(
    algo='fedavg',
    task='mnist_iid_2nn',
    rounds=3,
    clients_per_round=3,
    epochs=1,
    batch_size=10,
    client_lr=0.1,
    seed=4,
  )
  pairs = _ours_and_reference(
    config, image_models.mnist_2nn(), REFERENCE.TWO_NN, train_arrays
  )
  _assert_float32_close(pairs)


@pytest.mark.slow
def test_reference_fedprox_mlr_is_ours_with_stragglers_partial_work():
  """FedProx μ = 1 on Synthetic(1,1) devices (cut to ≤ 90 samples), MLR,
  E = 3, B = 10, K = 4 with 50% stragglers whose partial work is kept,
  3 rounds, η = 0.05."""
  from tasks import models
  from tasks import synthetic
  from tff_algos.simulation.config import Config

  xs, ys = synthetic.generate(1.0, 1.0, False, seed=0, num_devices=7)
  train_arrays = [
    collections.OrderedDict(x=x[:90], y=y[:90]) for x, y in zip(xs, ys)
  ]
  config = Config.create(
    algo='fedprox',
    task='synthetic_1_1',
    rounds=3,
    clients_per_round=4,
    epochs=3,
    batch_size=10,
    client_lr=0.05,
    mu=1.0,
    straggler_fraction=0.5,
    seed=1,
  )
  assert resolve(config).policy.value == 'partial'
  pairs = _ours_and_reference(
    config,
    models.multinomial_logistic_regression(60, 10),
    REFERENCE.mlr(60, 10),
    train_arrays,
  )
  _assert_float32_close(pairs)


@pytest.mark.fast
def test_last_half_mean_is_ours():
  from tff_algos.simulation import results

  rounds, values = [0, 50, 100, 150, 200], [0.1, 0.5, 0.6, 0.7, 0.8]
  assert REFERENCE.last_half_mean(rounds, values, 200) == pytest.approx(
    results.last_half_mean(rounds, values, 200)
  )
