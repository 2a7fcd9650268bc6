"""FedAvg's Figure 1: the loss between two models' weights, and its command.

The main tests run on tiny data made here (a 2NN on 200 examples of 10
noisy prototypes); one checks the paper's observation on the real MNIST
(`shared_data` skips it without ../shared/data).
"""

import collections
import csv
import gzip
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from conftest import REPO
from conftest import USER_ENV
import helpers
import tasks
from tasks import image_models
from tasks import mnist
from tff_algos import interpolate
from tff_algos import learning
from tff_algos.analysis import interpolation
from tff_algos.simulation import evaluation

PROGRAM = 'python -m tff_algos.interpolate'
MODEL_FN = image_models.mnist_2nn(pixels=True)
# 3 passes over 30 examples, the last one partial (7 updates of 10).
TINY_SGD = interpolation.SgdSettings(
  examples=30, updates=7, batch_size=10, learning_rate=0.1
)
POINTS = 8  # θ = −0.2, 0, 0.2, …, 1.2; 0.5 is added.


def _prototype_data(n, seed):
  """(uint8 images [n, 784], int32 labels): each a noisy copy of its class's
  random prototype, so that SGD has something to learn."""
  rng = np.random.default_rng(seed)
  prototypes = np.random.default_rng(99).integers(0, 256, (10, 784))
  y = rng.integers(0, 10, n).astype(np.int32)
  x = np.clip(prototypes[y] + rng.normal(0, 60, (n, 784)), 0, 255)
  return x.astype(np.uint8), y


def _tiny_clients(seed=0, clients=5, per_client=40):
  x, y = _prototype_data(clients * per_client, seed)
  return [
    collections.OrderedDict(x=x[i::clients], y=y[i::clients])
    for i in range(clients)
  ]


@pytest.fixture(scope='module')
def tiny():
  clients = _tiny_clients()
  curves = interpolation.interpolation_curves(
    MODEL_FN, clients, seed=3, points=POINTS, settings=TINY_SGD
  )
  return clients, curves


def _numpy_loss(weights, clients):
  """Mean cross-entropy of the 2NN over all clients' examples, in float64
  numpy: an evaluation that shares no code with the package's."""
  k1, b1, k2, b2, k3, b3 = (
    np.asarray(w, np.float64) for w in weights.trainable
  )
  x = np.concatenate([c['x'] for c in clients]).astype(np.float64) / 255
  y = np.concatenate([c['y'] for c in clients])
  h = np.maximum(np.maximum(x @ k1 + b1, 0) @ k2 + b2, 0)
  logits = h @ k3 + b3
  top = logits.max(axis=1, keepdims=True)
  log_norm = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
  return float(np.mean(log_norm - logits[np.arange(len(y)), y]))


def _same_weights(a, b):
  return all(
    np.array_equal(x, y) for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b))
  )


# ------------------------------------------------------------ the curve


@pytest.mark.fast
def test_the_ends_of_the_curve_are_the_parents_exactly(tiny):
  clients, curves = tiny
  evaluate = evaluation.build_evaluation(MODEL_FN)  # Not the curve's.
  for curve in curves.values():
    assert _same_weights(
      interpolation.mix(curve.w, curve.w_prime, 1.0), curve.w
    )
    assert _same_weights(
      interpolation.mix(curve.w, curve.w_prime, 0.0), curve.w_prime
    )
    loss_w = float(evaluate(curve.w, clients)['loss'])
    loss_w_prime = float(evaluate(curve.w_prime, clients)['loss'])
    assert curve.loss_at(1.0) == loss_w
    assert curve.loss_at(0.0) == loss_w_prime
    assert loss_w != loss_w_prime
    # Over all 200 examples, the mean cross-entropy.
    np.testing.assert_allclose(loss_w, _numpy_loss(curve.w, clients), rtol=1e-5)
    np.testing.assert_allclose(
      loss_w_prime, _numpy_loss(curve.w_prime, clients), rtol=1e-5
    )


def test_every_point_is_the_loss_of_the_mixture_there(tiny):
  clients, curves = tiny
  curve = curves[interpolation.INDEPENDENT]
  for theta, loss in zip(curve.thetas, curve.losses):
    mixed = interpolation.mix(curve.w, curve.w_prime, theta)
    np.testing.assert_allclose(loss, _numpy_loss(mixed, clients), rtol=1e-5)


