"""Importing TensorFlow Federated faster: only what a run uses, no garbage
collection while it loads.

A bare `import tensorflow_federated` takes 4.0–4.3 s on the 2-core machine
of docs/PERFORMANCE.md (5.3–6.6 s at a slower hour), and part of it
loads modules a run never uses: TFF's differential-privacy aggregators
import TensorFlow Privacy, which imports TensorFlow Probability (0.8 s)
for one sampler, and dp_accounting, which imports SciPy's signal and stats
packages; TensorFlow's TFLite converter imports JAX (0.4 s and 80 MB of
jaxlib) for its optional JAX input. And Python's cyclic garbage collector
runs dozens of times during the import, each time over every object
created so far (7 full collections, 1–2 s). (These per-part figures are
not in docs/PERFORMANCE.md; what it measured follows.)

Measured (docs/PERFORMANCE.md, "Start-up and memory", "Where the time
goes", the default Synthetic run, cold, ff5dc54 against the start-up work
1a8e451): importing TensorFlow 2.79 → 1.93 s and TFF 1.11 → 0.56 s, with
5,618 → 4,563–4,578 modules loaded (the garbage collector paused; in
1a8e451 the worker, started first by `prestart`, ran beside these
imports). Memory: no effect measured; after the imports the MNIST 2NN
run's process held 425–497 MB in every version.

`defer_unused()`, called before TensorFlow is imported:
  * imports the modules in DEFERRED lazily: each is executed on the first
    access to an attribute it defines (or the import of a submodule), so a
    run that uses TFF's DP aggregators (a `tensorflow_privacy` query, say)
    loads them then, and one that does not never does. Unlike
    `importlib.util.LazyLoader`, the attributes the import system sets
    (`__file__`, `__spec__`, ...) do not load it: AutoGraph reads
    `__file__` of every loaded module whenever it converts a function;
  * makes `import jax` fail inside TensorFlow's TFLite utilities only
    (`tensorflow.lite.python.util`, which then sets its optional JAX hook
    to None, as when JAX is not installed); anyone else importing JAX gets
    it;
  * turns the garbage collector off until `tensorflow_federated` has been
    imported, then freezes the objects the imports created (`gc.freeze`:
    later collections skip them; they live as long as the process anyway)
    and turns it back on.
None of this changes what any computation does; `python -m pytest` runs
with it as the command line does.
"""

import gc
import importlib.abc
import importlib.util
import sys
import types

DEFERRED = (
  'tensorflow_probability',  # tensorflow_privacy's discrete Gaussian.
  'scipy.signal',  # dp_accounting's PLD accountant.
  # `tff.jax`: TFF's JAX front end (and with it JAX).
  'tensorflow_federated.python.core.environments.jax',
  'h5py',  # Keras's HDF5 saving.
)
BLOCKED_FOR = {'jax': ('tensorflow.lite.python.util',)}
_FINISH_WITH = 'tensorflow_federated'


def _importer_name():
  """__name__ of the module whose code runs the current import."""
  frame = sys._getframe(2)
  while frame is not None:
    name = frame.f_globals.get('__name__', '')
    if not name.startswith('importlib') and name != __name__:
      return name
    frame = frame.f_back
  return ''


class _Deferred(types.ModuleType):
  """A module not executed yet: the first access to an attribute it does
  not have yet executes it (in place) and answers from the result."""

  def __getattr__(self, attribute):
    _execute(self)
    return getattr(self, attribute)


def _execute(module):
  loader = module.__dict__.pop('__deferred_loader__', None)
  if loader is None:
    raise AttributeError(module.__name__)
  module.__class__ = types.ModuleType
  loader.exec_module(module)


class _DeferredLoader(importlib.abc.Loader):
  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return _Deferred(spec.name)

  def exec_module(self, module):
    module.__dict__['__deferred_loader__'] = self._loader


class _Finder(importlib.abc.MetaPathFinder):
  """Defers DEFERRED modules; blocks BLOCKED_FOR imports; turns the
  garbage collector back on once _FINISH_WITH is imported."""

  def __init__(self):
    self._busy = set()

  def find_spec(self, name, path, target=None):
    if name in BLOCKED_FOR and _importer_name() in BLOCKED_FOR[name]:
      raise ImportError(
        f'{name} is not imported for '
        f'{_importer_name()} (tff_algos.runtime.imports)'
      )
    parent = sys.modules.get(name.rpartition('.')[0])
    if isinstance(parent, _Deferred):
      _execute(parent)  # Its submodules expect it executed.
    if (name not in DEFERRED and name != _FINISH_WITH) or name in self._busy:
      return None
    self._busy.add(name)
    try:
      spec = importlib.util.find_spec(name)
    finally:
      self._busy.discard(name)
    if spec is None or spec.loader is None:
      return spec
    if name == _FINISH_WITH:
      spec.loader = _FinishingLoader(spec.loader)
    else:
      spec.loader = _DeferredLoader(spec.loader)
    return spec


class _FinishingLoader(importlib.abc.Loader):
  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    try:
      self._loader.exec_module(module)
    finally:
      _collect_again()


_FINDER = None
_GC_WAS_ENABLED = None


def _collect_again():
  global _GC_WAS_ENABLED
  if _GC_WAS_ENABLED is None:
    return
  was_enabled, _GC_WAS_ENABLED = _GC_WAS_ENABLED, None
  gc.freeze()
  if was_enabled:
    gc.enable()


def defer_unused() -> None:
  """See the module docstring. Idempotent; does nothing once TFF has been
  imported."""
  global _FINDER, _GC_WAS_ENABLED
  if _FINDER is not None or _FINISH_WITH in sys.modules:
    return
  _FINDER = _Finder()
  sys.meta_path.insert(0, _FINDER)
  _GC_WAS_ENABLED = gc.isenabled()
  gc.disable()
