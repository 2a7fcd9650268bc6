"""A verified on-disk cache of TFF computations: built ones and compiled ones.

Building a learning process traces its TensorFlow and federated
computations (seconds), and the first call of each computation compiles it
for the worker (`desugar_and_transform_to_native`: 1.5 s for FedProx's
`next`). Both are pure functions of what goes in, so both are cached in
$TFF_ALGOS_CACHE/computations (`runtime.cache_folder()`: without it
$XDG_CACHE_HOME/tff_algos, else ~/.cache/tff_algos;
$TFF_ALGOS_COMPUTATION_CACHE=0 turns the cache off):

* **Compiled computations** (`compiler`): keyed by the SHA-256 of the
  serialized input computation, the compiler's name and the library
  versions; content-addressed, so an entry can only be for exactly that
  input.
* **Built processes** (`build`): a `tff.learning.templates.LearningProcess`
  is its six computations (initialize, next, the model-weight and
  hyper-parameter accessors); the entry holds their serialized protos and
  their type signatures with the Python containers (ModelWeights,
  OrderedDict, ...) that serialization drops. The key is everything that
  shapes them:
    - the library versions (Python, TensorFlow, TFF, Keras, NumPy, ...) and
      the Keras settings that enter a graph (floatx, dtype policy);
    - the code: every function and class (their bytecode, defaults,
      closures) and constant of the loaded `tff_algos` and `tasks`
      modules, as they are in memory (so an edited or monkeypatched
      function is a different key);
    - the algorithm's registry entry and the model function, walked through
      their closures and the globals their code reads (a task's
      vocabulary size, an embedding matrix, the input spec), and the
      client input;
    - the settings the build read: the build runs on a copy of the
      settings that records which of them it reads, and the entry keeps
      their values; a later build hits it only if it has the same values
      for all of them (so the seed, the rounds or K never split the cache
      unless a build reads them, and a new setting an algorithm reads is
      never missed).
  Anything the fingerprint cannot pin down (an object of an unknown type
  in a closure, code from an unversioned package) makes the build
  uncacheable: it is built as without the cache. The build runs with
  Python's, NumPy's and Keras's global random generators seeded from the
  key and restored afterwards (Keras freezes seeds drawn from them into
  traced initializers), so a built entry is a function of its key alone and
  a cache hit leaves the process's random state as a miss does.

Every entry is verified when read: its stored key is compared in full with
the wanted one, each part's SHA-256 is checked, and the computations are
rebuilt with TFF's own type checks; and before an entry is written, it is
read back and its type signatures compared with the built ones. An entry
that fails any check is deleted and rebuilt; a write that fails (a full or
read-only disk) only means no cache. Results are the same with and without
the cache: it returns the same computations (tests/runtime/
test_computation_cache.py; a run's metrics.csv is byte-identical).
"""

import contextlib
import dataclasses
import enum
import fcntl
import functools
import hashlib
import importlib
import json
import os
import random
import re
import sys
import tempfile
import types

import numpy as np

from tff_algos.runtime import cache_folder

FORMAT = 3  # Bump when the entry format or the key's composition changes.
_MAGIC = b'tff_algos computation cache\n'
_MAX_ENTRIES = 400  # Least recently used entries beyond this are deleted.
_OUR_PACKAGES = ('tff_algos', 'tasks')
# Third-party packages whose objects are keyed by name and version.
_VERSIONED = ('tensorflow', 'tensorflow_federated', 'keras', 'numpy',
              'tree', 'attr', 'absl', 'google', 'tf_keras')

STATS = {'build': None}  # What the last build lookup did: 'hit', 'miss',
                         # 'off', 'uncacheable'.


class Uncacheable(Exception):
  """The fingerprint cannot pin down an input (it is built uncached)."""


def cache_dir() -> str:
  return os.path.join(cache_folder(), 'computations')


def enabled() -> bool:
  return os.environ.get('TFF_ALGOS_COMPUTATION_CACHE', '1') != '0'


# Fingerprints.


def _top(module_name):
  return (module_name or '').partition('.')[0]


def _is_library(module_name):
  top = _top(module_name)
  return top in _VERSIONED or top in sys.stdlib_module_names


