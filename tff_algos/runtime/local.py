"""TFF's local C++ runtime: the one place that starts and stops it.

TFF 0.87 runs computations in a `worker_binary` subprocess that it starts on
first use, wired to the parent's stdout/stderr and stopped only by a
`__del__` that often never runs: the worker outlives Python and a pipeline
reading our output never sees EOF. `start()` replaces TFF's default context
with one whose worker
  * is started here, with its output going to a log file (a run's
    worker.log, or an anonymous file that nothing outlives) instead of our
    pipes,
  * dies with us even on SIGKILL (Linux `PR_SET_PDEATHSIG`),
  * is stopped at interpreter exit, on an exception, on SIGINT and on SIGTERM,
  * listens on loopback only (`loopback_bind.c`, preloaded into it): TFF's
    worker binds to all interfaces and serves an unauthenticated protocol,
  * is never waited for forever: every call has a deadline (a generous
    multiple of the longest call so far, at least DEADLINE_FLOOR_S), and a
    hung or dead worker is a WorkerError naming it, not a hang or a silent
    retry.
Every entry point (CLI, tests, notebooks, benchmarks) calls
`tff_algos.runtime.start()`. `start(workers=[...])` also spreads the client
work over remote workers (`remote.py`; docs/guide/remote-workers.md); the local
worker then does the aggregation and the server update. Public `tff.*` API
and TFF's protos only: the internals live in `remote.py`, imported only for
workers.

Its reasons are the worker's lifetime and exposure (docs/guide/runtime.md;
tests/runtime/test_runtime.py), not speed or memory;
the parts that save time or memory are `prestart`, `computation_cache`,
`tracing` and the disposal settings in `stubs`, each with its figures.
"""

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import logging

os.environ.setdefault('GRPC_ENABLE_FORK_SUPPORT', '0')  # No fork handlers:
# forking the worker after gRPC started would print fork_posix.cc warnings.
import grpc
import portpicker
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2_grpc

from tff_algos.runtime import client_values
from tff_algos.runtime import computation_cache
from tff_algos.runtime import loopback
from tff_algos.runtime import parse_workers
from tff_algos.runtime import prestart
from tff_algos.runtime import stubs
from tff_algos.runtime import tracing
from tff_algos.runtime import type_memo
from tff_algos.runtime import WorkerError

# A local call may take DEADLINE_FACTOR × the longest call so far, and at
# least DEADLINE_FLOOR_S ($TFF_ALGOS_WORKER_DEADLINE_FLOOR_S): a first
# round also traces and optimizes the computation in the worker.
DEADLINE_FLOOR_S = float(
  os.environ.get('TFF_ALGOS_WORKER_DEADLINE_FLOOR_S', 300)
)
DEADLINE_FACTOR = 10.0
_START_TIMEOUT_S = 60.0
# The channel to a worker just spawned first tries to connect before the
# worker listens (it listens about 50 ms after it is spawned); gRPC then
# waits its default initial backoff of 1 s before it tries again, and the
# first call waited that second. On loopback, retrying every 20 ms is cheap.
_RECONNECT_OPTIONS = [
  ('grpc.initial_reconnect_backoff_ms', 20),
  ('grpc.min_reconnect_backoff_ms', 20),
  ('grpc.max_reconnect_backoff_ms', 200),
]


