"""The on-disk cache of built and compiled computations (issue 22): a hit
is the very computation a build gives, keyed by everything that shapes it,
and never a stale or damaged one."""

import collections
import dataclasses
import os

import numpy as np
import pytest
import tensorflow_federated as tff

import helpers
from tff_algos.learning import client_work
from tff_algos.runtime import computation_cache
from tff_algos.simulation import client_inputs
from tff_algos.simulation import experiment
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import StragglerPolicy

_PARTS = ('initialize', 'next', 'get_model_weights', 'set_model_weights',
          'get_hparams', 'set_hparams')


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
  monkeypatch.delenv('TFF_ALGOS_COMPUTATION_CACHE', raising=False)
  return tmp_path / 'cache' / 'computations'


def _build(config=None):
  task, _ = helpers.task_and_arrays()
  config = config or helpers.quick_config(algo='fedprox', mu=0.5)
  process = experiment.build_process(config, task.model_fn)
  return process, computation_cache.STATS['build']


def _protos(process):
  return {name: tff.framework.serialize_computation(
      getattr(process, name)).SerializeToString(deterministic=True)
          for name in _PARTS}


def _rounds(process, rounds=2):
  """The final weights after `rounds` rounds of 3 clients (bytes)."""
  task, arrays = helpers.task_and_arrays()
  sampler = ClientSampler(len(arrays), 3, 2, 0, 0.0)
  weights = helpers.train(process, task.model_fn, [
      client_inputs.round_inputs(
          sampler, sampler.participants(r, StragglerPolicy.PARTIAL), arrays,
          r, 10) for r in range(1, rounds + 1)])
  return b''.join(np.asarray(w).tobytes() for w in weights.trainable)


def test_a_cached_process_is_the_built_one(cache):
  built, how = _build()
  assert how == 'miss'
  assert len(list(cache.glob('process-*.tffc'))) == 1
  cached, how = _build()
  assert how == 'hit'
  assert type(cached) is type(built)
  for name in _PARTS:  # Python containers included (ModelWeights, ...).
    assert getattr(cached, name).type_signature == getattr(
        built, name).type_signature, name
  assert _protos(cached) == _protos(built)
  assert _rounds(cached) == _rounds(built)
  state = cached.initialize()
  assert isinstance(cached.get_model_weights(state),
                    tff.learning.models.ModelWeights)


def test_the_key_is_what_shapes_the_build(cache, monkeypatch):
  config = helpers.quick_config(algo='fedprox', mu=0.5)
  assert _build(config)[1] == 'miss'
  # Settings the build does not read do not split the cache ...
  assert _build(dataclasses.replace(config, seed=7, rounds=50,
                                    clients_per_round=3))[1] == 'hit'
  # ... those it reads (a graph constant: μ's initial value) do.
  assert _build(dataclasses.replace(config, mu=0.25))[1] == 'miss'
  # So does the code: a function of ours replaced (here by an equivalent).
  statistics = client_work._client_statistics  # pylint: disable=protected-access
  with monkeypatch.context() as patch:
    patch.setattr(client_work, '_client_statistics',
                  lambda *args: statistics(*args))
    assert _build(config)[1] == 'miss'
  assert _build(config)[1] == 'hit'


def test_a_damaged_entry_is_rebuilt(cache):
  _build()
  entry, = cache.glob('process-*.tffc')
  data = bytearray(entry.read_bytes())
  data[-100] ^= 0xFF  # A flipped bit in a serialized computation.
  entry.write_bytes(bytes(data))
  assert _build()[1] == 'miss'  # Detected, discarded and rebuilt.
  assert _build()[1] == 'hit'
  entry.write_bytes(entry.read_bytes()[:1000])  # Truncated.
  assert _build()[1] == 'miss'


def test_an_unknown_object_in_a_model_makes_the_build_uncacheable(cache):
  task, _ = helpers.task_and_arrays()

  class Opaque:  # Not a dataclass, holds nothing the cache can key on ...
    __slots__ = ()

  opaque = Opaque()
  inner = task.model_fn  # Cacheable alone (the tests above): only `opaque`
  # can make this model function uncacheable.

  def model_fn():
    assert opaque is not None  # ... but the model function closes over it.
    return inner()

  config = helpers.quick_config(algo='fedavg')
  experiment.build_process(config, model_fn)
  assert computation_cache.STATS['build'] == 'uncacheable'
  assert not list(cache.glob('process-*.tffc'))


def test_the_cache_can_be_turned_off(cache, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_COMPUTATION_CACHE', '0')
  assert _build()[1] == 'off'
  assert not cache.exists()


def test_compiled_computations_are_cached_by_their_content(cache):
  calls = collections.Counter()

  def compiler_fn(computation):
    calls[computation] += 1
    return tff.backends.native.desugar_and_transform_to_native(computation)

  process, _ = _build()
  compile_fn = computation_cache.compiler(compiler_fn, 'test')
  first = compile_fn(process.next)
  again = computation_cache.compiler(compiler_fn, 'test')(process.next)
  assert sum(calls.values()) == 1  # The second came from the cache,
  assert tff.framework.serialize_computation(again) == (  # the same one.
      tff.framework.serialize_computation(first))
  computation_cache.compiler(compiler_fn, 'other')(process.next)
  assert sum(calls.values()) == 2  # Another compiler is another key.


def test_every_cache_follows_the_same_environment(monkeypatch, tmp_path):
  """The computation cache, decoded CIFAR-10 and the loopback shim agree
  on the folder: $TFF_ALGOS_CACHE, else $XDG_CACHE_HOME/tff_algos (the
  shim: always the latter)."""
  from tasks import cifar10  # pylint: disable=g-import-not-at-top
  from tff_algos.runtime import loopback  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv('TFF_ALGOS_CACHE', raising=False)
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  folder = str(tmp_path / 'xdg' / 'tff_algos')
  assert cifar10.cache_dir() == folder
  assert computation_cache.cache_dir() == f'{folder}/computations'
  try:
    shim = loopback.loopback_shim()
  except loopback.ShimUnavailable:
    pytest.skip('no C compiler')
  assert os.path.dirname(shim) == folder
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'own'))
  assert cifar10.cache_dir() == str(tmp_path / 'own')
  assert computation_cache.cache_dir() == str(tmp_path / 'own' /
                                              'computations')
  assert os.path.dirname(loopback.loopback_shim()) == folder
