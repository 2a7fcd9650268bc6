"""The Synthetic(α, β) task: generator, LEAF loading, and the authors' data."""

import json

import numpy as np
import pytest

import tasks
from tasks import leaf
from tasks import synthetic

REFERENCE_FILES = {
  'synthetic_0_0': 'synthetic_0_0_test.json',
  'synthetic_0.5_0.5': 'synthetic_0.5_0.5_test.json',
  'synthetic_1_1': 'synthetic_1_1_test.json',
  'synthetic_iid': 'synthetic_iid_test.json',
}


def _statistics(devices):
  """Per-device counts, Σ profile slope, spread of means, label skew."""
  xs = [np.asarray(x, np.float64) for x, _ in devices]
  ys = [np.asarray(y).astype(int) for _, y in devices]
  within = np.mean([x.var(axis=0) for x in xs], axis=0)
  j = np.arange(1, within.size + 1)
  slope = np.polyfit(np.log(j), np.log(within), 1)[0]
  return dict(
    counts=np.array([len(y) for y in ys]),
    sigma_slope=slope,  # Σ_jj = j^-1.2: slope -1.2 in log-log.
    between=np.array([x.mean(axis=0) for x in xs]).var(axis=0).mean(),
    majority=np.mean([np.bincount(y).max() / len(y) for y in ys]),
    labels=np.mean([len(set(y.tolist())) for y in ys]),
  )


@pytest.mark.parametrize('name', sorted(REFERENCE_FILES))
def test_generator_statistics_match_the_fedprox_authors_data(name, shared_data):
  reference = leaf.read_leaf_file(
    shared_data / 'synthetic_reference' / REFERENCE_FILES[name]
  )
  ref = _statistics(list(reference.values()))
  _, test = synthetic.split_devices(
    *synthetic.generate(*synthetic.parse_name(name)[:3], seed=0), seed=0
  )
  ours = _statistics([(d['x'], d['y']) for d in test.values()])

  assert len(reference) == len(test) == 30
  for stats in (ref, ours):  # 10% of ⌊lognormal(4,2)⌋ + 50 samples.
    assert 5 <= stats['counts'].min() <= 6
    assert 5 <= np.median(stats['counts']) <= 20
    assert stats['sigma_slope'] == pytest.approx(-1.2, abs=0.15)
  assert ours['majority'] == pytest.approx(ref['majority'], abs=0.15)
  if name == 'synthetic_iid':  # One model, one feature distribution.
    assert ours['between'] < 0.05 and ref['between'] < 0.05
    assert ours['labels'] > 4 and ref['labels'] > 4
  else:  # v_k ~ N(B_k, 1): device means differ by ~1 + β² per feature.
    assert 0.6 < ours['between'] / ref['between'] < 1.6
    assert ours['labels'] < 3 and ref['labels'] < 3


@pytest.mark.fast
def test_generator_is_deterministic_per_seed():
  a = synthetic.generate(1, 1, False, seed=4)
  b = synthetic.generate(1, 1, False, seed=4)
  c = synthetic.generate(1, 1, False, seed=5)
  assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))
  assert not np.array_equal(a[0][0][:5], c[0][0][:5])
  assert len(a[0]) == 30 and a[0][0].shape[1] == 60
  assert all(len(x) >= 50 for x in a[0])
  assert all(0 <= y.min() and y.max() < 10 for y in a[1])


@pytest.mark.fast
def test_split_is_90_10_per_device_and_configurable():
  task = tasks.load_task('synthetic_1_1')
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  for tr, te in zip(train, test):
    n = len(tr['y']) + len(te['y'])
    assert len(tr['y']) == int(0.9 * n)
  task = tasks.load_task('synthetic_1_1', train_fraction=0.8)
  for tr, te in zip(
    tasks.client_arrays(task.train), tasks.client_arrays(task.test)
  ):
    assert len(tr['y']) == int(0.8 * (len(tr['y']) + len(te['y'])))


def _write_leaf(folder, users):
  for split, index in (('train', 0), ('test', 1)):
    (folder / split).mkdir(parents=True)
    content = dict(
      users=list(users),
      num_samples=[len(u[index][1]) for u in users.values()],
      user_data={
        name: dict(x=u[index][0], y=u[index][1]) for name, u in users.items()
      },
    )
    (folder / split / 'data.json').write_text(json.dumps(content))


@pytest.mark.fast
def test_loads_leaf_json_written_by_the_test(tmp_path):
  rng = np.random.default_rng(0)
  users = {
    f'f_{k:05d}': (
      (rng.normal(size=(n, 60)).tolist(), [float(k)] * n),
      (rng.normal(size=(2, 60)).tolist(), [1.0, 2.0]),
    )
    for k, n in ((0, 3), (1, 5))
  }
  _write_leaf(tmp_path, users)
  task = tasks.load_task('synthetic_1_1', data_dir=str(tmp_path))
  assert task.client_ids == ['f_00000', 'f_00001']
  train = tasks.client_arrays(task.train)
  np.testing.assert_allclose(train[1]['x'], users['f_00001'][0][0], rtol=1e-6)
  assert train[1]['y'].tolist() == [1] * 5
  assert train[0]['y'].dtype == np.int32
  assert tasks.client_arrays(task.test)[0]['y'].tolist() == [1, 2]


