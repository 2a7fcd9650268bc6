"""The on-disk cache of compiled computations: keyed by the content of the
computation it replaces, a hit is the very computation compiling gives,
never a damaged one; and builds are deterministic, so that the same code
finds its compiled form again (and a run's computation fingerprint is a
function of its content)."""

import collections
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_federated as tff

from conftest import REPO
import helpers
from tff_algos.runtime import computation_cache
from tff_algos.runtime import fingerprint
from tff_algos.simulation import client_inputs
from tff_algos.simulation import trainer
from tff_algos.simulation.config import resolve
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import StragglerPolicy


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_CACHE', str(tmp_path / 'cache'))
  monkeypatch.delenv('TFF_ALGOS_COMPUTATION_CACHE', raising=False)
  return tmp_path / 'cache' / 'computations'


def _build(config=None):
  task, _ = helpers.task_and_arrays()
  config = config or helpers.quick_config(algo='fedprox', mu=0.5)
  return trainer.build_process(resolve(config), task.model_fn)


def _rounds(process, rounds=2):
  """The final weights after `rounds` rounds of 3 clients (bytes)."""
  task, arrays = helpers.task_and_arrays()
  sampler = ClientSampler(len(arrays), 3, 2, 0, 0.0)
  weights = helpers.train(
    process,
    task.model_fn,
    [
      client_inputs.round_inputs(
        sampler, sampler.participants(r, StragglerPolicy.PARTIAL), arrays, r, 10
      )
      for r in range(1, rounds + 1)
    ],
  )
  return b''.join(np.asarray(w).tobytes() for w in weights.trainable)


def _counting_compiler():
  calls = collections.Counter()

  def compiler_fn(computation):
    calls[computation] += 1
    return tff.backends.native.desugar_and_transform_to_native(computation)

  return compiler_fn, calls


def _serialized(computation):
  return tff.framework.serialize_computation(computation).SerializeToString(
    deterministic=True
  )


@pytest.mark.fast
def test_compiled_computations_are_cached_by_their_content(cache):
  compiler_fn, calls = _counting_compiler()
  process = _build()
  first = computation_cache.compiler(compiler_fn, 'test')(process.next)
  again = computation_cache.compiler(compiler_fn, 'test')(process.next)
  assert sum(calls.values()) == 1  # The second came from the cache,
  assert _serialized(again) == _serialized(first)  # the same one.
  computation_cache.compiler(compiler_fn, 'other')(process.next)
  assert sum(calls.values()) == 2  # Another compiler is another key.
  other = _build(helpers.quick_config(algo='fedprox', mu=0.25))
  computation_cache.compiler(compiler_fn, 'test')(other.next)
  assert sum(calls.values()) == 3  # Another computation: another key.


def test_a_damaged_entry_is_compiled_again(cache):
  compiler_fn, calls = _counting_compiler()
  process = _build()
  compile_fn = computation_cache.compiler(compiler_fn, 'test')
  compiled = compile_fn(process.next)
  (entry,) = cache.glob('compiled-*.tffc')
  for damage in (
    lambda data: (
      data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:]
    ),  # A flipped bit in the computation.
    lambda data: data[:1000],
  ):  # Truncated.
    entry.write_bytes(damage(entry.read_bytes()))
    before = sum(calls.values())
    again = compile_fn(process.next)  # Detected, discarded, compiled.
    assert sum(calls.values()) == before + 1
    assert again.type_signature == compiled.type_signature
    assert _serialized(compile_fn(process.next)) == _serialized(again)
    assert sum(calls.values()) == before + 1  # The new entry is whole.


def test_the_cache_can_be_turned_off(cache, monkeypatch):
  monkeypatch.setenv('TFF_ALGOS_COMPUTATION_CACHE', '0')
  compiler_fn, calls = _counting_compiler()
  process = _build()
  for _ in range(2):
    computation_cache.compiler(compiler_fn, 'test')(process.next)
  assert sum(calls.values()) == 2
  assert not cache.exists()


def test_rounds_are_the_same_with_a_compiled_form_from_the_cache(
  cache, monkeypatch
):
  process = _build()
  cold = _rounds(process)  # Compiled and stored...
  warm = _rounds(process)  # ... then served from the cache.
  monkeypatch.setenv('TFF_ALGOS_COMPUTATION_CACHE', '0')
  assert cold == warm == _rounds(process)


_BUILD = """
import hashlib, sys
import tensorflow_federated as tff
import tasks
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config, resolve
process = trainer.build_process(resolve(Config(algo='fedprox')),
                                tasks.load_task('synthetic_1_1').model_fn)
print(hashlib.sha256(tff.framework.serialize_computation(
    process.next).SerializeToString(deterministic=True)).hexdigest())
"""


@pytest.mark.slow
def test_a_build_serializes_the_same_in_every_process():
  """The same code gives the same serialized computation in a new process
  (Keras's initializer seeds fixed while tracing), so a second run finds
  the compiled form of the first; within one process, the fingerprint
  ignores the names TensorFlow's counters give functions. The caller's
  random state is left as it was."""
  digests = {
    subprocess.run(
      [sys.executable, '-c', _BUILD],
      cwd=REPO,
      capture_output=True,
      text=True,
      check=True,
    ).stdout.split()[-1]
    for _ in range(2)
  }
  assert len(digests) == 1
  state = (random.getstate(), np.random.get_state()[1].tobytes())
  first, second = _build(), _build()
  assert (random.getstate(), np.random.get_state()[1].tobytes()) == state
  whole = lambda p: fingerprint.sha256(p.initialize, p.next)
  assert whole(first) == whole(second)
  assert whole(first) != whole(  # μ's initial value is in `initialize`.
    _build(helpers.quick_config(algo='fedprox', mu=0.25))
  )


@pytest.mark.fast
def test_every_cache_follows_the_same_environment(monkeypatch, tmp_path):
  """The computation cache, decoded CIFAR-10 and the loopback shim agree
  on the folder: $TFF_ALGOS_CACHE, else $XDG_CACHE_HOME/tff_algos (the
  shim: always the latter)."""
  from tasks import cifar10
  from tff_algos.runtime import loopback

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
  assert computation_cache.cache_dir() == str(tmp_path / 'own' / 'computations')
  assert os.path.dirname(loopback.loopback_shim()) == folder