class _Worker:
  """One local `worker_binary` process and the stub that talks to it."""

  def __init__(self, max_concurrent_computation_calls=-1):
    self._args = [
      f'--max_concurrent_computation_calls={max_concurrent_computation_calls}'
    ]
    # Only a worker started with the same arguments can be adopted.
    self._adopts = tuple(self._args) == prestart.WORKER_ARGS
    self._lock = threading.Lock()
    self.process = None
    self.failure = None
    self.log_path = None  # Where the next worker writes its output.
    self._log = None  # The running worker's log file,
    self._tee = None  # or the copier of an adopted worker's output.
    self._stub = None
    self._channel = None
    self._ready = None  # Until the spawned worker listens.
    self._longest_call = 0.0
    self.generation = 0  # Which worker process the stubs talk to.

  @property
  def name(self):
    pid = self.process.pid if self.process else '?'
    return f'the local TFF worker (pid {pid})'

  def stub(self):
    """The running worker's stub, once it answers; a new worker if none
    runs (or the last one failed)."""
    with self._lock:
      if self._stub is None or self.failure:
        self.spawn()
      self._wait_ready()
      return self._stub

  def deadline(self, took=None):
    """A call's deadline in seconds; records a finished call's duration."""
    if took is not None:
      self._longest_call = max(self._longest_call, took)
    return max(DEADLINE_FLOOR_S, DEADLINE_FACTOR * self._longest_call)

  def log_tail(self, lines=5):
    """The last lines of the worker's output, for error messages."""
    if self._tee is not None:
      return self._tee.tail(lines)
    return prestart.tail(self._log, lines)

  def lost(self, error):
    code = self.process.poll() if self.process else None
    how = (
      f'exited with code {code}'
      if code is not None and code >= 0
      else f'was killed by signal {-code}'
      if code is not None
      else f'stopped answering ({error})'
    )
    where = (
      f'its log: {self.log_path}'
      if self.log_path
      else f'its last output: {self.log_tail() or "(none)"}'
    )
    return f'{self.name} {how}; {where}'

  def log_to(self, path):
    """Sends the running worker's output to `path`, what it wrote so far
    first, if it is the one `runtime.prepare()` started and no log holds
    its output yet (a run's first computations use it before the run's
    folder, and so its log, is known): True. False otherwise, and nothing
    changes."""
    if (
      self._tee is None  # Set only with its running worker (`spawn`).
      or self._tee.path is not None
      or self.failure
      or self.process.poll() is not None
    ):
      return False
    self._tee.attach(path)
    return True

  def fail(self, reason):
    if self.failure is None:
      self.failure = reason
    process = self.process
    if process is not None and process.poll() is None:
      process.kill()  # A hung worker would hold its port and memory.

  def spawn(self):
    """Starts a new worker process, without waiting for it to listen (it
    starts while the caller goes on, e.g. loads data); or adopts the one
    `runtime.prepare()` started before TensorFlow was imported."""
    self.stop()
    adopted = prestart.take() if self._adopts else None
    if adopted is not None:
      self.process, port, self._tee = adopted.process, adopted.port, adopted.tee
      if self.log_path:
        self._tee.attach(self.log_path)
    else:
      env = _loopback_only_env()
      port = portpicker.pick_unused_port()
      self._log = (
        open(self.log_path, 'a+b')
        if self.log_path
        else tempfile.TemporaryFile(prefix='tff_worker_')
      )
      self.process = prestart.popen_worker(port, self._args, self._log, env)
    self.failure, self._longest_call = None, 0.0
    self._channel = grpc.insecure_channel(
      f'127.0.0.1:{port}', [*stubs.GRPC_OPTIONS, *_RECONNECT_OPTIONS]
    )
    self._stub = stubs.CheckedStub(
      self, executor_pb2_grpc.ExecutorGroupStub(self._channel)
    )
    self._ready = grpc.channel_ready_future(self._channel)

  def _wait_ready(self):
    """Waits until the spawned worker listens; WorkerError if it does not."""
    if self._ready is None:
      return
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
      try:
        self._ready.result(timeout=0.05)
        self._ready = None
        return
      except grpc.FutureTimeoutError:
        pass
      if self.process.poll() is not None or time.monotonic() > deadline:
        self._ready.cancel()
        reason = self.lost('it did not start')
        self.stop()
        raise WorkerError(f"TFF's worker_binary failed to start: {reason}")

  def stop(self):
    process, self.process, self._stub = self.process, None, None
    self.generation += 1
    if self._ready is not None:
      self._ready.cancel()
      self._ready = None
    if process is not None and process.poll() is None:
      process.terminate()
      try:
        process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        process.kill()  # E.g. a stopped (SIGSTOP) worker.
        process.wait()
    if self._channel is not None:
      self._channel.close()
      self._channel = None
    if self._log is not None:
      self._log.close()
      self._log = None
    if self._tee is not None:
      self._tee.close()
      self._tee = None


def _loopback_only_env():
  """The environment that confines the local worker to loopback (see the
  module docstring); refuses to start an exposed one unless
  $TFF_ALGOS_WORKER_LISTEN_ALL=1."""
  try:
    return prestart.worker_env(warn=logging.warning)
  except loopback.ShimUnavailable as e:
    raise WorkerError(
      f"{e}, so TFF's worker would accept connections from the network; "
      'install a C compiler, or set TFF_ALGOS_WORKER_LISTEN_ALL=1 to '
      'run it so anyway'
    ) from e


# TFF's native compiler, its results cached on disk by their input's content
# (a computation's first call compiles it: the default run's first round took
# 0.85 s cold, 0.38 s with the cache; see computation_cache).
_native_compiler = computation_cache.compiler(
  tff.backends.native.desugar_and_transform_to_native, 'native'
)


