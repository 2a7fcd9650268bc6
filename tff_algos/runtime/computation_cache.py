"""A verified on-disk cache of compiled TFF computations.

The first call of each computation compiles it for the worker
(`desugar_and_transform_to_native`). Measured: the default run's (FedProx
on Synthetic(1,1)) first round, with compiling for the worker or its cache,
took 0.85 s cold and 0.38 s with the cache warm (docs/PERFORMANCE.md,
"Start-up and memory", "Where the time goes", 1a8e451): 0.47 s saved by
each run whose computations were compiled before (a sweep's next seed, a
re-run). Compiling FedProx's `next` alone: 1.5 s, a figure recorded with
this cache (c881480), not in docs/PERFORMANCE.md; it exceeds that whole
0.85 s round, so it was measured under conditions that were not recorded.
The same table's 0.03 s for "the process's computations" came from a cache
of built processes, which this module does not keep: a run traces its
process anew (below).

The compiler is a pure function of the serialized computation it is given,
so its results are cached in $TFF_ALGOS_CACHE/computations
(`runtime.cache_folder()`: without it $XDG_CACHE_HOME/tff_algos, else
~/.cache/tff_algos; $TFF_ALGOS_COMPUTATION_CACHE=0 turns the cache off),
keyed by the SHA-256 of the serialized input, the compiler's name and the
library versions: content-addressed, so an entry can only be the compiled
form of exactly that input, whatever code or files produced the input.

Nothing upstream of the serialized computation is cached: a learning
process is traced anew by every run, from the code and files as they are
then. (Building is made deterministic instead, `tracing.deterministic`,
so that the same code gives the same serialized computation and finds its
compiled form here.)

Every entry is verified when read: its stored key is compared in full with
the wanted one, each part's SHA-256 is checked, and the computation is
rebuilt with TFF's own type checks; before an entry is written it is read
back and its type signature compared with the compiled one. An entry that
fails any check is deleted and compiled again; a write that fails (a full
or read-only disk) only means no cache. A run's metrics.csv is
byte-identical with and without it (tests/runtime/test_computation_cache.py).
"""

import contextlib
import functools
import hashlib
import importlib
import json
import os
import sys
import tempfile

import numpy as np

from tff_algos.runtime import cache_folder

FORMAT = 4  # Bump when the entry format or the key's composition changes.
_MAGIC = b'tff_algos computation cache\n'
_MAX_ENTRIES = 400  # Least recently used entries beyond this are deleted.


class Uncacheable(Exception):
  """A computation whose compiled form cannot be stored faithfully."""


def cache_dir() -> str:
  return os.path.join(cache_folder(), 'computations')


def enabled() -> bool:
  return os.environ.get('TFF_ALGOS_COMPUTATION_CACHE', '1') != '0'


@functools.lru_cache(maxsize=1)
def versions():
  """The versions of everything the compiled form can depend on."""
  import tensorflow as tf
  import tensorflow_federated as tff

  found = dict(
    python=sys.version,
    tensorflow=tf.__version__,
    tensorflow_federated=tff.__version__,
    numpy=np.__version__,
    format=FORMAT,
  )
  from importlib import metadata

  for distribution in ('dm-tree', 'attrs', 'protobuf'):
    try:
      found[distribution] = metadata.version(distribution)
    except metadata.PackageNotFoundError:
      found[distribution] = None
  return found


def _key(key_material):
  return hashlib.sha256(
    json.dumps(key_material, sort_keys=True).encode()
  ).hexdigest()


# Types with their Python containers.


def _container_name(container):
  if container is None:
    return None
  module, qualname = container.__module__, container.__qualname__
  if _resolve([module, qualname]) is not container:
    raise Uncacheable(f'container {module}.{qualname} is not importable')
  return [module, qualname]


def _resolve(name):
  module, qualname = name
  try:
    value = importlib.import_module(module)
    for part in qualname.split('.'):
      value = getattr(value, part)
  except (ImportError, AttributeError):
    return None
  return value


def encode_type(type_spec):
  """A JSON-able description of a TFF type, Python containers included."""
  import tensorflow_federated as tff

  if type_spec is None:
    return None
  if isinstance(type_spec, tff.TensorType):
    return {
      'tensor': np.dtype(type_spec.dtype).str,
      'shape': None if type_spec.shape is None else list(type_spec.shape),
    }
  if isinstance(type_spec, tff.StructType):
    container = getattr(type_spec, 'python_container', None)
    return {
      'struct': [
        [name, encode_type(element)]
        for name, element in tff.structure.iter_elements(type_spec)
      ],
      'container': _container_name(container),
    }
  if isinstance(type_spec, tff.FederatedType):
    return {
      'federated': encode_type(type_spec.member),
      'placement': type_spec.placement.uri,
      'all_equal': type_spec.all_equal,
    }
  if isinstance(type_spec, tff.SequenceType):
    return {'sequence': encode_type(type_spec.element)}
  if isinstance(type_spec, tff.FunctionType):
    return {
      'function': encode_type(type_spec.parameter),
      'result': encode_type(type_spec.result),
    }
  raise Uncacheable(f'type {type_spec}')


