"""`python -m tff_algos.export`: serialized computations for a port (issue 12)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import learning
from tff_algos.algorithms import fedisgd
from tff_algos.simulation import client_inputs
from tff_algos.simulation.sampling import ClientSampler


def _export(*args):
  return subprocess.run([sys.executable, '-m', 'tff_algos.export', *args],
                        cwd=REPO, env=USER_ENV, capture_output=True, text=True,
                        timeout=600)


def _load(path):
  return tff.framework.deserialize_computation(
      computation_pb2.Computation.FromString(path.read_bytes()))


@pytest.mark.slow
def test_export_writes_every_part_and_a_manifest_tff_reads_back(tmp_path):
  out = tmp_path / 'fedisgd'
  result = _export('--algo=fedisgd', '--task=synthetic_1_1', '--epochs=2',
                   '--client_lr=0.05', '--mu=0.5', '--server_lr=0.75',
                   f'--out={out}')
  assert result.returncode == 0, result.stderr
  manifest = json.loads((out / 'manifest.json').read_text())
  parts = manifest['computations']
  assert {'initialize', 'next', 'map_reduce_form/work',
          'map_reduce_form/update',
          'distribute_aggregate_form/client_work'} <= set(parts)
  assert len(parts) == 17 and manifest['build'] == 'production'
  assert manifest['settings']['mu'] == 0.5
  loaded = {}
  for name, part in parts.items():
    loaded[name] = _load(out / part['file'])
    assert str(loaded[name].type_signature) == part['type_signature'], name
  assert parts['next']['type_signature'] in result.stdout

  # The reloaded `next` is the algorithm's: the same round as a process
  # built here from the same settings.
  task, arrays = helpers.task_and_arrays()
  process = fedisgd.build_fed_isgd(
      task.model_fn, 0.05, lam=0.5, server_learning_rate=0.75,
      client_input=learning.DatasetInput(epochs=2))
  sampler = ClientSampler(len(arrays), 3, epochs=1, seed=0)
  data = [client_inputs.as_dataset(i) for i in client_inputs.round_inputs(
      sampler, sampler.round_plan(1), arrays, 1, 10)]
  state = process.set_model_weights(
      process.initialize(), learning.initial_model_weights(task.model_fn, 0))
  want = process.get_model_weights(process.next(state, data).state)
  got = loaded['next'](state, data)['state']['global_model_weights']
  for w, g in zip(want.trainable, got['trainable']):
    np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)


@pytest.mark.parametrize('args, message', [
    (['--algo=nope', '--out=OUT'], 'unknown algorithm'),
    (['--algo=fedavg'], '--out is required'),
    (['--algo=fedavg', '--mu=1', '--out=OUT'], 'fedavg has mu=0.0'),
    (['--algo=fedavg', '--task=nope', '--out=OUT'], 'unknown --task'),
    (['--algo=fedavg', '--out=FULL'], 'is not an empty folder'),
    (['--algo=fedavg', '--bogus=1', '--out=OUT'], 'Unknown command line flag'),
])
def test_bad_export_flags_are_one_line_exit_2(tmp_path, args, message):
  (tmp_path / 'full').mkdir()
  (tmp_path / 'full' / 'keep').write_text('x')
  args = [a.replace('OUT', str(tmp_path / 'out')).replace(
      'FULL', str(tmp_path / 'full')) for a in args]
  result = _export(*args)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and message in lines[0], lines
  assert not (tmp_path / 'out').exists()
  assert (tmp_path / 'full' / 'keep').read_text() == 'x'
