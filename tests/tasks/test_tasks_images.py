"""Image tasks: MNIST, CIFAR-10, FEMNIST/EMNIST loaders, partitions, models.

Real-data tests use ../shared/data (skipped without it) and cache loaded
tasks; every loader also runs on tiny files written here in its format.
"""

import collections
import csv
import functools
import gzip
import io
import json
import os
import pickle
import sqlite3
import tarfile

import numpy as np
import pytest

from conftest import SHARED_DATA
import tasks
from tasks import cifar10
from tasks import femnist
from tasks import image_models
from tasks import mnist
from tff_algos.simulation import client_inputs
from tff_algos.simulation import evaluation
from tff_algos.simulation import experiment
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve
from tff_algos.simulation.sampling import ClientSampler

ALL_SPLITS = {**mnist.SPLITS, **cifar10.SPLITS, **femnist.SPLITS}


@functools.cache
def shared_splits(name):
  return ALL_SPLITS[name](str(SHARED_DATA), 0)


@functools.cache
def shared_task(name):
  """The TASKS loader's task, built from the cached arrays."""
  return image_models.as_task(shared_splits(name))


def shared_arrays(name, split='train'):
  """Per-client arrays (reading every client's ClientData is slow for 1,000
  clients, so statistics use the arrays; test_client_data_matches_arrays
  checks the ClientData against them)."""
  return list(getattr(shared_splits(name), split).values())


def _sizes(arrays):
  return np.array([len(a['y']) for a in arrays])


def _num_labels(arrays):
  return np.array([len(np.unique(a['y'])) for a in arrays])


def _num_params(model_fn):
  import tensorflow as tf

  with tf.Graph().as_default():
    model = model_fn()
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


# ------------------------------------------------------------------ models


@pytest.mark.fast
def test_model_parameter_counts():
  assert _num_params(image_models.mnist_2nn()) == 199_210
  assert _num_params(image_models.mnist_cnn()) == 1_663_370
  assert _num_params(image_models.mnist_cnn(62)) == 1_690_046
  assert _num_params(image_models.cifar_cnn()) == 1_068_298
  assert _num_params(image_models.mlr(784, 10)) == 7_850
  assert _num_params(image_models.mnist_cnn(62, pixels=True)) == 1_690_046
  assert _num_params(image_models.mlr(784, 10, pixels=True)) == 7_850


def test_scale_pixels_is_numpys_division_in_a_graph():
  # In a graph TensorFlow rewrites x / 255.0 as x * (1 / 255), which
  # differs from the division for some pixel values.
  import tensorflow as tf

  pixels = np.arange(256, dtype=np.uint8)
  expected = pixels.astype(np.float32) / 255.0
  scaled = tf.function(
    image_models.scale_pixels, input_signature=[tf.TensorSpec([None], tf.uint8)]
  )(pixels).numpy()
  assert scaled.dtype == np.float32
  np.testing.assert_array_equal(
    scaled.view(np.uint32), expected.view(np.uint32)
  )
  divided = tf.function(lambda x: tf.cast(x, tf.float32) / 255.0)(pixels)
  assert (divided.numpy() != expected).any()  # Why not a plain division.


@pytest.mark.parametrize(
  'builder, shape',
  [
    (lambda pixels: image_models.mlr(784, 10, pixels=pixels), (784,)),
    (lambda pixels: image_models.mnist_2nn(pixels=pixels), (784,)),
    (lambda pixels: image_models.mnist_cnn(62, pixels=pixels), (28, 28, 1)),
  ],
)
def test_pixel_models_match_float_models(builder, shape):
  """A model on uint8 pixels gives bit for bit the logits and gradients
  of the float model on NumPy's pixels / 255, with the same initial
  weights for a seed."""
  import tensorflow as tf

  from tff_algos.learning import composition

  pixels = np.random.default_rng(0).integers(0, 256, (5,) + shape, np.uint8)
  batch = {
    True: dict(x=pixels, y=np.arange(5, dtype=np.int32)),
    False: dict(
      x=pixels.astype(np.float32) / 255.0, y=np.arange(5, dtype=np.int32)
    ),
  }
  results = {}
  for raw in (True, False):
    model_fn = builder(raw)
    weights = composition.initial_model_weights(model_fn, seed=3)
    model = model_fn()
    assert model.input_spec['x'].dtype == (tf.uint8 if raw else tf.float32)
    for variable, value in zip(model.trainable_variables, weights.trainable):
      variable.assign(value)
    with tf.GradientTape() as tape:
      output = model.forward_pass(batch[raw], training=True)
    gradients = tape.gradient(output.loss, model.trainable_variables)
    results[raw] = (
      [w for w in weights.trainable]
      + [output.predictions.numpy(), output.loss.numpy()]
      + [g.numpy() for g in gradients]
    )
  for a, b in zip(results[True], results[False]):
    np.testing.assert_array_equal(a, b)