def _local_context():
  """A TFF context that runs computations on `_worker` (started on first use)."""
  return stubs.executor_context(_worker.stub, compiler_fn=_native_compiler)


def _insecure_compiler_uncached(computation):
  return tff.backends.native.desugar_and_transform_to_native(
    tff.backends.test.replace_secure_intrinsics_with_bodies(computation)
  )


# TFF's test compiler (`tff.backends.test`): secure sums as plain sums.
_insecure_compiler = computation_cache.compiler(
  _insecure_compiler_uncached, 'native_insecure_sums'
)


def test_context():
  """A sync context on the local worker that runs secure aggregation with
  its secure sums replaced by plain sums, as `tff.backends.test`'s context
  does (TFF's native runtime cannot run them: "Cannot embed a federated
  value"): for tests and simulations, never a deployment."""
  return stubs.executor_context(_worker.stub, compiler_fn=_insecure_compiler)


def program_context():
  """A `tff.program.NativeFederatedContext` (the async context that
  `tff.program` and `tff.learning.programs.train_model` need) on the local
  worker."""
  return tff.program.NativeFederatedContext(
    stubs.executor_context(
      _worker.stub, compiler_fn=_native_compiler, asynchronous=True
    )
  )


tracing.install()  # Before anything is traced.
type_memo.install()
client_values.install()
_worker = _Worker()
# Installed at import, so TFF's own default context (whose never-started
# service manager logs an error when collected at interpreter exit) is
# dropped now.
_LOCAL_CONTEXT = _local_context()
tff.framework.set_default_context(_LOCAL_CONTEXT)
_spread = None  # The remote.SpreadContext while remote workers are in use.
atexit.register(lambda: stop())


def start(workers=(), log_path=None, wait=True) -> None:
  """Starts the local worker now, from the calling (normally the main) thread.

  Idempotent. With `wait=False` it does not wait for the worker to listen
  (the first computation does): start it, then load data. The worker's lifetime is tied to the thread that starts it
  (`PR_SET_PDEATHSIG`); it is stopped by `stop()`, at interpreter exit, and
  on SIGINT/SIGTERM (SIGTERM handling is installed here, from the main
  thread, unless the program has its own handler).

  `workers`: addresses ('host:port' strings, or one comma-separated string)
  of remote TFF workers (`python -m tff_algos.worker`,
  docs/guide/remote-workers.md) to spread the client work over; the
  aggregation and the server
  update stay on the local worker (see `remote`). Empty: everything runs on
  the local worker. `log_path`: a file the worker appends its output to
  (a run's worker.log); by default an anonymous file nothing outlives. The
  worker `runtime.prepare()` started writes its whole output there and
  keeps running, also when computations already ran on it; another running
  worker is replaced by one that writes there.
  Raises ValueError for a malformed address and `WorkerError` when a worker
  cannot be started or reached.
  """
  global _spread
  workers = parse_workers(
    workers if isinstance(workers, str) else ','.join(workers)
  )
  _install_signal_handlers()
  if log_path is not None and log_path != _worker.log_path:
    if not _worker.log_to(log_path):
      _worker.stop()  # The next worker writes there from its start.
    _worker.log_path = log_path
  if wait or workers:
    _worker.stub()
  elif _worker.process is None or _worker.failure:
    _worker.spawn()
  _disconnect()
  if workers:
    from tff_algos.runtime import remote

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
  fresh local worker (writing to an anonymous log)."""
  _disconnect()
  _worker.stop()
  _worker.log_path = None


def remote_workers():
  """The connected remote workers (`remote.RemoteWorker`), or []."""
  return list(_spread.workers) if _spread is not None else []


def worker_pid():
  """The pid of the running worker process, or None."""
  process = _worker.process
  return process.pid if process is not None else None


def _install_signal_handlers():
  """SIGTERM stops the worker and unwinds like SIGINT, in a program without
  a handler of its own. Not in a Jupyter kernel: its manager ends it with
  SIGTERM when it is slow to exit, and a handler that unwinds then, in the
  middle of the kernel's own shutdown, makes asyncio log errors to its
  closed streams (the worker dies with the kernel anyway,
  PR_SET_PDEATHSIG)."""
  if (
    threading.current_thread() is not threading.main_thread()
    or 'ipykernel' in sys.modules
  ):
    return

  def on_terminate(signum, frame):
    del frame
    stop()
    sys.exit(128 + signum)  # Unwinds like SIGINT does, running `finally`s.

  if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, on_terminate)
  # SIGINT raises KeyboardInterrupt, so the atexit hook stops the worker.
