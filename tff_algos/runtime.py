"""The one place that starts and stops TFF's local C++ runtime.

TFF 0.87 runs computations in a `worker_binary` subprocess that it starts on
first use, wired to the parent's stdout/stderr and stopped only by a
`__del__` that often never runs: the worker outlives Python and a pipeline
reading our output never sees EOF. `start()` replaces TFF's default context
with one whose worker
  * is started here, with its output going to a log file instead of our pipes,
  * dies with us even on SIGKILL (Linux `PR_SET_PDEATHSIG`),
  * is stopped at interpreter exit, on an exception, on SIGINT and on SIGTERM.
  * listens on loopback only (`loopback_bind.c`, preloaded into it): TFF's
    worker binds to all interfaces and serves an unauthenticated protocol.
Every entry point (CLI, tests, notebooks, benchmarks) calls `start()`.
"""

import atexit
import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

_WORKER_BINARY = os.path.join(
    os.path.dirname(tff.__file__), 'data', 'worker_binary')
_GRPC_OPTIONS = [('grpc.max_message_length', 2 * 10**9),
                 ('grpc.max_receive_message_length', 2 * 10**9),
                 ('grpc.max_send_message_length', 2 * 10**9)]
_PR_SET_PDEATHSIG = 1


_LOOPBACK_SOURCE = os.path.join(os.path.dirname(__file__), 'loopback_bind.c')


def loopback_shim():
  """Path of the compiled loopback-only bind() shim, or None (with a warning).

  Built once per source version with the system C compiler into
  $XDG_CACHE_HOME/tff_algos (default ~/.cache/tff_algos).
  """
  with open(_LOOPBACK_SOURCE, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  cache = os.path.join(os.environ.get('XDG_CACHE_HOME') or
                       os.path.expanduser('~/.cache'), 'tff_algos')
  path = os.path.join(cache, f'loopback_bind-{digest}.so')
  if os.path.exists(path):
    return path
  compiler = os.environ.get('CC') or shutil.which('cc') or shutil.which('gcc')
  try:
    os.makedirs(cache, exist_ok=True)
    partial = f'{path}.{os.getpid()}.tmp'
    subprocess.run([compiler or 'cc', '-shared', '-fPIC', '-O2', '-o', partial,
                    _LOOPBACK_SOURCE, '-ldl'], check=True, capture_output=True)
    os.replace(partial, path)
    return path
  except (OSError, subprocess.CalledProcessError) as e:
    logging.warning('No C compiler to build %s (%s): the TFF worker will '
                    'listen on all network interfaces.', _LOOPBACK_SOURCE, e)
    return None


def _die_with_parent():  # Runs in the child between fork and exec.
  ctypes.CDLL('libc.so.6', use_errno=True).prctl(
      _PR_SET_PDEATHSIG, signal.SIGKILL)


class _Worker:
  """One `worker_binary` process and the gRPC stub that talks to it."""

  def __init__(self, max_concurrent_computation_calls):
    self._args = [f'--max_concurrent_computation_calls='
                  f'{max_concurrent_computation_calls}']
    self._lock = threading.Lock()
    self.process = None
    self._stub = None
    self.log_path = None

  def stub(self):
    with self._lock:
      if self._stub is None or not self._stub.is_ready:
        self._restart()
      return self._stub

  def _restart(self):
    self.stop()
    port = portpicker.pick_unused_port()
    log = tempfile.NamedTemporaryFile(
        prefix='tff_worker_', suffix='.log', delete=False)
    self.log_path = log.name
    env = dict(os.environ)
    shim = loopback_shim()
    if shim:
      env['LD_PRELOAD'] = ' '.join(filter(None, [shim,
                                                 env.get('LD_PRELOAD')]))
    self.process = subprocess.Popen(
        [_WORKER_BINARY, f'--port={port}'] + self._args, env=env,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent, close_fds=True)
    log.close()
    channel = grpc.insecure_channel(f'127.0.0.1:{port}', _GRPC_OPTIONS)
    self._stub = tff.framework.RemoteExecutorGrpcStub(channel)
    deadline = time.monotonic() + 60
    while not self._stub.is_ready:
      if self.process.poll() is not None or time.monotonic() > deadline:
        raise RuntimeError(
            f'TFF worker_binary failed to start; see {self.log_path}')
      time.sleep(0.05)

  def stop(self):
    process, self.process, self._stub = self.process, None, None
    if process is not None and process.poll() is None:
      process.terminate()
      try:
        process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if self.log_path and os.path.exists(self.log_path):
      os.unlink(self.log_path)
      self.log_path = None


def _install_context():
  """Makes TFF run computations on `_worker` (started on first use).

  Done at import, so TFF's own default context (whose never-started service
  manager logs an error when collected at interpreter exit) is dropped now.
  """
  def executor_stack(cardinalities):
    cardinalities.setdefault(tff.CLIENTS, 0)  # As TFF's default factory does.
    executor = tff.framework.RemoteExecutor(_worker.stub())
    executor.set_cardinalities(cardinalities)
    return executor

  tff.framework.set_default_context(tff.framework.SyncExecutionContext(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(
          executor_stack_fn=executor_stack),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result))


_worker = _Worker(max_concurrent_computation_calls=-1)
_install_context()
atexit.register(lambda: _worker.stop())


def start() -> None:
  """Starts the worker now, from the calling (normally the main) thread.

  Idempotent. The worker's lifetime is tied to the thread that starts it
  (`PR_SET_PDEATHSIG`); it is stopped by `stop()`, at interpreter exit, and
  on SIGINT/SIGTERM (SIGTERM handling is installed here, from the main
  thread, unless the program has its own handler).
  """
  _install_signal_handlers()
  _worker.stub()


def stop() -> None:
  """Stops the worker (safe to call more than once; a later computation
  starts a fresh one)."""
  _worker.stop()


def worker_pid():
  """The pid of the running worker process, or None."""
  process = _worker.process
  return process.pid if process is not None else None


def _install_signal_handlers():
  if threading.current_thread() is not threading.main_thread():
    return

  def on_terminate(signum, frame):
    del frame
    stop()
    sys.exit(128 + signum)  # Unwinds like SIGINT does, running `finally`s.

  if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, on_terminate)
  # SIGINT raises KeyboardInterrupt, so the atexit hook stops the worker.