def test_cifar_preprocessing_random_in_training_centre_crop_in_eval():
  layer = image_models.CifarPreprocessing()
  x = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), np.uint8)
  a, b = layer(x, training=False).numpy(), layer(x, training=False).numpy()
  np.testing.assert_array_equal(a, b)
  assert a.shape == (3, 24, 24, 3)
  np.testing.assert_allclose(a.mean(axis=(1, 2, 3)), 0, atol=1e-4)
  c = layer(x, training=True).numpy()
  assert c.shape == (3, 24, 24, 3) and not np.allclose(a, c)


# ------------------------------------------------------- real data (shared)


def test_mnist_iid_statistics(shared_data):
  del shared_data
  train, test = (
    shared_arrays('mnist_iid_2nn'),
    shared_arrays('mnist_iid_2nn', 'test'),
  )
  assert len(train) == len(test) == 100
  assert set(_sizes(train)) == {600} and set(_sizes(test)) == {100}
  counts = np.array([np.bincount(a['y'], minlength=10) for a in train])
  assert counts.min() >= 25 and counts.max() <= 100  # ≈ 60 each.
  # Raw pixels: the model scales them (test_pixel_models_match_float_models).
  assert train[0]['x'].shape == (600, 784) and train[0]['x'].dtype == np.uint8
  assert train[0]['x'].max() > 200


def test_mnist_pathological_statistics(shared_data):
  del shared_data
  train = shared_arrays('mnist_pathological_2nn')
  assert len(train) == 100 and set(_sizes(train)) == {600}
  labels = _num_labels(train)
  # FedAvg's 300-image shards of label-sorted data: a shard straddles a label
  # boundary at most 9 times, so all but ≤ 9 clients hold ≤ 2 labels.
  assert labels.max() <= 4 and np.sum(labels > 2) <= 9
  assert np.median(labels) == 2
  total = np.bincount(np.concatenate([a['y'] for a in train]))
  assert total.sum() == 60_000 and total[1] == 6_742  # MNIST's count of 1s.


def test_mnist_powerlaw_statistics(shared_data):
  del shared_data
  train = shared_arrays('mnist_powerlaw')
  test = shared_arrays('mnist_powerlaw', 'test')
  assert len(train) == len(test) == 1000
  sizes = _sizes(train) + _sizes(test)
  assert 68_500 <= sizes.sum() <= 70_000  # FedProx Table 1: 69,035.
  assert _sizes(train).sum() == sum(int(0.9 * n) for n in sizes)
  assert _num_labels(train).max() <= 2 and sizes.min() >= 10
  assert sizes.max() > 10 * np.median(sizes)  # Power law.


def test_cifar10_statistics(shared_data):
  del shared_data
  train, test = shared_arrays('cifar10'), shared_arrays('cifar10', 'test')
  assert len(train) == len(test) == 100
  assert set(_sizes(train)) == {500} and set(_sizes(test)) == {100}
  for a in train:
    assert set(np.bincount(a['y'], minlength=10)) == {50}
  assert train[0]['x'].shape == (500, 32, 32, 3)
  assert train[0]['x'].dtype == np.uint8
  assert 'lossy JPEG' in shared_task('cifar10').description


def test_femnist_statistics(shared_data):
  del shared_data
  task = shared_task('femnist')
  train, test = shared_arrays('femnist'), shared_arrays('femnist', 'test')
  assert len(train) == len(test) == 396
  assert _sizes(train).sum() == 54_026 and _sizes(test).sum() == 6_201
  assert train[0]['x'].shape[1:] == (28, 28, 1)
  assert 'PARTIAL' in task.description