def test_the_mixture_is_linear_in_the_weights(tiny):
  _, curves = tiny
  curve = curves[interpolation.INDEPENDENT]
  w, w_prime = curve.w, curve.w_prime
  for theta in (-0.2, 0.25, 0.5, 0.9, 1.2):
    mixed = interpolation.mix(w, w_prime, theta)
    for m, a, b in zip(
      tf.nest.flatten(mixed), tf.nest.flatten(w), tf.nest.flatten(w_prime)
    ):
      assert m.dtype == np.float32
      want = theta * a.astype(np.float64) + (1 - theta) * b.astype(np.float64)
      np.testing.assert_allclose(m, want, rtol=1e-6, atol=1e-7)
  # Equal steps in θ are equal steps in the weights, along w − w′.
  step = [
    m1.astype(np.float64) - m0
    for m1, m0 in zip(
      tf.nest.flatten(interpolation.mix(w, w_prime, 0.7)),
      tf.nest.flatten(interpolation.mix(w, w_prime, 0.2)),
    )
  ]
  for s, a, b in zip(step, tf.nest.flatten(w), tf.nest.flatten(w_prime)):
    np.testing.assert_allclose(s, 0.5 * (a.astype(np.float64) - b), atol=1e-6)


@pytest.mark.fast
def test_theta_grid_is_the_papers_with_exact_parents():
  grid = interpolation.theta_grid(50)
  assert len(grid) == 50 and grid[0] == -0.2 and grid[-1] == 1.2
  np.testing.assert_allclose(np.diff(grid), 1.4 / 49, rtol=1e-9)
  assert 0.0 in grid and 1.0 in grid and 0.5 not in grid
  assert not np.signbit(grid[grid == 0.0]).any()  # No −0 in the CSV.
  thetas = interpolation.evaluated_thetas(50)
  assert len(thetas) == 51 and 0.5 in thetas and np.all(np.diff(thetas) > 0)
  with pytest.raises(ValueError, match='points'):
    interpolation.theta_grid(1)


def test_curves_hold_every_theta_and_the_key_points(tiny):
  _, curves = tiny
  assert list(curves) == [interpolation.INDEPENDENT, interpolation.SHARED]
  for curve in curves.values():
    np.testing.assert_array_equal(
      curve.thetas, interpolation.evaluated_thetas(POINTS)
    )
    assert np.all(np.isfinite(curve.losses))
    theta, loss = curve.minimum
    assert loss == curve.losses.min() and curve.loss_at(theta) == loss
    assert curve.best_parent_loss == min(curve.loss_at(0), curve.loss_at(1))
    with pytest.raises(KeyError):
      curve.loss_at(0.3)


# ---------------------------------------------- the two cases, the seed


def test_the_cases_differ_only_in_the_initialization_of_w_prime(tiny):
  _, curves = tiny
  independent = curves[interpolation.INDEPENDENT]
  shared = curves[interpolation.SHARED]
  first, second = independent.initialization_seeds
  assert first != second and shared.initialization_seeds == (first, first)
  assert _same_weights(independent.w, shared.w)  # Same init, data, order.
  assert not _same_weights(independent.w_prime, shared.w_prime)
  assert independent.loss_at(1.0) == shared.loss_at(1.0)


def test_same_seed_same_curves_another_seed_other_draws(tiny):
  clients, curves = tiny
  again = interpolation.interpolation_curves(
    MODEL_FN, clients, seed=3, points=POINTS, settings=TINY_SGD
  )
  for case, curve in curves.items():
    np.testing.assert_array_equal(again[case].losses, curve.losses)
    assert _same_weights(again[case].w, curve.w)
    assert _same_weights(again[case].w_prime, curve.w_prime)
  # Every draw of another seed differs: datasets, initializations, orders.
  assert interpolation.initialization_seeds(
    4
  ) != interpolation.initialization_seeds(3)
  assert not np.array_equal(
    interpolation.disjoint_subsets(200, 2, 30, 4)[0],
    interpolation.disjoint_subsets(200, 2, 30, 3)[0],
  )
  assert not np.array_equal(
    interpolation.sgd_schedule(TINY_SGD, 4, 0)[0],
    interpolation.sgd_schedule(TINY_SGD, 3, 0)[0],
  )


def test_datasets_are_disjoint_seeded_and_of_the_papers_size():
  first = interpolation.disjoint_subsets(60_000, 2, 600, seed=0)
  assert [len(s) for s in first] == [600, 600]
  assert not set(first[0]) & set(first[1])
  assert all(s.min() >= 0 and s.max() < 60_000 for s in first)
  again = interpolation.disjoint_subsets(60_000, 2, 600, seed=0)
  other = interpolation.disjoint_subsets(60_000, 2, 600, seed=1)
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not np.array_equal(first[0], other[0])
  with pytest.raises(ValueError, match='need 1200'):
    interpolation.disjoint_subsets(1000, 2, 600, seed=0)


