"""The runtime: TFF's worker processes, and the only user of TFF internals.

Every entry point (CLI, tests, notebooks, benchmarks) calls `start()` before
its first TFF computation; see `local` for what it guarantees (the worker's
output goes to a log file, it dies with us, listens on loopback only) and
`remote` for `start(workers=[...])`. Importing this package loads neither
TensorFlow nor TFF: `local` is imported by `start()`, `remote` only when
workers are given.
"""

import contextlib
import os

from tff_algos.runtime.addresses import parse_workers


def user_cache_folder() -> str:
  """This user's cache folder for the package: $XDG_CACHE_HOME/tff_algos,
  else ~/.cache/tff_algos (the compiled loopback shim lives here)."""
  return os.path.join(
    os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),
    'tff_algos',
  )


def cache_folder() -> str:
  """Where the package caches what it computed (the computation cache,
  decoded CIFAR-10): $TFF_ALGOS_CACHE, else `user_cache_folder()`."""
  return os.environ.get('TFF_ALGOS_CACHE') or user_cache_folder()


class WorkerError(RuntimeError):
  """A TFF worker cannot be started or reached, died, or stopped answering."""


def _local():
  from tff_algos.runtime import local

  return local


def prepare(start_worker: bool = True) -> None:
  """Call first in a command that will run TFF computations, before
  TensorFlow is imported. With `tracing` and the in-process evaluation's
  explicit loops, what it sets up took the default run to the end of round 1
  5.43 s after process start instead of 8.88 s (cold, ff5dc54 against
  1a8e451; docs/PERFORMANCE.md, "Start-up and memory"); each part's own
  figure is in its module's docstring. It imports only the parts of TFF's
  dependencies a run uses and pauses the garbage collector while TFF is
  imported (`imports`), limits malloc to two arenas per core (`allocator`),
  and, with `start_worker`, starts the local worker now, so that it starts
  while TensorFlow is imported and the data are loaded (`prestart`;
  `start()` adopts it). Loads no TensorFlow. Idempotent."""
  from tff_algos.runtime import allocator
  from tff_algos.runtime import imports

  allocator.limit_arenas()  # First: before any other thread allocates.
  imports.defer_unused()
  if start_worker:
    from tff_algos.runtime import prestart

    prestart.spawn()


def install() -> None:
  """Makes our local runtime TFF's default context, without starting it
  (TFF's own, if never used, logs an error at interpreter exit). Call it
  once TensorFlow Federated is imported; `start()` does."""
  _local()


def start(workers=(), log_path=None, wait=True) -> None:
  """Starts the local TFF worker now, from the calling (normally the main)
  thread; idempotent. `workers`: addresses ('host:port' strings, or one
  comma-separated string) of remote TFF workers to spread the client work
  over (docs/guide/remote-workers.md). `log_path`: where the local worker's
  output goes (a run's worker.log; default: an anonymous file). With
  `wait=False`, the first computation waits for the local worker to listen
  (so that it starts while the caller loads data). Raises ValueError for a
  malformed address and WorkerError when a worker cannot be started or
  reached."""
  _local().start(workers, log_path, wait)


@contextlib.contextmanager
def program_context():
  """Runs the enclosed code in a `tff.program.NativeFederatedContext` on
  the local worker (started if needed), the async context that
  `tff.program` and `tff.learning.programs.train_model` need, with the
  worker's loopback confinement, deadlines and clean-up; the previous
  context is back afterwards. Yields the context."""
  yield from _installed(_local().program_context)


@contextlib.contextmanager
def test_context():
  """Runs the enclosed code in a sync context on the local worker that runs
  secure aggregation with its secure sums as plain sums (what TFF's
  `tff.backends.test` context does; TFF's native runtime cannot run them):
  tests and simulations only. Yields the context."""
  yield from _installed(_local().test_context)


def _installed(make_context):
  import tensorflow_federated as tff

  start()
  context = make_context()
  with tff.framework.get_context_stack().install(context):
    yield context


def stop() -> None:
  """Stops the local worker and disconnects from remote workers (which keep
  running); safe to call more than once, and before `start()`."""
  import sys

  if 'tff_algos.runtime.local' in sys.modules:
    _local().stop()
  if 'tff_algos.runtime.prestart' in sys.modules:
    sys.modules['tff_algos.runtime.prestart'].stop()


def worker_pid():
  """The pid of the running local worker process, or None."""
  return _local().worker_pid()


def remote_workers():
  """The connected remote workers (`remote.RemoteWorker`), or []."""
  return _local().remote_workers()