@pytest.mark.parametrize('damage', ['truncated', 'count', 'no_user_data'])
def test_malformed_leaf_json_is_a_clear_error(tmp_path, damage):
  users = {'u': (([[0.0] * 60] * 2, [0, 1]), ([[0.0] * 60], [1]))}
  _write_leaf(tmp_path, users)
  path = tmp_path / 'train' / 'data.json'
  content = json.loads(path.read_text())
  if damage == 'truncated':
    path.write_text(path.read_text()[:-40])
  elif damage == 'count':
    content['num_samples'] = [3]
    path.write_text(json.dumps(content))
  else:
    del content['user_data']
    path.write_text(json.dumps(content))
  with pytest.raises(tasks.DataError, match='data.json'):
    tasks.load_task('synthetic_1_1', data_dir=str(tmp_path))


GOOD_X = [[0.5] * 60] * 2


@pytest.mark.parametrize(
  'x, y, message',
  [
    (
      GOOD_X,
      [15, 1],
      'sample 0 has label 15; labels are the whole numbers 0..9',
    ),
    (GOOD_X, [-1, 1], 'sample 0 has label -1'),
    (GOOD_X, [3.7, 1], 'sample 0 has label 3.7'),
    (GOOD_X, ['a', 1], "y: sample 0 has label a string ('a')"),
    (GOOD_X, [True, 1], 'y: sample 0 has label true (a boolean)'),
    (
      [[0.5] * 60, [0.5] * 59],
      [0, 1],
      'x: sample 1 has 59 values, expected 60',
    ),
    ([[0.5] * 59] * 2, [0, 1], 'x: sample 0 has 59 values, expected 60'),
    (
      [[0.5] * 60, ['0.5'] * 60],
      [0, 1],
      "x: sample 1 holds a string ('0.5'), expected numbers",
    ),
    ([], [], 'x: has no samples'),
    (
      [[0.5] * 60, [float('nan')] * 60],
      [0, 1],
      'x: sample 1 has nan, not a finite number',
    ),
    (
      [[0.5] * 60, [1e300] * 60],
      [0, 1],
      "x: sample 1 has 1e+300, beyond float32's range",
    ),
  ],
)
def test_bad_leaf_values_are_refused_naming_file_user_and_problem(
  tmp_path, x, y, message
):
  """Before anything reaches TensorFlow, which would answer a label of 15
  with a 77-line traceback and silently truncate 3.7 to 3."""
  users = {
    'good': ((GOOD_X, [0, 1]), (GOOD_X, [1, 2])),
    'bad_user': ((x, y), (GOOD_X, [1, 2])),
  }
  _write_leaf(tmp_path, users)
  with pytest.raises(tasks.DataError) as error:
    tasks.load_task('synthetic_1_1', data_dir=str(tmp_path))
  text = str(error.value)
  assert "train/data.json: user 'bad_user'" in text and message in text, text


def test_missing_leaf_folder_is_a_clear_error(tmp_path):
  with pytest.raises(
    tasks.DataError, match=r'leave --data_dir out .*/train has none'
  ):
    tasks.load_task('synthetic_1_1', data_dir=str(tmp_path))


def test_reads_the_fedprox_authors_files(shared_data):
  users = leaf.read_leaf_file(
    shared_data / 'synthetic_reference' / 'synthetic_1_1_test.json'
  )
  assert list(users)[:2] == ['f_00000', 'f_00001']
  assert sum(len(y) for _, y in users.values()) == 1084


def test_five_classes_per_device_keeps_x_and_restricts_labels():
  """FedISGD §3.4's Synthetic_1_1: each device's labels come from 5 classes
  of its own; the features are Synthetic(1,1)'s with the same seed."""
  assert synthetic.parse_name('synthetic_1_1_5class') == (1.0, 1.0, False, 5)
  xs, ys = synthetic.generate(1, 1, False, seed=3, classes_per_device=5)
  base_xs, base_ys = synthetic.generate(1, 1, False, seed=3)
  assert all(np.array_equal(a, b) for a, b in zip(xs, base_xs))
  assert all(len(set(y)) <= 5 for y in ys)
  # Labels change only where the device's own argmax was not among its 5.
  assert any(not np.array_equal(a, b) for a, b in zip(ys, base_ys))
  pooled = np.concatenate(ys)
  assert len(set(pooled)) == 10
  with pytest.raises(tasks.DataError, match='classes per device'):
    synthetic.generate(1, 1, False, seed=3, classes_per_device=11)
  task = tasks.load_task('synthetic_1_1_5class', train_fraction=0.8)
  assert task.name == 'synthetic_1_1_5class'