@pytest.mark.fast
def test_papers_schedule_240_updates_of_50_in_20_passes():
  settings = interpolation.PAPER_SGD
  assert (
    settings.examples,
    settings.updates,
    settings.batch_size,
    settings.learning_rate,
    settings.epochs,
  ) == (600, 240, 50, 0.1, 20)
  order, ends = interpolation.sgd_schedule(settings, seed=0, model_index=0)
  assert len(ends) == 240 and np.all(np.diff(ends, prepend=0) == 50)
  for epoch in np.split(order, 20):  # Each pass sees every example once.
    np.testing.assert_array_equal(np.sort(epoch), np.arange(600))
  assert not np.array_equal(order[:600], order[600:1200])
  other, _ = interpolation.sgd_schedule(settings, seed=0, model_index=1)
  assert not np.array_equal(order, other)


def test_schedule_cut_after_the_last_update():
  # 25 examples in batches of 10: passes of 10, 10, 5; 7 updates = 2 passes
  # and the first batch of a third.
  settings = interpolation.SgdSettings(25, 7, 10, 0.1)
  order, ends = interpolation.sgd_schedule(settings, seed=0, model_index=0)
  np.testing.assert_array_equal(ends, [10, 20, 25, 35, 45, 50, 60])
  assert len(order) == 60


# ---------------------------------------------------------- the training


def _tiny_batch_data(n=30):
  x, y = _prototype_data(n, seed=5)
  return collections.OrderedDict(x=tf.constant(x), y=tf.constant(y)), x, y