def test_femnist_fedprox_statistics(shared_data):
  del shared_data
  train = shared_arrays('femnist_fedprox')
  test = shared_arrays('femnist_fedprox', 'test')
  assert len(train) == len(test) == 200
  labels = [
    np.unique(np.concatenate([a['y'], b['y']])) for a, b in zip(train, test)
  ]
  assert max(len(y) for y in labels) <= 5
  assert all(y.min() >= 0 and y.max() <= 9 for y in labels)
  total = (_sizes(train) + _sizes(test)).sum()
  assert 2_000 <= total <= 3_250  # All 3,250 a-j images of the sample.
  assert train[0]['x'].shape[1:] == (784,)


def test_leaf_sample_json_matches_the_npz(shared_data, tmp_path):
  folder = tmp_path / 'femnist'
  for split in ('train', 'test'):
    (folder / split).mkdir(parents=True)
    name = f'all_data_35_niid_05_keep_0_{split}_9.json'
    os.symlink(
      shared_data / 'femnist' / 'leaf_sample' / name, folder / split / name
    )
  from_json, source = femnist.load_writers(str(tmp_path))
  assert 'LEAF JSON' in source and len(from_json) == 5
  from_npz, _ = femnist.load_writers(str(shared_data))
  for writer, pairs in from_json.items():
    for (x, y), (x2, y2) in zip(pairs, from_npz[writer]):
      np.testing.assert_array_equal(x, x2)
      np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize('name', ['mnist_powerlaw', 'cifar10', 'femnist'])
def test_client_data_matches_arrays(name, shared_data):
  del shared_data
  splits, task = shared_splits(name), shared_task(name)
  assert task.name == name and task.description == splits.description
  for split in ('train', 'test'):
    arrays = getattr(splits, split)
    client_data = getattr(task, split)
    assert list(client_data.client_ids) == list(arrays)
    for client in list(arrays)[::97]:
      got = next(
        iter(
          client_data.create_tf_dataset_for_client(client)
          .batch(10_000)
          .as_numpy_iterator()
        )
      )
      np.testing.assert_array_equal(got['x'], arrays[client]['x'])
      np.testing.assert_array_equal(got['y'], arrays[client]['y'])


LEARNING_RATES = dict(mnist_powerlaw=0.03, femnist_fedprox=0.003)  # FedProx's


def _one_round(name):
  """One FedAvg round on 2 clients; (loss before, loss after) on them."""
  task = shared_task(name)
  arrays = shared_arrays(name)
  config = Config(
    algo='fedavg',
    rounds=1,
    clients_per_round=2,
    epochs=1,
    batch_size=50,
    client_lr=LEARNING_RATES.get(name, 0.05),
  )
  settings = resolve(config)
  process = trainer.build_process(settings, task.model_fn)
  sampler = ClientSampler(len(arrays), 2, 1, 0, 0.0)
  plans = sampler.participants(1, settings.policy)
  evaluate = evaluation.build_evaluation(task.model_fn)
  chosen = [arrays[p.client] for p in plans]
  state = process.initialize()
  before = evaluate(process.get_model_weights(state), chosen)['loss']
  state = process.next(
    state, client_inputs.round_inputs(sampler, plans, arrays, 1, 50)
  ).state
  after = evaluate(process.get_model_weights(state), chosen)['loss']
  return before, after


@pytest.mark.parametrize(
  'name',
  [
    'mnist_iid_2nn',
    'mnist_pathological_cnn',
    'mnist_powerlaw',
    'cifar10',
    'femnist',
    'femnist_fedprox',
  ],
)
def test_one_round_trains(name, shared_data):
  del shared_data
  before, after = _one_round(name)
  assert np.isfinite(after)
  if name != 'cifar10':  # 10 augmented steps need not lower CIFAR's loss.
    assert after < before


# ------------------------------------------------------ tiny MNIST files


def _write_idx(path, array, magic):
  header = np.array([magic, *array.shape], '>u4').tobytes()
  with gzip.open(path, 'wb', compresslevel=1) as f:
    f.write(header + array.astype(np.uint8).tobytes())


