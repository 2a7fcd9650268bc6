"""Clients that read their data where they train (`simulation.client_store`,
`learning.StoredInput`) against the reference, whose data are sent."""

import collections
import os
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

import helpers
from tff_algos import learning
from tff_algos.learning import client_work
from tff_algos.runtime import client_values
from tff_algos.simulation import client_inputs
from tff_algos.simulation import client_store
from tff_algos.simulation import trainer
from tff_algos.simulation.client_store import ClientStore
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

QUICK = helpers.QUICK_RUN
# Each kind of client work and input: minibatch steps (with stragglers'
# partial work and adaptive μ), full-batch gradients, the pooled clients'
# blocks of steps (which send only the examples a block reads), and a DP
# aggregator (which sees each client's update).
CASES = {
  'fedprox_partial_work': dict(
    helpers.EXECUTION_CASES['stragglers_partial'], mu=0.5, adaptive_mu=True
  ),
  'fedsgd': helpers.EXECUTION_CASES['fedsgd'],
  'centralized': helpers.EXECUTION_CASES['centralized'],
  'fedisgd_dp': dict(
    helpers.EXECUTION_CASES['fedisgd'],
    aggregator='dp',
    dp_noise_multiplier=0.5,
    dp_clip=0.5,
  ),
}


def _arrays():
  rng = np.random.default_rng(0)
  return [
    collections.OrderedDict(
      y=rng.integers(0, 10, n).astype(np.int32),
      x=rng.normal(size=(n, 60)).astype(np.float32),
    )
    for n in rng.integers(1, 30, 3)
  ] + [
    collections.OrderedDict(
      y=np.zeros(0, np.int32), x=np.zeros((0, 60), np.float32)
    )
  ]


@pytest.mark.fast
def test_a_client_reads_back_its_arrays_bit_for_bit(tmp_path):
  arrays = _arrays()  # The last client has no examples.
  store = ClientStore.of(arrays, root=str(tmp_path))
  spec = collections.OrderedDict(
    x=tf.TensorSpec([None, 60], tf.float32), y=tf.TensorSpec([None], tf.int32)
  )
  for client, expected in enumerate(arrays):
    element = client_work.read_stored(
      dict(path=store.path(client), example_order=[0], batch_ends=[1]),
      spec,
    )
    data = element['data']
    assert list(data) == ['x', 'y']  # The input spec's structure.
    for name in expected:
      assert data[name].dtype == spec[name].dtype
      assert data[name].shape.as_list() == list(expected[name].shape)
      assert np.array_equal(data[name].numpy(), expected[name])


@pytest.mark.fast
def test_a_store_is_named_by_its_content(tmp_path):
  arrays = _arrays()
  first = ClientStore.of(arrays, root=str(tmp_path))
  written = os.stat(first.path(0) + '.0').st_mtime_ns
  assert ClientStore.of(_arrays(), root=str(tmp_path)) == first
  assert os.stat(first.path(0) + '.0').st_mtime_ns == written  # Not again.
  changed = _arrays()
  changed[1]['x'][-1, -1] = np.nextafter(
    changed[1]['x'][-1, -1], np.float32(np.inf)
  )
  assert ClientStore.of(changed, root=str(tmp_path)) != first
  assert ClientStore.of(arrays[:-1], root=str(tmp_path)) != first
  folders = os.listdir(tmp_path / 'client_data')
  assert len(folders) == 3 and not [f for f in folders if 'partial' in f]


def _damage(path, how):
  """Changes the file at `path` as a disk or a hand might."""
  content = bytearray(open(path, 'rb').read())
  if how == 'deleted':
    os.remove(path)
    return
  if how == 'truncated':
    del content[-5:]
  else:  # A flipped bit in the TensorProto's header, or in a value.
    content[2 if how == 'header' else -1] ^= 1
  with open(path, 'wb') as f:
    f.write(content)


@pytest.mark.fast
@pytest.mark.parametrize('how', ['value', 'header', 'truncated', 'deleted'])
def test_a_damaged_store_is_written_again_and_says_so(tmp_path, capsys, how):
  arrays = _arrays()
  store = ClientStore.of(arrays, root=str(tmp_path))
  intact = {
    f: open(os.path.join(store.folder, f), 'rb').read() for f in store.files
  }
  _damage(store.path(1) + '.1', how)
  assert ClientStore.of(arrays, root=str(tmp_path)) == store
  lines = capsys.readouterr().err.splitlines()
  assert lines == [
    f'the client data store {store.folder} had damaged or missing files '
    "(1.1): written again from the task's data"
  ]
  for name, content in intact.items():
    assert open(os.path.join(store.folder, name), 'rb').read() == content
  assert sorted(os.listdir(store.folder)) == sorted(store.files)
  ClientStore.of(arrays, root=str(tmp_path))  # Intact now: nothing said.
  assert capsys.readouterr().err == ''