def test_trainer_takes_one_plain_sgd_step_per_minibatch():
  data, x, y = _tiny_batch_data()
  initial = learning.initial_model_weights(MODEL_FN, 0)
  order = np.random.default_rng(0).permutation(30).astype(np.int32)
  ends = np.array([10, 30], np.int32)  # Minibatches of 10 and 20.
  got = interpolation.SgdTrainer(MODEL_FN)(initial, data, order, ends, 0.1)
  # The same two steps with a Keras model of the same architecture.
  keras_model = tf.keras.Sequential(
    [
      tf.keras.Input([784]),
      tf.keras.layers.Dense(200, activation='relu'),
      tf.keras.layers.Dense(200, activation='relu'),
      tf.keras.layers.Dense(10),
    ]
  )
  keras_model.set_weights(initial.trainable)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  for rows in (order[:10], order[10:30]):
    with tf.GradientTape() as tape:
      loss = loss_fn(y[rows], keras_model(x[rows].astype(np.float32) / 255))
    gradients = tape.gradient(loss, keras_model.trainable_variables)
    for variable, gradient in zip(keras_model.trainable_variables, gradients):
      variable.assign_sub(0.1 * gradient)
  assert not _same_weights(got.trainable, initial.trainable)
  for a, b in zip(got.trainable, keras_model.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The order is the schedule's: other minibatches, another model.
  other = interpolation.SgdTrainer(MODEL_FN)(
    initial, data, order[::-1].copy(), ends, 0.1
  )
  assert not _same_weights(other.trainable, got.trainable)


@pytest.mark.slow  # Builds and runs a TFF computation.
def test_trainer_equals_the_packages_fedavg_client_update():
  """With μ = 0 and plain SGD the package's client work is FedAvg's
  ClientUpdate: on the same schedule it ends at the same model."""
  data, x, y = _tiny_batch_data()
  initial = learning.initial_model_weights(MODEL_FN, 1)
  order, ends = interpolation.sgd_schedule(TINY_SGD, seed=2, model_index=0)
  got = interpolation.SgdTrainer(MODEL_FN)(initial, data, order, ends, 0.1)
  work = learning.build_proximal_sgd_client_work(
    MODEL_FN, tff.learning.optimizers.build_sgdm(learning_rate=0.1), mu=0.0
  )
  output = work.next(
    work.initialize(),
    [initial],
    [
      [
        collections.OrderedDict(
          data=collections.OrderedDict(x=x, y=y),
          example_order=order,
          batch_ends=ends,
        )
      ]
    ],
  )
  update = output.result[0].update
  assert int(output.measurements['local_steps']) == TINY_SGD.updates
  for w, w0, u in zip(got.trainable, initial.trainable, update):
    np.testing.assert_allclose(w, w0 - u, rtol=1e-5, atol=1e-6)


# ------------------------------------------------ the paper's observation


@pytest.mark.slow
def test_the_papers_observation_on_mnist(shared_data):
  task = tasks.load_task('mnist_iid_2nn', seed=0, data_dir=str(shared_data))
  clients = tasks.client_arrays(task.train)
  assert sum(len(c['y']) for c in clients) == 60_000
  curves = interpolation.interpolation_curves(
    task.model_fn, clients, seed=0, points=2
  )
  independent = curves[interpolation.INDEPENDENT]
  shared = curves[interpolation.SHARED]
  # Shared initialization: the average beats both parents.
  assert shared.loss_at(0.5) < shared.best_parent_loss
  # Different initializations: the average is much worse than either.
  assert independent.loss_at(0.5) > 1.5 * max(
    independent.loss_at(0.0), independent.loss_at(1.0)
  )


# -------------------------------------------------------------- the command


def _fail(argv, capsys):
  with pytest.raises(SystemExit) as exit_info:
    interpolate.main(['interpolate', *argv])
  assert exit_info.value.code == 2
  out, err = capsys.readouterr()
  assert out == ''
  lines = err.splitlines()
  assert len(lines) == 1, err
  assert lines[0].startswith(f'{PROGRAM}: error: ')
  return lines[0]


@pytest.mark.parametrize(
  'argv, message',
  [
    pytest.param([], '--out is required', marks=pytest.mark.fast),
    (['--out={tmp}/fig.txt'], 'must end in .png'),
    (['--out={tmp}/fig.png', '--points=1'], '--points must be in 2..'),
    (['--out={tmp}/fig.png', '--points=many'], 'points'),
    (['--out={tmp}/fig.png', '--seed=-1'], '--seed must be >= 0'),
    (['--out={tmp}'], 'is a folder'),
    (['--out={tmp}/a_file/fig.png'], 'is a file, not a folder'),
    (['--out={tmp}/fig.png', '--csv={tmp}/fig.png'], 'the same file'),
    (['--out={tmp}/fig.png', '--csv='], '--csv is empty'),
    (['--out={tmp}/fig.png', '--csv={tmp}'], '--csv={tmp} is a folder'),
    pytest.param(
      ['--out={tmp}/fig.png', '--data_dir={tmp}/none'],
      'is not a folder',
      marks=pytest.mark.fast,
    ),
    (['--out={tmp}/fig.png', '--no_such_flag=1'], 'no_such_flag'),
    (['--out={tmp}/fig.png', 'stray'], 'unexpected arguments: stray'),
  ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
  (tmp_path / 'a_file').write_text('')
  line = _fail([a.format(tmp=tmp_path) for a in argv], capsys)
  assert message.format(tmp=tmp_path) in line
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']


def _write_idx(path, array, magic):
  header = np.array([magic, *array.shape], '>u4').tobytes()
  with gzip.open(path, 'wb', compresslevel=1) as f:
    f.write(header + array.astype(np.uint8).tobytes())


def _small_mnist(root, n_train=1400, n_test=100):
  """MNIST's four files with `n_train` prototype images (the task splits
  them over 100 clients, so 200 must divide it; the paper's two samples
  need 1,200)."""
  folder = root / 'mnist'
  folder.mkdir(parents=True)
  for split, n in (('train', n_train), ('t10k', n_test)):
    x, y = _prototype_data(n, seed=n)
    _write_idx(
      folder / f'{split}-images-idx3-ubyte.gz',
      x.reshape(n, 28, 28),
      mnist.IMAGE_MAGIC,
    )
    _write_idx(folder / f'{split}-labels-idx1-ubyte.gz', y, mnist.LABEL_MAGIC)
  return root


@pytest.mark.slow
def test_command_writes_figure_and_csv_and_leaves_no_process(tmp_path):
  data_dir = _small_mnist(tmp_path / 'data')
  out, table = tmp_path / 'out' / 'fig.png', tmp_path / 'out' / 'curve.csv'
  result, left = helpers.run_and_reap(
    [
      sys.executable,
      '-m',
      'tff_algos.interpolate',
      f'--data_dir={data_dir}',
      f'--out={out}',
      f'--csv={table}',
      '--points=8',
      '--seed=1',
    ],
    tmp_path,
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  assert left == []  # No TFF worker (nor anything else) left running.
  assert result.stdout.splitlines()[-1] == f'wrote {out} and {table}'
  assert 'training set: 1,400 examples' in result.stdout
  assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  with open(table) as f:
    rows = list(csv.DictReader(f))
  assert [r['case'] for r in rows] == ['independent'] * 9 + ['shared'] * 9
  thetas = [float(r['theta']) for r in rows[:9]]
  assert thetas == [-0.2, 0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2]
  losses = {(r['case'], float(r['theta'])): float(r['loss']) for r in rows}
  assert losses[('independent', 1.0)] == losses[('shared', 1.0)]  # w
  assert all(np.isfinite(v) and v > 0 for v in losses.values())
  assert sorted(os.listdir(out.parent)) == ['curve.csv', 'fig.png']


@pytest.mark.slow
def test_command_missing_mnist_is_one_line_and_exit_2(tmp_path):
  result = subprocess.run(
    [
      sys.executable,
      '-m',
      'tff_algos.interpolate',
      f'--data_dir={tmp_path}',
      f'--out={tmp_path}/fig.png',
    ],
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 2
  assert result.stdout == ''
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith(
    f'{PROGRAM}: error: MNIST needs the four files'
  )
  assert not (tmp_path / 'fig.png').exists()