def _tiny_mnist(root, n_train=11_000, n_test=1_000):
  folder = root / 'mnist'
  folder.mkdir(parents=True, exist_ok=True)
  for n, images, labels in (
    (n_train, 'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
    (n_test, 't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
  ):
    y = np.arange(n) % 10
    x = np.broadcast_to((y * 25)[:, None, None], (n, 28, 28))
    _write_idx(folder / images, x, mnist.IMAGE_MAGIC)
    _write_idx(folder / labels, y, mnist.LABEL_MAGIC)
  return folder


@functools.cache
def _tiny_mnist_dir(tmp_root):
  import pathlib

  _tiny_mnist(pathlib.Path(tmp_root))
  return tmp_root


@pytest.fixture
def tiny_mnist(tmp_path_factory):
  return _tiny_mnist_dir(str(tmp_path_factory.getbasetemp() / 'tiny_mnist'))


@pytest.mark.slow
def test_tiny_mnist_fedavg_tasks_and_one_run(tmp_path):
  _tiny_mnist(tmp_path, n_train=2_000, n_test=1_000)
  tiny_mnist = str(tmp_path)
  task = mnist.TASKS['mnist_iid_2nn'](tiny_mnist, 3)
  train = tasks.client_arrays(task.train)
  assert len(train) == 100 and set(_sizes(train)) == {20}
  # Pixels kept raw (uint8), the model scales them.
  np.testing.assert_array_equal(train[0]['x'][:, 0], train[0]['y'] * 25)
  again = tasks.client_arrays(mnist.TASKS['mnist_iid_2nn'](tiny_mnist, 3).train)
  np.testing.assert_array_equal(train[5]['y'], again[5]['y'])

  patho = mnist.TASKS['mnist_pathological'](tiny_mnist, 0)
  arrays = tasks.client_arrays(patho.train)
  assert arrays[0]['x'].shape == (20, 28, 28, 1)
  assert patho.name == 'mnist_pathological' and 'CNN' in patho.description
  assert _num_labels(arrays).max() <= 2  # 200 per label: shards of 10.

  out = tmp_path / 'run'
  experiment.run(
    Config(
      algo='fedavg',
      rounds=1,
      clients_per_round=2,
      epochs=1,
      batch_size=50,
      client_lr=0.1,
    ),
    task,
    str(out),
    show_progress=False,
  )
  with open(out / 'metrics.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['0', '1']
  assert float(rows[1]['train_loss']) < float(rows[0]['train_loss'])


@pytest.mark.fast
def test_tiny_mnist_powerlaw(tiny_mnist):
  task = mnist.TASKS['mnist_powerlaw'](tiny_mnist, 0)
  assert len(task.train.client_ids) == 1000
  labels = np.arange(12_000) % 10
  devices = mnist.powerlaw_split(labels, 1000, np.random.default_rng(0))
  for u in (0, 7, 999):
    assert set(labels[devices[u]]) == {u % 10, (u + 1) % 10}
  used = np.concatenate(devices)
  assert len(np.unique(used)) == len(used) <= 12_000
  x = tasks.client_arrays(
    task.train.from_clients_and_tf_fn(
      task.train.client_ids[:1], task.train.serializable_dataset_fn
    )
  )[0]['x']
  assert x.shape[1:] == (784,)


def test_mnist_missing_files_name_them(tmp_path):
  with pytest.raises(tasks.DataError) as e:
    mnist.TASKS['mnist_iid'](str(tmp_path), 0)
  for name in mnist.FILES.values():
    assert name in str(e.value)


@pytest.mark.parametrize('damage', ['truncate', 'magic', 'not_gzip', 'count'])
def test_mnist_corrupt_files_raise(tmp_path, damage):
  folder = _tiny_mnist(tmp_path, n_train=200, n_test=100)
  path = folder / 't10k-images-idx3-ubyte.gz'
  if damage == 'truncate':  # A cut-off gzip stream.
    path.write_bytes(path.read_bytes()[:-30])
  elif damage == 'not_gzip':
    path.write_bytes(b'<html>not found</html>')
  elif damage == 'magic':
    _write_idx(path, np.zeros((100, 28, 28)), mnist.LABEL_MAGIC)
  else:  # Header count larger than the data (truncated before gzip).
    with gzip.open(path, 'wb') as f:
      f.write(
        np.array([mnist.IMAGE_MAGIC, 100, 28, 28], '>u4').tobytes()
        + bytes(99 * 784)
      )
  with pytest.raises(tasks.DataError, match='t10k-images'):
    mnist.load_arrays(str(tmp_path))


# ------------------------------------------------------ tiny CIFAR-10 files


def _tiny_cifar_images(n, seed=0):
  rng = np.random.default_rng(seed)
  y = np.arange(n) % 10
  x = rng.integers(0, 256, (n, 8, 8, 3)).repeat(4, 1).repeat(4, 2)
  return x.astype(np.uint8), y  # 4×4 blocks: JPEG keeps them well.


def _write_jpeg_tar(path, x, y, corrupt=False):
  from PIL import Image

  counters = collections.Counter()
  with tarfile.open(path, 'w') as tar:
    for image, label in zip(x, y):
      buf = io.BytesIO()
      Image.fromarray(image).save(buf, format='JPEG', quality=95)
      data = buf.getvalue()
      if corrupt and counters[label] == 1:
        data = b'garbage' * 10
      info = tarfile.TarInfo(
        f'{cifar10.CLASSES[label]}/{counters[label]:04d}.jpg'
      )
      counters[label] += 1
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))


def _write_pickles(folder, x, y, x_test, y_test):
  folder.mkdir(parents=True)
  chunks = np.array_split(np.arange(len(y)), 5)
  for i, idx in enumerate(chunks):
    _dump(folder / f'data_batch_{i + 1}', x[idx], y[idx])
  _dump(folder / 'test_batch', x_test, y_test)


def _dump(path, x, y):
  with open(path, 'wb') as f:
    pickle.dump(
      {
        b'data': x.transpose(0, 3, 1, 2).reshape(len(y), -1),
        b'labels': [int(v) for v in y],
      },
      f,
    )


@pytest.mark.fast
def test_tiny_cifar_jpeg_tars_and_cache(tmp_path, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
  (tmp_path / 'cifar10').mkdir()
  x, y = _tiny_cifar_images(100)
  xt, yt = _tiny_cifar_images(100, seed=1)
  _write_jpeg_tar(tmp_path / 'cifar10' / 'train.tar', x, y)
  _write_jpeg_tar(tmp_path / 'cifar10' / 'test.tar', xt, yt)
  task = cifar10.load(str(tmp_path), 0, num_clients=10)
  assert len(os.listdir(tmp_path / 'cache')) == 1
  train = tasks.client_arrays(task.train)
  assert len(train) == 10 and set(_sizes(train)) == {10}
  assert all(set(np.bincount(a['y'])) == {1} for a in train)
  assert train[0]['x'].dtype == np.uint8
  decoded = cifar10.load_arrays(str(tmp_path))  # From the cache.
  order = np.lexsort((np.arange(100), y))  # Tar order: class, then number.
  np.testing.assert_array_equal(decoded[1], y[order])
  assert np.abs(decoded[0].astype(int) - x[order]).mean() < 25  # Lossy.
  assert 'lossy JPEG' in task.description


def test_tiny_cifar_pickle_batches_and_one_round(tmp_path):
  x, y = _tiny_cifar_images(100)
  xt, yt = _tiny_cifar_images(100, seed=1)
  _write_pickles(tmp_path / 'cifar10' / cifar10.BATCH_DIR, x, y, xt, yt)
  train_x, train_y, test_x, test_y, source = cifar10.load_arrays(str(tmp_path))
  np.testing.assert_array_equal(train_x, x)  # Lossless, official order.
  np.testing.assert_array_equal(test_y, yt)
  assert 'official' in source
  task = cifar10.load(str(tmp_path), 0, num_clients=10)
  out = tmp_path / 'run'
  experiment.run(
    Config(
      algo='fedavg',
      rounds=1,
      clients_per_round=2,
      epochs=1,
      batch_size=5,
      client_lr=0.05,
    ),
    task,
    str(out),
    show_progress=False,
  )
  assert (out / 'summary.json').exists()
  del train_x, train_y, test_x


def test_cifar_missing_files_name_them(tmp_path):
  with pytest.raises(tasks.DataError) as e:
    cifar10.TASKS['cifar10'](str(tmp_path), 0)
  for name in (
    'train.tar',
    'test.tar',
    'data_batch_1',
    'test_batch',
    'cifar-10-batches-py',
  ):
    assert name in str(e.value)


@pytest.mark.parametrize(
  'damage', ['bad_member', 'truncated_tar', 'bad_pickle', 'missing_batch']
)
def test_cifar_corrupt_files_raise(tmp_path, monkeypatch, damage):
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
  x, y = _tiny_cifar_images(20)
  folder = tmp_path / 'cifar10'
  if damage in ('bad_member', 'truncated_tar'):
    folder.mkdir()
    _write_jpeg_tar(folder / 'train.tar', x, y, corrupt=damage == 'bad_member')
    _write_jpeg_tar(folder / 'test.tar', x, y)
    if damage == 'truncated_tar':
      data = (folder / 'train.tar').read_bytes()
      (folder / 'train.tar').write_bytes(data[: len(data) // 2])
  else:
    _write_pickles(folder / cifar10.BATCH_DIR, x, y, x, y)
    if damage == 'bad_pickle':
      path = folder / cifar10.BATCH_DIR / 'data_batch_3'
      path.write_bytes(path.read_bytes()[:100])
    else:
      os.remove(folder / cifar10.BATCH_DIR / 'test_batch')
  with pytest.raises(tasks.DataError):
    cifar10.load_arrays(str(tmp_path))
  assert not (tmp_path / 'cache').exists() or not os.listdir(tmp_path / 'cache')


# ------------------------------------------------------ tiny FEMNIST files


def _tiny_femnist_arrays(
  writers=('f0001_01', 'f0002_02', 'f0003_03'),
  per_writer=40,
  labels=None,
  seed=0,
):
  rng = np.random.default_rng(seed)
  z = collections.defaultdict(list)
  for i, _ in enumerate(writers):
    for split, n in (('train', per_writer), ('test', per_writer // 4)):
      y = rng.integers(0, 62, n) if labels is None else rng.choice(labels, n)
      z[f'{split}_x'].append(rng.integers(0, 256, (n, 28, 28)))
      z[f'{split}_y'].append(y)
      z[f'{split}_writer'].append(np.full(n, i))
  arrays = {k: np.concatenate(v) for k, v in z.items()}
  for split in ('train', 'test'):
    arrays[f'{split}_x'] = arrays[f'{split}_x'].astype(np.uint8)
    arrays[f'{split}_y'] = arrays[f'{split}_y'].astype(np.uint8)
    arrays[f'{split}_writer'] = arrays[f'{split}_writer'].astype(np.int32)
  arrays['writers'] = np.array(writers)
  return arrays


def _write_npz(root, arrays):
  (root / 'femnist').mkdir(parents=True, exist_ok=True)
  path = root / 'femnist' / femnist.NPZ
  np.savez_compressed(path, **arrays)
  return path


@pytest.mark.fast
def test_tiny_femnist_npz(tmp_path):
  arrays = _tiny_femnist_arrays()
  _write_npz(tmp_path, arrays)
  task = femnist.TASKS['femnist'](str(tmp_path), 0)
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  assert list(task.train.client_ids) == ['f0001_01', 'f0002_02', 'f0003_03']
  assert set(_sizes(train)) == {40} and set(_sizes(test)) == {10}
  np.testing.assert_array_equal(train[1]['x'][..., 0], arrays['train_x'][40:80])
  np.testing.assert_array_equal(train[1]['y'], arrays['train_y'][40:80])


def test_tiny_femnist_leaf_json_and_one_round(tmp_path):
  arrays = _tiny_femnist_arrays()
  for split in ('train', 'test'):
    folder = tmp_path / 'femnist' / split
    folder.mkdir(parents=True)
    users = [str(w) for w in arrays['writers']]
    owner = arrays[f'{split}_writer']
    content = dict(users=users, num_samples=[], user_data={})
    for i, user in enumerate(users):
      idx = owner == i
      content['num_samples'].append(int(idx.sum()))
      content['user_data'][user] = dict(
        x=(arrays[f'{split}_x'][idx].reshape(-1, 784) / 255).tolist(),
        y=arrays[f'{split}_y'][idx].tolist(),
      )
    (folder / f'all_data_0_{split}.json').write_text(json.dumps(content))
  from_json, source = femnist.load_writers(str(tmp_path))
  assert 'LEAF JSON' in source
  for i, pairs in enumerate(from_json.values()):
    np.testing.assert_array_equal(
      pairs[0][0], arrays['train_x'][arrays['train_writer'] == i]
    )
  task = femnist.TASKS['femnist'](str(tmp_path), 0)
  out = tmp_path / 'run'
  experiment.run(
    Config(
      algo='fedavg',
      rounds=1,
      clients_per_round=2,
      epochs=1,
      batch_size=20,
      client_lr=0.05,
    ),
    task,
    str(out),
    show_progress=False,
  )
  assert (out / 'summary.json').exists()


def test_tiny_femnist_fedprox(tmp_path):
  letters = np.arange(36, 46)
  arrays = _tiny_femnist_arrays(
    per_writer=160, labels=np.concatenate([letters, [0, 10]])
  )  # Digits and uppercase are dropped.
  _write_npz(tmp_path, arrays)
  task = image_models.as_task(
    femnist.load_fedprox(str(tmp_path), 0, num_devices=20)
  )
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  assert len(train) == 20
  for u, (a, b) in enumerate(zip(train, test)):
    labels = set(np.concatenate([a['y'], b['y']]).tolist())
    assert labels <= {(u + j) % 10 for j in range(5)}
    assert len(b['y']) == len(a['y']) + len(b['y']) - int(
      0.9 * (len(a['y']) + len(b['y']))
    )
  assert train[0]['x'].shape[1:] == (784,)
  with pytest.raises(tasks.DataError, match='device slots'):
    femnist.load_fedprox(str(tmp_path), 0, num_devices=2000)


def test_femnist_missing_files_name_them(tmp_path):
  for name in ('femnist', 'femnist_fedprox'):
    with pytest.raises(tasks.DataError) as e:
      femnist.TASKS[name](str(tmp_path), 0)
    assert femnist.NPZ in str(e.value) and 'train/' in str(e.value)


@pytest.mark.parametrize('damage', ['truncated', 'missing_key', 'bad_writer'])
def test_femnist_corrupt_npz_raises(tmp_path, damage):
  arrays = _tiny_femnist_arrays()
  if damage == 'missing_key':
    del arrays['test_y']
  if damage == 'bad_writer':
    arrays['train_writer'][0] = 7
  path = _write_npz(tmp_path, arrays)
  if damage == 'truncated':
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
  with pytest.raises(tasks.DataError, match=femnist.NPZ):
    femnist.TASKS['femnist'](str(tmp_path), 0)


# ------------------------------------------------------------ TFF EMNIST


def _write_emnist_sqlite(path, clients=('w0', 'w1'), per_client=6):
  import tensorflow as tf

  connection = sqlite3.connect(path)
  connection.execute(
    'CREATE TABLE examples (split_name TEXT NOT NULL, '
    'client_id TEXT NOT NULL, '
    'serialized_example_proto BLOB NOT NULL)'
  )
  connection.execute(
    'CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
    'split_name TEXT NOT NULL, num_examples INTEGER NOT '
    'NULL)'
  )
  rng = np.random.default_rng(0)
  for split in ('all_train', 'all_test'):
    for client in clients:
      for _ in range(per_client):
        example = tf.train.Example(
          features=tf.train.Features(
            feature=dict(
              pixels=tf.train.Feature(
                float_list=tf.train.FloatList(value=rng.random(784).tolist())
              ),
              label=tf.train.Feature(
                int64_list=tf.train.Int64List(value=[int(rng.integers(62))])
              ),
            )
          )
        )
        connection.execute(
          'INSERT INTO examples VALUES (?, ?, ?)',
          (split, client, example.SerializeToString()),
        )
      connection.execute(
        'INSERT INTO client_metadata VALUES (?, ?, ?)',
        (client, split, per_client),
      )
  connection.commit()
  connection.close()


def test_tiny_emnist_sqlite(tmp_path):
  (tmp_path / 'tff').mkdir()
  _write_emnist_sqlite(tmp_path / 'tff' / femnist.EMNIST_FILE)
  task = femnist.TASKS['emnist'](str(tmp_path), 0)
  assert list(task.train.client_ids) == ['w0', 'w1']
  arrays = tasks.client_arrays(task.train)  # Once hung on SQL-backed data.
  assert [len(a['y']) for a in arrays] == [6, 6]
  assert arrays[1]['x'].shape == (6, 28, 28, 1)
  assert arrays[1]['y'].dtype == np.int32


def test_emnist_missing_or_corrupt_raises(tmp_path):
  with pytest.raises(tasks.DataError, match=femnist.EMNIST_FILE):
    femnist.TASKS['emnist'](str(tmp_path), 0)
  (tmp_path / femnist.EMNIST_FILE).write_bytes(b'not a database' * 100)
  with pytest.raises(tasks.DataError, match='not a readable'):
    femnist.TASKS['emnist'](str(tmp_path), 0)
  assert not (tmp_path / 'emnist_all.sqlite.lzma').exists()  # No download.
