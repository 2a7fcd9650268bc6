"""TFF's local C++ runtime: the one place that starts and stops it.

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
Every entry point (CLI, tests, notebooks, benchmarks) calls
`tff_algos.runtime.start()`. `start(workers=[...])` also spreads the client
work over remote workers (`remote.py`; README, "Remote workers"); the local
worker then does the aggregation and the server update. Public `tff.*` API
only: the internals live in `remote.py`, imported only for workers.
"""

import atexit
import ctypes
import os
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

from tff_algos.runtime import loopback
from tff_algos.runtime import parse_workers
from tff_algos.runtime import WorkerError

GRPC_OPTIONS = [('grpc.max_message_length', 2 * 10**9),
                ('grpc.max_receive_message_length', 2 * 10**9),
                ('grpc.max_send_message_length', 2 * 10**9)]
_WORKER_BINARY = loopback.worker_binary()
_PR_SET_PDEATHSIG = 1


def executor_context(stub_fn, compiler_fn=None, on_executor=None):
  """A synchronous TFF context whose executors talk to `stub_fn()` (a
  `tff.framework.RemoteExecutorStub`); `on_executor` sees each new one."""
  def executor_stack(cardinalities):
    cardinalities.setdefault(tff.CLIENTS, 0)  # As TFF's default factory does.
    executor = tff.framework.RemoteExecutor(stub_fn())
    executor.set_cardinalities(cardinalities)
    if on_executor is not None:
      on_executor(executor)
    return executor

  return tff.framework.SyncExecutionContext(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(
          executor_stack_fn=executor_stack),
      compiler_fn=compiler_fn,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result)




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
    env = _loopback_only_env()
    port = portpicker.pick_unused_port()
    log = tempfile.NamedTemporaryFile(
        prefix='tff_worker_', suffix='.log', delete=False)
    self.log_path = log.name
    self.process = subprocess.Popen(
        [_WORKER_BINARY, f'--port={port}'] + self._args, env=env,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent, close_fds=True)
    log.close()
    channel = grpc.insecure_channel(f'127.0.0.1:{port}', GRPC_OPTIONS)
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


def _loopback_only_env():
  """The environment that confines the local worker to loopback (see the
  module docstring); refuses to start an exposed one unless
  $TFF_ALGOS_WORKER_LISTEN_ALL=1."""
  try:
    return loopback.preload_env(os.environ, loopback.loopback_shim())
  except loopback.ShimUnavailable as e:
    if os.environ.get('TFF_ALGOS_WORKER_LISTEN_ALL') != '1':
      raise WorkerError(
          f'{e}, so TFF\'s worker would accept connections from the network; '
          'install a C compiler, or set TFF_ALGOS_WORKER_LISTEN_ALL=1 to '
          'run it so anyway') from e
    logging.warning('%s: the TFF worker listens on all interfaces '
                    '(TFF_ALGOS_WORKER_LISTEN_ALL=1).', e)
    return dict(os.environ)


def _local_context():
  """A TFF context that runs computations on `_worker` (started on first use)."""
  return executor_context(
      _worker.stub,
      compiler_fn=tff.backends.native.desugar_and_transform_to_native)


_worker = _Worker(max_concurrent_computation_calls=-1)
# Installed at import, so TFF's own default context (whose never-started
# service manager logs an error when collected at interpreter exit) is
# dropped now.
_LOCAL_CONTEXT = _local_context()
tff.framework.set_default_context(_LOCAL_CONTEXT)
_spread = None  # The remote.SpreadContext while remote workers are in use.
atexit.register(lambda: stop())


def start(workers=()) -> None:
  """Starts the local worker now, from the calling (normally the main) thread.

  Idempotent. The worker's lifetime is tied to the thread that starts it
  (`PR_SET_PDEATHSIG`); it is stopped by `stop()`, at interpreter exit, and
  on SIGINT/SIGTERM (SIGTERM handling is installed here, from the main
  thread, unless the program has its own handler).

  `workers`: addresses ('host:port' strings, or one comma-separated string)
  of remote TFF workers (`python -m tff_algos.worker`, README "Remote
  workers") to spread the client work over; the aggregation and the server
  update stay on the local worker (see `remote`). Empty: everything runs on
  the local worker. Raises ValueError for a malformed address and
  `WorkerError` when a worker cannot be reached.
  """
  global _spread
  workers = parse_workers(
      workers if isinstance(workers, str) else ','.join(workers))
  _install_signal_handlers()
  _worker.stub()
  _disconnect()
  if workers:
    from tff_algos.runtime import remote  # pylint: disable=g-import-not-at-top
    connected = []
    try:
      for address in workers:
        connected.append(remote.RemoteWorker(address))
    except BaseException:
      for worker in connected:
        worker.close()
      raise
    _spread = remote.SpreadContext(_LOCAL_CONTEXT, connected)
    tff.framework.set_default_context(_spread)


def _disconnect():
  global _spread
  if _spread is not None:
    spread, _spread = _spread, None
    tff.framework.set_default_context(_LOCAL_CONTEXT)
    spread.close()


def stop() -> None:
  """Stops the local worker and disconnects from remote workers (which keep
  running); safe to call more than once. A later computation runs on a
  fresh local worker."""
  _disconnect()
  _worker.stop()


def remote_workers():
  """The connected remote workers (`remote.RemoteWorker`), or []."""
  return list(_spread.workers) if _spread is not None else []


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
