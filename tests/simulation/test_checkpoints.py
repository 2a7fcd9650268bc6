"""A run's checkpoints (`RunDir.state_manager`) load to exactly what TFF's
FileProgramStateManager loads back from the SavedModel it writes, from a
file of their own; checkpoints TFF wrote still load."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.simulation import outputs
from tff_algos.simulation import run_dir


def _state(seed):
  rng = np.random.default_rng(seed)
  weights = tff.learning.models.ModelWeights(
    trainable=[rng.normal(size=(6, 3)).astype(np.float32), np.zeros(3)],
    non_trainable=[],
  )
  return collections.OrderedDict(
    process=tff.learning.templates.LearningAlgorithmState(
      global_model_weights=weights,
      distributor=(),
      client_work=collections.OrderedDict(mu=0.5, steps=3),
      aggregator=collections.OrderedDict(seed=np.int64([7, seed])),
      finalizer=[np.float32(0.1), True],
    ),
    adaptive_mu=collections.OrderedDict(mu=np.asarray(0.25, np.float64)),
  )


def _tffs(directory):
  return tff.program.FileProgramStateManager(
    directory, prefix='round_', keep_total=2, keep_first=False
  )


def _ours(directory):
  folder = run_dir.RunDir(os.path.dirname(directory))
  os.makedirs(directory, exist_ok=True)
  return folder.state_manager()


def _described(state):
  """Every leaf's type, dtype and bytes, and the containers' types."""
  return (
    tf.nest.flatten(
      tf.nest.map_structure(
        lambda leaf: (type(leaf), leaf.dtype, np.asarray(leaf).tobytes()),
        state,
      )
    ),
    repr(tf.nest.map_structure(lambda _: 0, state)),
  )


@pytest.mark.fast
def test_a_checkpoint_loads_as_tffs_saved_model_loads(tmp_path):
  loaded = {}
  for name, manager_for in (('tff', _tffs), ('ours', _ours)):
    directory = str(tmp_path / name / run_dir.CHECKPOINT_DIR)
    manager = manager_for(directory)
    for version in range(4):
      outputs.wait(manager.save(_state(version), version))
    assert sorted(os.listdir(directory)) == ['round_2', 'round_3']
    loaded[name] = outputs.wait(manager.load(3, _state(0)))
  assert _described(loaded['ours']) == _described(loaded['tff'])
  assert os.listdir(tmp_path / 'ours' / 'checkpoints' / 'round_3') == [
    run_dir.STATE_FILE
  ]
  # A float saved as float32, as a tf.Variable holds it.
  assert loaded['ours']['process'].client_work['mu'].dtype == np.float32


@pytest.mark.fast
def test_checkpoints_tff_wrote_and_states_holding_text_load(tmp_path):
  directory = str(tmp_path / run_dir.CHECKPOINT_DIR)
  outputs.wait(_tffs(directory).save(_state(1), 1))  # An older run's.
  with_text = _state(2)
  with_text['note'] = b'serialized'
  ours = _ours(directory)
  outputs.wait(ours.save(with_text, 2))
  assert not os.path.exists(os.path.join(directory, 'round_2', 'state.npz'))
  expected = _tffs(str(tmp_path / 'tff'))
  outputs.wait(expected.save(_state(1), 1))
  assert _described(outputs.wait(ours.load(1, _state(0)))) == _described(
    outputs.wait(expected.load(1, _state(0)))
  )
  assert outputs.wait(ours.load(2, with_text))['note'] == b'serialized'
