"""Tasks of your own and label-skewed partitions."""

import collections
import re

import numpy as np
import pytest

from conftest import REPO
import tasks
from tasks import partitions
from tff_algos import cli


@pytest.mark.fast
def test_the_adding_a_task_example_of_the_docs_registers_a_task(tmp_path):
  page = (REPO / 'docs' / 'TASKS.md').read_text()
  section = page.split('## Adding a task', 1)[1].split('\n## ', 1)[0]
  (code,) = [c for c in re.findall(r'```python\n(.*?)```', section, re.S)]
  (tmp_path / 'my_task.py').write_text(code)
  try:
    cli.import_modules([str(tmp_path / 'my_task.py')])
    assert tasks.is_known('my_task') and 'my_task' in tasks.task_names()
    task = tasks.load_task('my_task', seed=3)
    assert len(task.client_ids) == 8
    arrays = tasks.client_arrays(task.train)
    assert arrays[0]['x'].shape == (40, 4)
    # A partition works on it too.
    skewed = tasks.load_task('my_task', seed=3, partition='dirichlet:0.1')
    assert len(skewed.client_ids) == 8
  finally:
    tasks.unregister('my_task')
  assert not tasks.is_known('my_task')
  with pytest.raises(ValueError, match='built-in task'):
    tasks.register('synthetic_1_1', None)


@pytest.mark.parametrize(
  'spec',
  [
    'dirichlet',
    'dirichlet:0',
    'dirichlet:-1',
    'dirichlet:nan',
    'dirichlet:inf',
    'dirichlet:x',
    'iid:1',
    '',
  ],
)
def test_a_bad_partition_is_a_clear_error(spec):
  with pytest.raises(ValueError, match='expected dirichlet:α'):
    partitions.parse(spec)


@pytest.mark.fast
def test_dirichlet_keeps_every_example_and_skews_labels_with_small_alpha():
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(10), 200)
  shares = {}
  for alpha in (0.05, 1000.0):
    clients = partitions.dirichlet(
      labels, 20, alpha, np.random.default_rng([0, 4])
    )
    assert sorted(np.concatenate(clients).tolist()) == list(range(2000))
    assert min(len(c) for c in clients) >= 1
    # The share of each client's examples in its most common class.
    shares[alpha] = np.mean(
      [np.bincount(labels[c]).max() / len(c) for c in clients]
    )
  assert shares[0.05] > 0.7 and shares[1000.0] < 0.2
  again = partitions.dirichlet(labels, 20, 0.05, np.random.default_rng([0, 4]))
  assert all(
    np.array_equal(a, b)
    for a, b in zip(
      again,
      partitions.dirichlet(labels, 20, 0.05, np.random.default_rng([0, 4])),
    )
  )
  del rng


@pytest.mark.fast
def test_a_partitioned_task_has_the_same_clients_examples_and_histogram():
  task = tasks.load_task('synthetic_1_1')
  skewed = tasks.load_task('synthetic_1_1', partition='dirichlet:0.3')
  before = tasks.client_arrays(task.train)
  after = tasks.client_arrays(skewed.train)
  assert len(after) == len(before) == 30
  assert collections.Counter(np.concatenate([a['y'] for a in after])) == (
    collections.Counter(np.concatenate([a['y'] for a in before]))
  )
  assert sorted(np.concatenate([a['x'][:, 0] for a in after]).tolist()) == (
    sorted(np.concatenate([a['x'][:, 0] for a in before]).tolist())
  )
  histogram = partitions.label_histogram(after, skewed.client_ids)
  assert len(histogram) == 30 and histogram[0]['client'] == 'client_0000'
  assert [
    sum(v for k, v in row.items() if k != 'client') for row in histogram
  ] == [len(a['y']) for a in after]
  assert skewed.test is task.test or len(skewed.test.client_ids) == 30


def test_a_task_without_class_labels_cannot_be_partitioned():
  train = collections.OrderedDict(
    c=collections.OrderedDict(
      x=np.zeros((3, 2), np.float32), y=np.zeros((3, 5), np.int32)
    )
  )
  task = tasks.from_arrays('sequences', train, train, model_fn=None)
  with pytest.raises(tasks.DataError, match='one integer class label'):
    partitions.apply(task, 'dirichlet:1', seed=0)