@pytest.fixture
def tmpfs(tmp_path):
  """A 1 MB file system of its own (tmpfs) at tmp_path/'cache'; call the
  fixture's value with 'ro' to make it read-only."""
  folder = tmp_path / 'cache'
  folder.mkdir()
  mounted = subprocess.run(
    ['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(folder)],
    capture_output=True,
  )
  if mounted.returncode:
    pytest.skip(f'needs to mount a tmpfs (root): {mounted.stderr.strip()}')

  def remount(options):
    subprocess.run(
      ['mount', '-o', f'remount,{options}', str(folder)], check=True
    )
    return str(folder)

  try:
    yield remount
  finally:
    subprocess.run(['umount', '-l', str(folder)], check=True)


_USE_ANOTHER = (
  ': set TFF_ALGOS_CACHE to a folder with room that can be written, or run '
  "with --client_execution=per_client (which sends each client's data "
  'instead)'
)


def test_a_cache_that_cannot_hold_the_store_is_one_line(tmp_path, tmpfs):
  """Each: StoreError, the run's one line, naming the cache and what to
  do, and no partial folder left."""
  cache = tmpfs('rw')
  rng = np.random.default_rng(0)
  big = [dict(x=rng.normal(size=(20_000, 10)).astype(np.float32))] * 2
  with pytest.raises(client_store.StoreError) as full:
    ClientStore.of(big, root=cache)
  assert str(full.value) == f'no space left on the device holding {cache}' + (
    _USE_ANOTHER
  )
  assert os.listdir(os.path.join(cache, client_store.FOLDER)) == []
  store = ClientStore.of(_arrays(), root=cache)  # Fits.
  tmpfs('ro')
  assert ClientStore.of(_arrays(), root=cache) == store  # Read, not written.
  with pytest.raises(client_store.StoreError) as read_only:
    ClientStore.of(big[:1], root=cache)
  assert str(read_only.value).startswith(
    f'cannot use the client data store under {cache} (Read-only file '
    f'system: {cache}/{client_store.FOLDER}'
  )
  assert str(read_only.value).endswith(_USE_ANOTHER)
  a_file = tmp_path / 'a_file'
  a_file.write_text('')
  with pytest.raises(client_store.StoreError) as not_a_folder:
    ClientStore.of(_arrays(), root=str(a_file))
  assert str(not_a_folder.value).startswith(
    f'cannot use the client data store under {a_file} (Not a directory'
  )


@pytest.mark.fast
def test_only_the_last_stores_and_those_in_use_are_kept(tmp_path):
  parent = tmp_path / client_store.FOLDER
  now = time.time()
  ages = {f'old{i:02d}': 2 * client_store.IN_USE_S + i for i in range(12)}
  ages.update({'in_use_a': 60, 'in_use_b': 120, '.partial-a': ages['old00']})
  for name, age in ages.items():
    (parent / name).mkdir(parents=True)
    os.utime(parent / name, (now - age, now - age))
  store = ClientStore.of(_arrays(), root=str(tmp_path))
  # The new store, the two used within the day and the most recently used
  # of the others: KEPT in all.
  assert client_store.KEPT == 8
  assert set(os.listdir(parent)) == {
    os.path.basename(store.folder),
    'in_use_a',
    'in_use_b',
    *(f'old{i:02d}' for i in range(5)),
  }


def _final_weights(settings, model_fn, arrays, client_input=None):
  """The model after the run of `settings`, and its loop."""
  process = trainer.build_process(settings, model_fn, client_input)
  loop = trainer.loop_for(settings, model_fn, arrays, process=process)
  state = loop.run(
    loop.initial_state(
      learning.initial_model_weights(model_fn, settings.run.seed)
    ),
    range(settings.run.rounds + 1),
  )
  return process.get_model_weights(state).trainable, loop


@pytest.mark.parametrize('name', sorted(CASES))
def test_clients_reading_their_data_train_the_reference_model(name):
  """Bit for bit: only where the examples come from differs."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(
    Config.create(**dict(QUICK, **CASES[name]), client_execution='per_client'),
    num_clients=30,
  )
  stored, loop = _final_weights(
    settings, task.model_fn, arrays, learning.StoredInput()
  )
  reference, reference_loop = _final_weights(settings, task.model_fn, arrays)
  assert learning.takes_stored_input(loop.process)
  assert loop.client_store is not None
  assert len(reference) == len(stored)
  for a, b in zip(stored, reference):
    assert np.array_equal(a, b), name
  # The clients' value a round sends is the reference's less its examples.
  for round_num in range(1, settings.run.rounds + 1):
    examples = sum(
      a.nbytes
      for [client] in _round_inputs(reference_loop, round_num)
      for a in client['data'].values()
    )
    assert (
      _bytes_sent(reference_loop, round_num) - _bytes_sent(loop, round_num)
      > 0.9 * examples
      > 0
    ), round_num


def _round_inputs(loop, round_num):
  """The clients' input `loop` gives its process in round `round_num`."""
  return client_inputs.round_inputs(
    loop.sampler,
    loop.sampler.participants(round_num, loop.policy),
    loop.train_arrays,
    round_num,
    loop.batch_size,
    loop.client_store,
  )


def _bytes_sent(loop, round_num):
  """The bytes of round `round_num`'s clients' value, as the runtime
  serializes it for the worker."""
  clients_type = loop.process.next.type_signature.parameter[1]
  proto, _ = client_values.serialize_value(
    _round_inputs(loop, round_num), clients_type
  )
  return proto.ByteSize()


def test_a_per_client_run_reads_its_data_unless_it_is_the_reference():
  task, _ = helpers.task_and_arrays()
  # Compiled clients would train in this process: the workers' clients
  # train per client, and read their data there.
  settings = resolve(Config(algo='fedavg', **QUICK), num_clients=30)
  process, how = trainer.build_for_run(settings, task.model_fn, workers='h:1')
  assert learning.takes_stored_input(process)
  assert how.endswith('each reads its data where it trains)'), how
  reference = resolve(
    Config(algo='fedavg', client_execution='per_client', **QUICK),
    num_clients=30,
  )
  process, _ = trainer.build_for_run(reference, task.model_fn)
  assert not learning.takes_stored_input(process)


@pytest.mark.slow
def test_a_run_on_a_damaged_or_unusable_store(tmp_path, shared_data):
  """As a user meets it: a value changed in every client's stored pixels
  between two runs is written again before the second trains, which gives
  the first's metrics; a cache that is a file stops the run in one line,
  leaving no run folder."""
  from conftest import cli
  from conftest import USER_ENV

  flags = [
    '--task=mnist_iid_cnn',  # Its clients read their data where they train.
    '--algo=fedavg',
    '--rounds=1',
    '--clients_per_round=2',
    '--epochs=1',
    '--batch_size=50',
    '--eval_clients=5',
  ]
  cache = tmp_path / 'cache'
  env = dict(USER_ENV, TFF_ALGOS_CACHE=str(cache))
  clean = cli(*flags, f'--output_dir={tmp_path / "clean"}', env=env)
  assert clean.returncode == 0, clean.stderr
  [folder] = (cache / client_store.FOLDER).iterdir()
  for client in range(100):
    pixels = folder / f'{client}.0'
    content = bytearray(pixels.read_bytes())
    content[-1] ^= 1
    pixels.write_bytes(content)
  again = cli(*flags, f'--output_dir={tmp_path / "again"}', env=env)
  assert again.returncode == 0, again.stderr
  assert (
    f'the client data store {folder} had damaged or missing files (0.0 '
    "and 99 more): written again from the task's data"
  ) in again.stderr.splitlines()
  assert (tmp_path / 'again' / 'metrics.csv').read_bytes() == (
    tmp_path / 'clean' / 'metrics.csv'
  ).read_bytes()
  a_file = tmp_path / 'a_file'
  a_file.write_text('')
  env['TFF_ALGOS_CACHE'] = str(a_file)
  refused = cli(*flags, f'--output_dir={tmp_path / "refused"}', env=env)
  assert refused.returncode == 1
  assert 'Traceback' not in refused.stderr
  assert refused.stderr.splitlines()[-1].startswith(
    f'run_experiment.py: stopped: cannot use the client data store under '
    f'{a_file} (Not a directory'
  )
  assert not (tmp_path / 'refused').exists()