def decode_type(encoded):
  import tensorflow_federated as tff
  from tensorflow_federated.python.core.impl.types import placements

  if encoded is None:
    return None
  if 'tensor' in encoded:
    return tff.TensorType(np.dtype(encoded['tensor']).type, encoded['shape'])
  if 'struct' in encoded:
    elements = [
      (name, decode_type(element)) for name, element in encoded['struct']
    ]
    if encoded['container'] is None:
      return tff.StructType(elements)
    container = _resolve(encoded['container'])
    if container is None:
      raise ValueError(f'container {encoded["container"]} not found')
    return tff.StructWithPythonType(elements, container)
  if 'federated' in encoded:
    return tff.FederatedType(
      decode_type(encoded['federated']),
      placements.uri_to_placement_literal(encoded['placement']),
      encoded['all_equal'],
    )
  if 'sequence' in encoded:
    return tff.SequenceType(decode_type(encoded['sequence']))
  if 'function' in encoded:
    return tff.FunctionType(
      decode_type(encoded['function']), decode_type(encoded['result'])
    )
  raise ValueError(f'unknown type encoding {encoded}')


# Entries: a header (the key and each part's type, size and SHA-256), then
# the parts' bytes.


def _entry_path(kind, key):
  return os.path.join(cache_dir(), f'{kind}-{key}.tffc')


def _write_entry(path, key_material, parts):
  """Writes `parts` ([(name, encoded type, bytes)]) atomically."""
  header = dict(
    key=key_material,
    parts=[
      dict(
        name=name,
        type=type_,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
      )
      for name, type_, data in parts
    ],
  )
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.partial-')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(_MAGIC)
      f.write(json.dumps(header, sort_keys=True).encode() + b'\n')
      for _, _, data in parts:
        f.write(data)
    os.replace(partial, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(partial)
    raise


def _read_entry(path, key_material):
  """[(name, encoded type, bytes)] of a verified entry, or None (missing,
  or deleted because it failed a check)."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError:
    return None
  try:
    if not data.startswith(_MAGIC):
      raise ValueError('not an entry')
    newline = data.index(b'\n', len(_MAGIC))
    header = json.loads(data[len(_MAGIC) : newline])
    if header['key'] != key_material:
      raise ValueError('another key')
    parts, offset = [], newline + 1
    for part in header['parts']:
      blob = data[offset : offset + part['size']]
      offset += part['size']
      if (
        len(blob) != part['size']
        or hashlib.sha256(blob).hexdigest() != part['sha256']
      ):
        raise ValueError(f'part {part["name"]} is damaged')
      parts.append((part['name'], part['type'], blob))
    if offset != len(data):
      raise ValueError('trailing bytes')
  except (ValueError, KeyError, TypeError) as e:
    _discard(path, e)
    return None
  with contextlib.suppress(OSError):
    os.utime(path)  # Recently used.
  return parts


def _discard(path, reason):
  from absl import logging

  logging.warning('computation cache: discarding %s (%s)', path, reason)
  with contextlib.suppress(OSError):
    os.unlink(path)


def _evict():
  """Deletes the least recently used entries beyond _MAX_ENTRIES."""
  try:
    entries = [e for e in os.scandir(cache_dir()) if e.name.endswith('.tffc')]
    if len(entries) <= _MAX_ENTRIES:
      return
    entries.sort(key=lambda e: e.stat().st_mtime)
    for entry in entries[: len(entries) - _MAX_ENTRIES]:
      with contextlib.suppress(OSError):
        os.unlink(entry.path)
  except OSError:
    pass


def _computation(proto_bytes, type_spec):
  import tensorflow_federated as tff
  from tensorflow_federated.proto.v0 import computation_pb2
  from tensorflow_federated.python.core.impl.computation import computation_impl

  return computation_impl.ConcreteComputation(
    computation_proto=computation_pb2.Computation.FromString(proto_bytes),
    context_stack=tff.framework.get_context_stack(),
    annotated_type=type_spec,
  )


def _proto_bytes(computation):
  import tensorflow_federated as tff

  return tff.framework.serialize_computation(computation).SerializeToString(
    deterministic=True
  )


# Compiled computations.


def compiler(compiler_fn, name):
  """`compiler_fn` (a TFF execution context's compiler: computation →
  computation), with its results cached by the input's content."""

  def compile_fn(computation):
    if not enabled():
      return compiler_fn(computation)
    try:
      source = _proto_bytes(computation)
    except Exception:
      return compiler_fn(computation)  # Not a serializable computation.
    key_material = dict(
      kind='compiled',
      compiler=name,
      versions=versions(),
      input=hashlib.sha256(source).hexdigest(),
    )
    key = _key(key_material)
    path = _entry_path('compiled', key)
    parts = _read_entry(path, key_material)
    if parts is not None:
      try:
        ((_, encoded, data),) = parts
        compiled = _computation(data, decode_type(encoded))
        return compiled
      except Exception as e:
        _discard(path, e)
    compiled = compiler_fn(computation)
    try:
      encoded = encode_type(compiled.type_signature)
      data = _proto_bytes(compiled)
      if _computation(data, decode_type(encoded)).type_signature != (
        compiled.type_signature
      ):
        raise Uncacheable('type signature does not round-trip')
      _write_entry(path, key_material, [('compiled', encoded, data)])
      _evict()
    except (Uncacheable, OSError, AttributeError, TypeError, ValueError):
      pass
    return compiled

  return compile_fn
