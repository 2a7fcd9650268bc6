"""Runs a command line script with timed marks at its start-up phases
(for benchmarks/startup.py; no TensorFlow here).

  python benchmarks/startup_probe.py OUT.json CHECKOUT/run_experiment.py ARGS...

Runs the script as `python SCRIPT ARGS` would (its folder first on
sys.path, `__main__`), after installing an import hook that wraps, as each
module is imported, the functions whose return ends a phase:

  import tensorflow / import tensorflow_federated   (the modules' first import)
  data loaded            tasks.load_task
  evaluation built       simulation.evaluation.build_evaluation
  computations built     simulation.trainer.build_process (in a checkout
                         without simulation.trainer: its namesake in
                         simulation.experiment)
  first call             simulation.loop.Loop.initial_state (TFF calls)
  round N                simulation.loop.Loop.step
  worker spawned         runtime.local._Worker.spawn (or runtime.prestart.spawn,
                         where it exists); 'worker listening' when its
                         channel is ready (watched from a thread)

Only public-enough names that every version since ff5dc54 has, so the same
probe times the code before and after a change. At the end of round 1 and
at exit it records /proc/PID/status memory figures of this process and of
the local TFF worker (VmHWM is the peak RSS); the worker's are read just
before `runtime.stop()` terminates it. Times are time.time(); the parent
passes the moment it started the process in $STARTUP_PROBE_T0.
"""

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_OUT = sys.argv[1]
_MARKS = []
_VALUES = {}
_WORKER = {}  # pid → last memory figures read


def mark(label):
  if all(label != m for m, _ in _MARKS):
    _MARKS.append((label, time.time()))
    figures = memory()  # What this process holds at the end of the phase.
    _VALUES.setdefault('memory_at_marks', {})[label] = {
      k: figures.get(k) for k in ('VmRSS', 'RssAnon', 'RssFile', 'VmHWM')
    }
    # CPU seconds of this process so far (less skewed by other load).
    _VALUES.setdefault('cpu_at_marks', {})[label] = time.process_time()


def memory(pid='self'):
  figures = {}
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        key, _, value = line.partition(':')
        if key in (
          'VmHWM',
          'VmRSS',
          'RssAnon',
          'RssFile',
          'RssShmem',
          'Threads',
        ):
          figures[key] = int(value.split()[0])
  except OSError:
    pass
  return figures


def _worker_pids():
  """Pids of our live child worker_binary processes."""
  pids = []
  for pid in os.listdir('/proc'):
    if not pid.isdigit():
      continue
    try:
      with open(f'/proc/{pid}/stat') as f:
        stat = f.read()
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        command = f.read().split(b'\0')[0]
    except OSError:
      continue
    if int(stat.rsplit(')', 1)[1].split()[1]) == os.getpid() and (
      command.endswith(b'worker_binary')
    ):
      pids.append(int(pid))
  return pids


def snapshot(label):
  _VALUES[f'{label}_python'] = memory()
  for pid in _worker_pids():
    _VALUES[f'{label}_worker'] = _WORKER[pid] = memory(pid)


def _wrap_return(owner, name, after):
  function = getattr(owner, name, None)
  if function is None or getattr(function, '_probed', False):
    return

  def wrapped(*args, **kwargs):
    result = function(*args, **kwargs)
    after(args, kwargs, result)
    return result

  wrapped._probed = True
  wrapped.__wrapped__ = function
  # Only observes: a checkout whose computation cache fingerprints our code
  # (c881480 up to c0cedfc) skips wrappers marked so, so that its cache key
  # does not include the probe's marks.
  wrapped.__tff_algos_observer__ = True
  setattr(owner, name, wrapped)


def _on_step(args, kwargs, result):
  del kwargs, result
  round_num = args[2] if len(args) > 2 else None
  mark(f'round {round_num}')
  if round_num == 1:
    snapshot('round_1')