def versions():
  """The versions of everything whose objects are keyed by name."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  found = dict(python=sys.version, tensorflow=tf.__version__,
               tensorflow_federated=tff.__version__, numpy=np.__version__,
               format=FORMAT)
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  for distribution in ('keras', 'dm-tree', 'attrs', 'absl-py', 'protobuf'):
    try:
      found[distribution] = metadata.version(distribution)
    except metadata.PackageNotFoundError:
      found[distribution] = None
  found['floatx'] = tf.keras.backend.floatx()
  found['dtype_policy'] = tf.keras.mixed_precision.global_policy().name
  return found


class _Fingerprint:
  """A SHA-256 over a walk of Python objects (see the module docstring)."""

  _MAX_DEPTH = 60

  def __init__(self):
    self._hash = hashlib.sha256()
    self._seen = {}
    self._keep = []  # Keeps the ids in _seen unique while we walk.

  def hexdigest(self):
    return self._hash.hexdigest()

  def _put(self, *parts):
    for part in parts:
      data = part if isinstance(part, bytes) else str(part).encode()
      self._hash.update(len(data).to_bytes(8, 'little'))
      self._hash.update(data)

  def add(self, value, depth=0):
    if depth > self._MAX_DEPTH:
      raise Uncacheable('too deep')
    if value is None or isinstance(value, (bool, int, float, complex, str,
                                           bytes)):
      self._put(type(value).__name__, repr(value))
      return
    if id(value) in self._seen:
      self._put('seen', self._seen[id(value)])
      return
    self._seen[id(value)] = len(self._seen)
    self._keep.append(value)
    if isinstance(value, (tuple, list)):
      self._put(type(value).__name__, len(value))
      if type(value) not in (tuple, list):  # A namedtuple.
        self._add_class(type(value), depth)
      for item in value:
        self.add(item, depth + 1)
    elif isinstance(value, dict):
      self._put(type(value).__name__, len(value))
      for key, item in value.items():
        self.add(key, depth + 1)
        self.add(item, depth + 1)
    elif isinstance(value, (set, frozenset)):
      self._put(type(value).__name__,
                *sorted(repr(item) for item in value))
    elif isinstance(value, np.ndarray):
      self._put('ndarray', value.dtype.str, value.shape,
                hashlib.sha256(np.ascontiguousarray(value).tobytes()).digest())
    elif isinstance(value, (np.generic, np.dtype)):
      self._put(type(value).__name__, repr(value))
    elif isinstance(value, types.ModuleType):
      self._put('module', value.__name__)
    elif isinstance(value, types.FunctionType):
      self._add_function(value, depth)
    elif isinstance(value, types.MethodType):
      self._put('method')
      self.add(value.__func__, depth + 1)
      self.add(value.__self__, depth + 1)
    elif isinstance(value, (types.BuiltinFunctionType, types.WrapperDescriptorType,
                            types.MethodDescriptorType)):
      self._put('builtin', getattr(value, '__module__', None),
                value.__qualname__)
    elif isinstance(value, functools.partial):
      self._put('partial')
      self.add(value.func, depth + 1)
      self.add(value.args, depth + 1)
      self.add(value.keywords, depth + 1)
    elif isinstance(value, type):
      self._add_class(value, depth)
    elif isinstance(value, enum.Enum):
      self._put('enum', type(value).__module__, type(value).__qualname__,
                value.name)
    elif isinstance(value, (staticmethod, classmethod, property)):
      self._put(type(value).__name__)
      for part in ((value.fget, value.fset, value.fdel) if isinstance(
          value, property) else (value.__func__,)):
        self.add(part, depth + 1)
    elif isinstance(value, re.Pattern):
      self._put('pattern', value.pattern, value.flags)
    elif _is_value_like_library_object(value):
      self._put('library_value', type(value).__module__,
                type(value).__qualname__, repr(value))
    elif _is_library(type(value).__module__) and _plain_repr(value):
      # E.g. dataclasses' field-default sentinels: their repr is their value.
      self._put('library_repr', type(value).__module__,
                type(value).__qualname__, _plain_repr(value))
    elif dataclasses.is_dataclass(value) or (
        not _is_library(type(value).__module__) and
        hasattr(value, '__dict__')):
      self._put('object')
      self._add_class(type(value), depth)
      self.add(dict(vars(value)), depth + 1)
    else:
      raise Uncacheable(f'{type(value).__module__}.'
                        f'{type(value).__qualname__}')

  def _add_function(self, function, depth):
    while getattr(function, '__tff_algos_observer__', False):
      function = function.__wrapped__  # A wrapper that only observes.
    module = function.__module__
    if _is_library(module):
      self._put('library_function', module, function.__qualname__)
      return
    code = function.__code__
    self._put('function', module, function.__qualname__, _code_text(code))
    self.add(function.__defaults__, depth + 1)
    self.add(function.__kwdefaults__, depth + 1)
    self.add(dict(function.__dict__), depth + 1)  # E.g. per_client_metrics.
    self.add([cell.cell_contents if _cell_full(cell) else '<empty>'
              for cell in function.__closure__ or ()], depth + 1)
    names = sorted(_global_names(code))
    globals_ = function.__globals__
    for name in names:
      if name in globals_:
        value = globals_[name]
        if isinstance(value, types.ModuleType):
          self._put('global_module', name, value.__name__)
        elif _top(getattr(value, '__module__', None)) in _OUR_PACKAGES and (
            isinstance(value, (types.FunctionType, type))):
          # Our code is in the key by module (`_code_fingerprint`).
          self._put('our_global', name, value.__module__,
                    value.__qualname__)
        else:
          self._put('global', name)
          self.add(value, depth + 1)

  def _add_class(self, cls, depth):
    module = cls.__module__
    if _is_library(module):
      self._put('library_class', module, cls.__qualname__)
      return
    self._put('class', module, cls.__qualname__)
    for base in cls.__bases__:
      self._add_class(base, depth + 1)
    for name, member in sorted(vars(cls).items()):
      if name in ('__dict__', '__weakref__', '__doc__', '__module__',
                  '__annotations__', '__dataclass_fields__',
                  '__dataclass_params__', '__match_args__', '__slots__',
                  '__hash__', '__abstractmethods__', '_abc_impl'):
        continue
      self._put(name)
      self.add(member, depth + 1)


def _cell_full(cell):
  try:
    cell.cell_contents  # pylint: disable=pointless-statement
    return True
  except ValueError:
    return False


def _const_text(value):
  if isinstance(value, types.CodeType):
    return _code_text(value)
  if isinstance(value, (frozenset, set)):  # Ordered by hash: sorted.
    return 'frozenset(' + repr(sorted(_const_text(v) for v in value)) + ')'
  if isinstance(value, tuple):
    return '(' + ', '.join(_const_text(v) for v in value) + ',)'
  return repr(value)


def _code_text(code):
  """A code object's content, deterministically (`marshal.dumps` is not: it
  marks objects by their reference counts, which change as a program
  runs)."""
  return repr((code.co_code, code.co_argcount, code.co_posonlyargcount,
               code.co_kwonlyargcount, code.co_flags, code.co_names,
               code.co_varnames, code.co_freevars, code.co_cellvars,
               [_const_text(c) for c in code.co_consts]))


def _global_names(code):
  names = set(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names |= _global_names(const)
  return names


def _plain_repr(value):
  """repr(value) if it names no memory address (then it is a value), else
  None."""
  try:
    text = repr(value)
  except Exception:  # pylint: disable=broad-except
    return None
  return None if re.search(r' at 0x[0-9a-f]+', text) else text


def _is_value_like_library_object(value):
  """Library objects whose repr is their whole value (TensorSpec, DType,
  TensorShape, ...)."""
  module = type(value).__module__ or ''
  if not _is_library(module):
    return False
  name = type(value).__name__
  return name in ('TensorSpec', 'TensorShape', 'DType', 'RaggedTensorSpec',
                  'SparseTensorSpec', 'BoundedTensorSpec', 'Dimension')


# The modules whose code can shape a build (importing them has no side
# effects: not the runtime's context, the command lines or their flags).
_CODE_SCOPE = ('tff_algos.algorithms', 'tff_algos.learning',
               'tff_algos.simulation', 'tff_algos.runtime.tracing',
               'tff_algos.lazy', 'tasks')


def _in_scope(name):
  return name == 'tff_algos' or any(
      name == scope or name.startswith(scope + '.') for scope in _CODE_SCOPE)


def _loaded_modules():
  """The names of the loaded modules of _CODE_SCOPE."""
  return sorted(
      name for name, module in list(sys.modules.items())
      if _in_scope(name) and module is not None and
      type(module).__name__ != '_Module')  # lazy.module stand-ins.


def _code_fingerprint(names):
  """The in-memory code of the modules `names` (imported here if need be):
  functions and classes (bytecode, defaults, closures) and constants of
  simple types (not mutable state, which holds run-time values). A build
  records the modules loaded when it was made; a later lookup fingerprints
  those same modules, so that what else happens to be loaded does not
  matter."""
  fingerprint = _Fingerprint()
  for name in names:
    module = importlib.import_module(name)
    fingerprint._put('module', name)  # pylint: disable=protected-access
    for attribute, value in sorted(vars(module).items()):
      if attribute.startswith('__') and attribute != '__getattr__':
        continue
      if isinstance(value, (types.FunctionType, type)) and getattr(
          value, '__module__', None) == name:
        fingerprint._put(attribute)  # pylint: disable=protected-access
        try:
          fingerprint.add(value)
        except Uncacheable:
          fingerprint._put('uncacheable')  # pylint: disable=protected-access
      elif isinstance(value, (types.FunctionType, type)):
        # Imported from elsewhere (or monkeypatched in): by origin.
        fingerprint._put(attribute, 'from', getattr(value, '__module__', None),  # pylint: disable=protected-access
                         getattr(value, '__qualname__', None))
        if _top(getattr(value, '__module__', None)) not in _OUR_PACKAGES:
          try:
            fingerprint.add(value)
          except Uncacheable:
            fingerprint._put('uncacheable')  # pylint: disable=protected-access
      elif value is None or isinstance(value, (bool, int, float, str, bytes,
                                               tuple, frozenset)):
        try:
          fingerprint._put(attribute)  # pylint: disable=protected-access
          fingerprint.add(value)
        except Uncacheable:
          fingerprint._put('uncacheable')  # pylint: disable=protected-access
  return fingerprint.hexdigest()


def fingerprint(*values) -> str:
  """The fingerprint of `values` (Uncacheable if it cannot be pinned down)."""
  result = _Fingerprint()
  for value in values:
    result.add(value)
  return result.hexdigest()


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
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if type_spec is None:
    return None
  if isinstance(type_spec, tff.TensorType):
    return {'tensor': np.dtype(type_spec.dtype).str,
            'shape': None if type_spec.shape is None else list(
                type_spec.shape)}
  if isinstance(type_spec, tff.StructType):
    container = getattr(type_spec, 'python_container', None)
    return {'struct': [[name, encode_type(element)] for name, element in
                       tff.structure.iter_elements(type_spec)],
            'container': _container_name(container)}
  if isinstance(type_spec, tff.FederatedType):
    return {'federated': encode_type(type_spec.member),
            'placement': type_spec.placement.uri,
            'all_equal': type_spec.all_equal}
  if isinstance(type_spec, tff.SequenceType):
    return {'sequence': encode_type(type_spec.element)}
  if isinstance(type_spec, tff.FunctionType):
    return {'function': encode_type(type_spec.parameter),
            'result': encode_type(type_spec.result)}
  raise Uncacheable(f'type {type_spec}')


def decode_type(encoded):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if encoded is None:
    return None
  if 'tensor' in encoded:
    return tff.TensorType(np.dtype(encoded['tensor']).type, encoded['shape'])
  if 'struct' in encoded:
    elements = [(name, decode_type(element))
                for name, element in encoded['struct']]
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
        encoded['all_equal'])
  if 'sequence' in encoded:
    return tff.SequenceType(decode_type(encoded['sequence']))
  if 'function' in encoded:
    return tff.FunctionType(decode_type(encoded['function']),
                            decode_type(encoded['result']))
  raise ValueError(f'unknown type encoding {encoded}')


# Entries: a header (the key and each part's type, size and SHA-256), then
# the parts' bytes.


def _entry_path(kind, key):
  return os.path.join(cache_dir(), f'{kind}-{key}.tffc')


def _write_entry(path, key_material, parts):
  """Writes `parts` ([(name, encoded type, bytes)]) atomically."""
  header = dict(key=key_material, parts=[
      dict(name=name, type=type_, size=len(data),
           sha256=hashlib.sha256(data).hexdigest())
      for name, type_, data in parts])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fd, partial = tempfile.mkstemp(dir=os.path.dirname(path),
                                 prefix='.partial-')
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
    header = json.loads(data[len(_MAGIC):newline])
    if header['key'] != key_material:
      raise ValueError('another key')
    parts, offset = [], newline + 1
    for part in header['parts']:
      blob = data[offset:offset + part['size']]
      offset += part['size']
      if (len(blob) != part['size'] or
          hashlib.sha256(blob).hexdigest() != part['sha256']):
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
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.warning('computation cache: discarding %s (%s)', path, reason)
  with contextlib.suppress(OSError):
    os.unlink(path)


def _evict():
  """Deletes the least recently used entries beyond _MAX_ENTRIES."""
  try:
    entries = [e for e in os.scandir(cache_dir())
               if e.name.endswith('.tffc')]
    if len(entries) <= _MAX_ENTRIES:
      return
    entries.sort(key=lambda e: e.stat().st_mtime)
    for entry in entries[:len(entries) - _MAX_ENTRIES]:
      with contextlib.suppress(OSError):
        os.unlink(entry.path)
  except OSError:
    pass


def _computation(proto_bytes, type_spec):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.proto.v0 import computation_pb2  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  from tensorflow_federated.python.core.impl.computation import computation_impl  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  return computation_impl.ConcreteComputation(
      computation_proto=computation_pb2.Computation.FromString(proto_bytes),
      context_stack=tff.framework.get_context_stack(),
      annotated_type=type_spec)


def _proto_bytes(computation):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff.framework.serialize_computation(computation).SerializeToString(
      deterministic=True)


# Compiled computations.


def compiler(compiler_fn, name):
  """`compiler_fn` (a TFF execution context's compiler: computation →
  computation), with its results cached by the input's content."""

  def compile_fn(computation):
    if not enabled():
      return compiler_fn(computation)
    try:
      source = _proto_bytes(computation)
    except Exception:  # pylint: disable=broad-except
      return compiler_fn(computation)  # Not a serializable computation.
    key_material = dict(kind='compiled', compiler=name,
                        versions=_versions_once(),
                        input=hashlib.sha256(source).hexdigest())
    key = _key(key_material)
    path = _entry_path('compiled', key)
    parts = _read_entry(path, key_material)
    if parts is not None:
      try:
        (_, encoded, data), = parts
        compiled = _computation(data, decode_type(encoded))
        return compiled
      except Exception as e:  # pylint: disable=broad-except
        _discard(path, e)
    compiled = compiler_fn(computation)
    try:
      encoded = encode_type(compiled.type_signature)
      data = _proto_bytes(compiled)
      if _computation(data, decode_type(encoded)).type_signature != (
          compiled.type_signature):
        raise Uncacheable('type signature does not round-trip')
      _write_entry(path, key_material, [('compiled', encoded, data)])
      _evict()
    except (Uncacheable, OSError, AttributeError, TypeError, ValueError):
      pass
    return compiled

  return compile_fn


