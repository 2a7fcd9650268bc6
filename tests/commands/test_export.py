"""`python -m tff_algos.export`: serialized computations for a port."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import learning
from tff_algos.algorithms import fedisgd
import warm


def _export(*args):
  return subprocess.run(
    warm.command('-m', 'tff_algos.export', *args),
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=600,
  )


# Loads an export as a pipeline would: TFF alone, no tff_algos.
_LOADER = r"""
import json, os, sys
os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

export, clients, out = sys.argv[1:]
with open(os.path.join(export, 'manifest.json')) as f:
  manifest = json.load(f)
parts = {}
for name, part in manifest['computations'].items():
  with open(os.path.join(export, part['file']), 'rb') as f:
    parts[name] = tff.framework.deserialize_computation(
        computation_pb2.Computation.FromString(f.read()))
  assert str(parts[name].type_signature) == part['type_signature'], name
context = tff.backends.native.create_sync_local_cpp_execution_context()
tff.framework.set_default_context(context)
with np.load(os.path.join(export, manifest['initial_model_weights']['file'])
             ) as saved:
  weights = tff.learning.models.ModelWeights(
      trainable=[saved[f'trainable_{i}'] for i in range(
          sum(k.startswith('trainable_') for k in saved.files))],
      non_trainable=[])
with np.load(clients) as saved:
  data = [tf.data.Dataset.from_tensor_slices(dict(
      x=saved[f'x{k}'], y=saved[f'y{k}'])).batch(10)
          for k in range(len(saved.files) // 2)]
state = parts['set_model_weights'](parts['initialize'](), weights)
hparams = parts['get_hparams'](state)
hparams['client_work']['mu'] = np.float32(0.25)
state = parts['set_hparams'](state, hparams)
for _ in range(2):
  state = parts['next'](state, data)['state']
np.savez(out, *parts['get_model_weights'](state)['trainable'])
assert not [m for m in sys.modules if m.split('.')[0] in ('tff_algos',
                                                         'tasks')]
sys.stdout.flush()
os._exit(0)  # TFF's own context cannot be relied on to stop its worker at
             # exit (it may hang waiting for it): the test's reaper does.
"""


@pytest.mark.slow
def test_an_export_runs_in_a_process_without_this_package(tmp_path):
  """Every part reloads with TFF alone; initialize, the saved initial
  weights, set_hparams and two rounds of `next` there reach the model the
  in-package process reaches."""
  out = tmp_path / 'fedisgd'
  result = _export(
    '--algo=fedisgd',
    '--task=synthetic_1_1',
    '--epochs=2',
    '--client_lr=0.05',
    '--lam=0.5',
    '--server_lr=0.75',
    '--seed=5',
    f'--out={out}',
  )
  assert result.returncode == 0, result.stderr
  manifest = json.loads((out / 'manifest.json').read_text())
  assert manifest['versions']['tensorflow_federated'] == tff.__version__
  assert manifest['hyperparameters'] == dict(
    epochs=2,
    client_lr=0.05,
    lam=0.5,
    server_lr=0.75,
    client_weighting='uniform',
    client_optimizer='sgd',
    client_lr_schedule='constant',
    server_optimizer='sgd',
    server_lr_schedule='step',
    server_lr_decay=1.0,
    server_lr_decay_every=1,
    update_spread=False,
    aggregator='mean',
  )
  # No straggler_policy, no B (the pipeline's), no seed (only a simulation
  # build's DP noise has one).
  assert manifest['client_data']['type'] == '<x=float32[?,60],y=int32[?]>*'
  assert 'the pipeline batches' in manifest['client_data']['contract']
  assert 'equal weights' in manifest['client_data']['contract']  # FedISGD.
  parts = manifest['computations']
  assert len(parts) == 21 and {
    'get_hparams',
    'set_hparams',
    'get_model_weights',
    'set_model_weights',
    'map_reduce_form/work',
    'distribute_aggregate_form/client_work',
  } <= set(parts)
  assert parts['next']['type_signature'] in result.stdout

  task, arrays = helpers.task_and_arrays()
  clients = arrays[:3]
  np.savez(
    tmp_path / 'clients.npz',
    **{f'{k}{i}': c[k] for i, c in enumerate(clients) for k in 'xy'},
  )
  loaded, _ = helpers.run_and_reap(  # Kills the worker TFF leaves.
    [
      sys.executable,
      '-c',
      _LOADER,
      str(out),
      str(tmp_path / 'clients.npz'),
      str(tmp_path / 'final.npz'),
    ],
    tmp_path,
    cwd=tmp_path,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert loaded.returncode == 0, loaded.stderr[-3000:]

  process = fedisgd.build_fed_isgd(
    task.model_fn,
    0.05,
    lam=0.5,
    server_learning_rate=0.75,
    client_input=learning.DatasetInput(epochs=2),
  )
  state = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(task.model_fn, 5)
  )
  hparams = process.get_hparams(state)
  hparams['client_work']['mu'] = np.float32(0.25)
  state = process.set_hparams(state, hparams)
  data = [
    tf.data.Dataset.from_tensor_slices(dict(x=c['x'], y=c['y'])).batch(10)
    for c in clients
  ]
  for _ in range(2):
    state = process.next(state, data).state
  with np.load(tmp_path / 'final.npz') as final:
    there = [final[f'arr_{i}'] for i in range(len(final.files))]
  here = process.get_model_weights(state).trainable
  assert max(np.max(np.abs(a - b)) for a, b in zip(here, there)) <= 1e-6


@pytest.mark.parametrize(
  'args, message',
  [
    (['--algo=nope', '--out=OUT'], 'unknown algorithm'),
    pytest.param(
      ['--algo=fedavg'], '--out is required', marks=pytest.mark.fast
    ),
    (
      ['--algo=fedavg', '--mu=1', '--out=OUT'],
      'fedavg has mu=0 (McMahan et al.',
    ),
    (['--algo=fedavg', '--task=nope', '--out=OUT'], 'unknown --task'),
    (['--algo=fedavg', '--out=FULL'], 'is not empty (--overwrite'),
    (
      ['--algo=fedavg', '--out=FULL', '--overwrite'],
      'holds files that are not an export',
    ),
    (['--algo=fedavg', '--bogus=1', '--out=OUT'], 'Unknown command line flag'),
  ],
)
def test_bad_export_flags_are_one_line_exit_2(tmp_path, args, message):
  (tmp_path / 'full').mkdir()
  (tmp_path / 'full' / 'keep').write_text('x')
  args = [
    a.replace('OUT', str(tmp_path / 'out')).replace(
      'FULL', str(tmp_path / 'full')
    )
    for a in args
  ]
  result = _export(*args)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and message in lines[0], lines
  assert not (tmp_path / 'out').exists()
  assert (tmp_path / 'full' / 'keep').read_text() == 'x'