def _on_spawn(args, kwargs, result):
  del kwargs, result
  worker = args[0]
  mark('worker spawned')
  channel = getattr(worker, '_channel', None)
  if channel is None:
    return

  def watch():
    import grpc

    try:
      grpc.channel_ready_future(channel).result(timeout=120)
      mark('worker listening')
    except Exception:
      pass

  threading.Thread(target=watch, daemon=True).start()


def _patch_stop(local):
  worker_class = getattr(local, '_Worker', None)
  if worker_class is None:
    return
  stop = worker_class.stop

  def stopping(self, *args, **kwargs):
    process = getattr(self, 'process', None)
    if process is not None and process.poll() is None:
      _WORKER[process.pid] = memory(process.pid)
    return stop(self, *args, **kwargs)

  stopping.__wrapped__ = stop
  stopping.__tff_algos_observer__ = True
  worker_class.stop = stopping


PATCHES = {
  'tasks': lambda m: _wrap_return(
    m, 'load_task', lambda *_: mark('data loaded')
  ),
  'tff_algos.simulation.evaluation': lambda m: _wrap_return(
    m, 'build_evaluation', lambda *_: mark('evaluation built')
  ),
  'tff_algos.simulation.experiment': lambda m: _wrap_return(
    m, 'build_process', lambda *_: mark('computations built')
  ),
  'tff_algos.simulation.trainer': lambda m: _wrap_return(
    m, 'build_process', lambda *_: mark('computations built')
  ),
  'tff_algos.simulation.loop': lambda m: (
    _wrap_return(m.Loop, 'initial_state', lambda *_: mark('first call')),
    _wrap_return(m.Loop, 'step', _on_step),
    _wrap_return(
      m.Loop,
      'train',
      lambda args, kwargs, result: mark(
        f'trained {args[2] if len(args) > 2 else None}'
      ),
    ),
  ),
  'tff_algos.runtime.prestart': lambda m: _wrap_return(
    m, 'spawn', lambda *_: mark('worker spawned')
  ),
  'tff_algos.runtime.local': lambda m: (
    _wrap_return(m._Worker, 'spawn', _on_spawn),
    _patch_stop(m),
  ),
}
IMPORTS = ('tensorflow', 'tensorflow_federated')


class _Loader(importlib.abc.Loader):
  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    self._loader.exec_module(module)
    name = module.__name__
    if name in IMPORTS:
      mark(f'import {name}')
    if name in PATCHES:
      PATCHES[name](module)


class _Finder(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name not in PATCHES and name not in IMPORTS:
      return None
    for finder in sys.meta_path:
      if finder is self:
        continue
      spec = finder.find_spec(name, path, target)
      if spec is not None:
        if spec.loader is not None:
          spec.loader = _Loader(spec.loader)
        return spec
    return None


def _write():
  snapshot('exit')
  _VALUES['worker_at_stop'] = list(_WORKER.values())
  _VALUES['modules'] = len(sys.modules)
  _VALUES['modules_loaded'] = sorted(
    n
    for n in (
      'jax',
      'tensorflow_probability',
      'tensorflow_privacy',
      'dp_accounting',
      'tensorflow_datasets',
      'pandas',
      'matplotlib',
      'scipy',
      'tqdm',
      'tensorboard',
    )
    if n in sys.modules
    and type(sys.modules[n]).__name__ not in ('_LazyModule', '_Deferred')
  )
  with open(_OUT, 'w') as f:
    json.dump(
      dict(
        t0=float(os.environ.get('STARTUP_PROBE_T0', 'nan')),
        exit=time.time(),
        marks=_MARKS,
        values=_VALUES,
      ),
      f,
      indent=1,
    )


def main():
  script = sys.argv[2]
  sys.argv = sys.argv[2:]
  sys.path[0] = os.path.dirname(os.path.abspath(script))
  sys.meta_path.insert(0, _Finder())
  atexit.register(_write)  # Registered first: runs after the runtime's stop.
  import runpy

  runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
  main()