# Built learning processes.

_PROCESS_PARTS = ('initialize', 'next', 'get_model_weights',
                  'set_model_weights', 'get_hparams', 'set_hparams')


def _key(key_material):
  return hashlib.sha256(
      json.dumps(key_material, sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _versions_once():
  return versions()


def _recording(settings):
  """(a copy of the dataclass `settings` that records the names of the
  fields read from it, that set of names)."""
  read = set()
  fields = {f.name for f in dataclasses.fields(settings)}
  cls = type(settings)

  def __getattribute__(self, name):  # pylint: disable=invalid-name
    if name in fields:
      read.add(name)
    return cls.__getattribute__(self, name)

  recorder = type(cls.__name__, (cls,), {'__getattribute__': __getattribute__,
                                         '__module__': cls.__module__})
  return recorder(**{f: getattr(settings, f) for f in fields}), read


def _json_value(value):
  return json.loads(json.dumps(value, sort_keys=True, default=repr))


@contextlib.contextmanager
def _seeded(key):
  """Python's, NumPy's and Keras's global random generators seeded from
  `key`, restored afterwards."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from keras.src import backend as keras_backend  # pylint: disable=g-import-not-at-top
  python_state, numpy_state = random.getstate(), np.random.get_state()
  keras_generator = getattr(keras_backend._SEED_GENERATOR, 'generator', None)  # pylint: disable=protected-access
  seed = int(key[:8], 16)
  random.seed(seed)
  np.random.seed(seed)
  keras_backend._SEED_GENERATOR.generator = None  # pylint: disable=protected-access
  del tf
  try:
    yield
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    keras_backend._SEED_GENERATOR.generator = keras_generator  # pylint: disable=protected-access


def _manifest_path(key):
  return os.path.join(cache_dir(), f'build-{key}.json')


def _read_manifest(path):
  try:
    with open(path) as f:
      manifest = json.load(f)
    return manifest if isinstance(manifest, list) else []
  except (OSError, ValueError):
    return []


def build(build_fn, settings, *, model_fn, algorithm, client_input):
  """`build_fn(settings)` → a LearningProcess, from the cache when this
  build was made before (see the module docstring). `settings`: a
  dataclass (the run's Config); `model_fn`, `algorithm` (its registry
  entry) and `client_input`: what else `build_fn` builds from."""
  if not enabled():
    STATS['build'] = 'off'
    return build_fn(settings)
  try:
    base = dict(kind='process', versions=_versions_once(),
                inputs=fingerprint(model_fn, algorithm, client_input),
                settings_type=f'{type(settings).__module__}.'
                              f'{type(settings).__qualname__}')
  except Uncacheable:
    STATS['build'] = 'uncacheable'
    return build_fn(settings)
  base_key = _key(base)
  manifest_path = _manifest_path(base_key)
  names = {f.name for f in dataclasses.fields(settings)}
  code = {}  # The code fingerprint of a module list, once per build.

  def code_of(modules):
    if tuple(modules) not in code:
      code[tuple(modules)] = _code_fingerprint(modules)
    return code[tuple(modules)]

  for entry in _read_manifest(manifest_path):
    try:
      fields, modules = entry['fields'], entry['modules']
      if any(name not in names for name in fields) or not all(
          _json_value(getattr(settings, name)) == value
          for name, value in fields.items()):
        continue
      key_material = dict(base, code=code_of(modules), modules=modules,
                          fields=fields)
    except (TypeError, KeyError, ImportError):
      continue  # Not an entry of this version, or of code now gone.
    process = _load_process(_entry_path('process', _key(key_material)),
                            key_material)
    if process is not None:
      STATS['build'] = 'hit'
      return process
  recording, read = _recording(settings)
  with _seeded(base_key):
    process = build_fn(recording)
  STATS['build'] = 'miss'
  fields = {name: _json_value(getattr(settings, name)) for name in sorted(read)}
  modules = _loaded_modules()
  try:
    key_material = dict(base, code=code_of(modules), modules=modules,
                        fields=fields)
    _store_process(process, _entry_path('process', _key(key_material)),
                   key_material)
    _add_to_manifest(manifest_path, dict(fields=fields, modules=modules))
    _evict()
  except (Uncacheable, OSError):
    pass
  return process


def _add_to_manifest(path, entry):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + '.lock', 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    manifest = _read_manifest(path)
    if entry not in manifest:
      manifest.append(entry)
      fd, partial = tempfile.mkstemp(dir=os.path.dirname(path),
                                     prefix='.partial-')
      with os.fdopen(fd, 'w') as f:
        json.dump(manifest, f, sort_keys=True)
      os.replace(partial, path)


def _store_process(process, path, key_material):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if type(process) is not tff.learning.templates.LearningProcess:  # pylint: disable=unidiomatic-typecheck
    raise Uncacheable(f'a {type(process).__name__}')
  parts = []
  for name in _PROCESS_PARTS:
    computation = getattr(process, name)
    parts.append((name, encode_type(computation.type_signature),
                  _proto_bytes(computation)))
  # Verified before it is written: read back, the same type signatures.
  rebuilt = _process_from_parts(parts)
  for name in _PROCESS_PARTS:
    if getattr(rebuilt, name).type_signature != getattr(
        process, name).type_signature:
      raise Uncacheable(f'{name}\'s type signature does not round-trip')
  _write_entry(path, key_material, parts)


def _process_from_parts(parts):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  computations = {name: _computation(data, decode_type(encoded))
                  for name, encoded, data in parts}
  return tff.learning.templates.LearningProcess(
      computations['initialize'], computations['next'],
      computations['get_model_weights'], computations['set_model_weights'],
      get_hparams_fn=computations['get_hparams'],
      set_hparams_fn=computations['set_hparams'])


def _load_process(path, key_material):
  parts = _read_entry(path, key_material)
  if parts is None:
    return None
  try:
    if [name for name, _, _ in parts] != list(_PROCESS_PARTS):
      raise ValueError('other parts')
    return _process_from_parts(parts)
  except Exception as e:  # pylint: disable=broad-except
    _discard(path, e)
    return None
