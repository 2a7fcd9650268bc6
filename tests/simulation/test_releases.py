"""A run's release managers write what TFF's write: metrics.csv the bytes
of TFF's CSVFileReleaseManager (CSVSaveMode.WRITE), in a run, a resumed
run and a run started again, without reading the file back each round;
TensorBoard the summaries of TFF's TensorBoardReleaseManager, in one
traced call a round."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.simulation import outputs
from tff_algos.simulation import results
from tff_algos.simulation import run_dir

Row = collections.namedtuple('Row', ['train_loss', 'mu', 'participants'])


def _row(key):
  rng = np.random.default_rng(key)
  return Row(
    float(np.float32(rng.normal())),
    None if key % 3 else 0.5,
    int(rng.integers(1, 10)) if key else None,
  )


def _tffs(path):
  return tff.program.CSVFileReleaseManager(
    path, tff.program.CSVSaveMode.WRITE, key_fieldname='round'
  )


def _ours(path):
  folder = os.path.dirname(path)
  rows = results.read_rows(folder) if os.path.exists(path) else []
  return run_dir._metrics_csv(path, rows)


@pytest.mark.fast
def test_metrics_csv_has_the_bytes_of_tffs_release_manager(tmp_path):
  written = {}
  for name, manager_for in (('tff', _tffs), ('ours', _ours)):
    path = tmp_path / name / results.METRICS_FILE
    path.parent.mkdir()
    snapshots = []
    # A run of rounds 0-4, killed; resumed from round 2 by a new process
    # (a manager made from the file), to round 6; then started again.
    for keys in (range(5), range(2, 7), range(0, 3)):
      manager = manager_for(str(path))
      for key in keys:
        outputs.wait(manager.release(_row(key), key))
        snapshots.append(path.read_bytes())
    written[name] = snapshots
  assert written['ours'] == written['tff']
  assert b'round,train_loss,mu,participants\r\n0,' in written['ours'][-1]


def _events(folder):
  """(step, tag, the summary's bytes) of every summary in `folder`'s
  events."""
  found = []
  for path in sorted(folder.glob('events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        found.append((event.step, value.tag, value.SerializeToString()))
  return found


@pytest.mark.fast
def test_tensorboard_gets_the_summaries_of_tffs_release_manager(tmp_path):
  events = {}
  for name, manager in (
    ('tff', tff.program.TensorBoardReleaseManager(str(tmp_path / 'tff'))),
    ('ours', run_dir._tensorboard(str(tmp_path / 'ours'), held={})),
  ):
    for key in range(4):
      outputs.wait(manager.release(_row(key), key))
    del manager  # Its writer flushes.
    events[name] = _events(tmp_path / name)
  assert len(events['ours']) == 4 + 2 + 3  # Every number, no None.
  assert events['ours'] == events['tff']


@pytest.mark.fast
def test_tensorboard_gets_each_value_once_over_a_kill_and_a_resume(tmp_path):
  """A killed run's TensorBoard may lack values its metrics.csv holds (it
  is written second, and buffered). Resumed from a checkpoint, it gets
  what its events lack: of the rounds before the resumed one from
  metrics.csv, of the others as they are recomputed; and nothing twice."""
  folders = {}
  for name in ('whole', 'killed'):
    folders[name] = run_dir.RunDir(str(tmp_path / name))
    os.makedirs(folders[name].path)
  manager = folders['whole'].release_manager()
  for key in range(6):
    outputs.wait(manager.release(_row(key), key))
  del manager  # Its writer flushes.

  killed = folders['killed']
  manager = killed.release_manager()
  for key in range(4):  # metrics.csv holds rounds 0-3 ...
    outputs.wait(manager.release(_row(key), key))
  del manager
  # ... and TensorBoard round 0 and round 2's first value only.
  tensorboard = tmp_path / 'killed' / run_dir.TENSORBOARD_DIR
  for path in tensorboard.iterdir():
    path.unlink()
  partial = run_dir._tensorboard(str(tensorboard), held={})
  First = collections.namedtuple('First', Row._fields[:1])
  for key, row in ((0, _row(0)), (2, First(_row(2)[0]))):
    outputs.wait(partial.release(row, key))
  del partial

  manager = killed.release_manager(first_round=2)  # Its checkpoint: round 1.
  for key in range(2, 6):
    outputs.wait(manager.release(_row(key), key))
  del manager
  assert sorted(_events(tensorboard)) == sorted(
    _events(tmp_path / 'whole' / run_dir.TENSORBOARD_DIR)
  )
  assert (tmp_path / 'killed' / results.METRICS_FILE).read_bytes() == (
    tmp_path / 'whole' / results.METRICS_FILE
  ).read_bytes()


@pytest.mark.fast
def test_a_new_runs_settings_go_to_tensorboards_hparams_as_its_api_writes(
  tmp_path,
):
  from tensorboard.plugins.hparams import api as hparams_api
  from tensorboard.plugins.hparams import plugin_data_pb2

  settings = {'algo': 'fedprox', 'rounds': 3, 'mu': 0.5, 'iid': False}
  with tf.summary.create_file_writer(str(tmp_path / 'tf')).as_default():
    hparams_api.hparams(settings)
  folder = run_dir.RunDir(str(tmp_path / 'ours'))
  folder.start(dict(settings, unrecorded=[1]), {'package': 'x'})

  def session_start(folder):
    [(step, tag, value)] = _events(folder)
    summary = tf.compat.v1.Summary.Value.FromString(value)
    data = plugin_data_pb2.HParamsPluginData.FromString(
      summary.metadata.plugin_data.content
    )
    assert data.session_start_info.start_time_secs > 0
    data.session_start_info.start_time_secs = 0
    return step, tag, data

  assert session_start(tmp_path / 'ours' / run_dir.TENSORBOARD_DIR) == (
    session_start(tmp_path / 'tf')
  )
