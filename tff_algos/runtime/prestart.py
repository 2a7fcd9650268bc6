"""The local TFF worker, started before TensorFlow is imported (no TF here).

TFF's `worker_binary` took 1.37 s from spawn to listening when ff5dc54
started it after the imports and the data (spawned 3.98 s after process
start, listening at 5.35 s; the figures cited below). A command that knows
it will run TFF computations starts it first thing (`runtime.prepare()`),
so that it starts while this process imports TensorFlow and loads data; the
runtime's first use adopts it (`local._Worker.spawn`). Its confinement is
the local worker's: loopback only (the bind() shim, or a refusal), killed
with this process (`PR_SET_PDEATHSIG`), stopped at exit if never adopted.

Measured (docs/PERFORMANCE.md, "Start-up and memory", "Where the time
goes", the default Synthetic run, ff5dc54 against the start-up work
1a8e451): the worker spawned 0.20 s after process start and listening at
2.57 s cold and 2.59 s warm, instead of 5.35 s: 2.78 s sooner. That only
saves time when the process needs the worker before a late-started one
would listen: by the same table's phases, the warm run (0.03 s for the
process's computations, from a cache of built processes) was ready for
its first call 2.80 s after start, while the cold run's tracing (1.58 s)
left it until after 4 s. This code caches compiled computations only, so
every run traces as that cold run did: the time the early start saves
here has not been measured, nor its share of the whole start-up work's
8.88 → 5.43 s (cold) to the end of round 1.

Its output cannot go to the run's worker.log yet: the run's folder is known
(and locked: one process per folder, and a second one "touches nothing")
only after the data are loaded. So it goes through a pipe to a thread that
keeps it in an anonymous file until `attach(path)` appends it to the log
and sends the rest there.
"""

import atexit
import os
import signal
import subprocess
import tempfile
import threading

from tff_algos.runtime import allocator
from tff_algos.runtime import loopback
from tff_algos.runtime import processes

# The local worker's arguments (local.py starts its own workers with them).
WORKER_ARGS = ('--max_concurrent_computation_calls=-1',)


class LogTee:
  """Copies a worker's output from a pipe to an anonymous file, and after
  `attach(path)` to that file (appending)."""

  def __init__(self, read_fd):
    self._read_fd = read_fd
    self._lock = threading.Lock()
    self._sink = tempfile.TemporaryFile(prefix='tff_worker_')
    self.path = None
    self._thread = threading.Thread(
      target=self._copy, daemon=True, name='tff_worker_log'
    )
    self._thread.start()

  def _copy(self):
    while True:
      try:
        data = os.read(self._read_fd, 65536)
      except OSError:
        data = b''
      if not data:
        break
      with self._lock:
        try:
          self._sink.seek(0, os.SEEK_END)
          self._sink.write(data)
          self._sink.flush()
        except (OSError, ValueError):
          pass
    os.close(self._read_fd)

  def attach(self, path):
    """Appends what the worker wrote so far to `path`, and the rest later."""
    with self._lock:
      sink = open(path, 'a+b')
      self._sink.seek(0)
      sink.write(self._sink.read())
      sink.flush()
      self._sink.close()
      self._sink, self.path = sink, path

  def tail(self, lines=5):
    with self._lock:
      return tail(self._sink, lines)

  def close(self, timeout=5):
    """Once the worker has exited: the rest of its output, then the file."""
    self._thread.join(timeout)
    with self._lock:
      self._sink.close()


def tail(log, lines=5):
  """The last `lines` lines of the worker's output in the file `log`, on
  one line (for error messages); '' if it cannot be read."""
  try:
    log.flush()
    log.seek(0)
    text = log.read().decode(errors='replace').strip()
  except (OSError, ValueError, AttributeError):
    return ''
  return ' | '.join(text.splitlines()[-lines:])


def popen_worker(port, args, stdout, env):
  """TFF's worker_binary on `port` with `args`, its output to `stdout`
  (stderr with it), killed with this process."""
  return subprocess.Popen(
    [loopback.worker_binary(), f'--port={port}', *args],
    env=env,
    stdin=subprocess.DEVNULL,
    stdout=stdout,
    stderr=subprocess.STDOUT,
    preexec_fn=processes.die_with_parent(signal.SIGKILL),
    close_fds=True,
  )


def worker_env(warn=None):
  """The environment that confines a worker to loopback (the bind() shim),
  with two malloc arenas per core (`allocator`);
  `loopback.ShimUnavailable` unless $TFF_ALGOS_WORKER_LISTEN_ALL=1, in which
  case `warn(message)` is told and the plain environment returned."""
  env = allocator.child_env(os.environ)
  try:
    return loopback.preload_env(env, loopback.loopback_shim())
  except loopback.ShimUnavailable as e:
    if os.environ.get('TFF_ALGOS_WORKER_LISTEN_ALL') != '1':
      raise
    if warn is not None:
      warn(
        f'{e}: the TFF worker listens on all interfaces '
        '(TFF_ALGOS_WORKER_LISTEN_ALL=1).'
      )
    return env


class Prestarted:
  """A started worker process, its port and its output."""

  def __init__(self, process, port, tee):
    self.process, self.port, self.tee = process, port, tee

  def stop(self):
    if self.process.poll() is None:
      self.process.kill()
      self.process.wait()
    self.tee.close()


_PRESTARTED = None


def spawn() -> None:
  """Starts the local worker now, if none was (a no-op when the loopback
  shim cannot be built: the runtime then reports it when it starts one)."""
  global _PRESTARTED
  if _PRESTARTED is not None:
    return
  import portpicker

  try:
    env = worker_env()
  except loopback.ShimUnavailable:
    return
  port = portpicker.pick_unused_port()
  read_fd, write_fd = os.pipe()
  try:
    process = popen_worker(port, WORKER_ARGS, write_fd, env)
  except OSError:
    os.close(read_fd)
    return
  finally:
    os.close(write_fd)
  _PRESTARTED = Prestarted(process, port, LogTee(read_fd))


def take():
  """The prestarted worker (now the caller's to stop), or None."""
  global _PRESTARTED
  prestarted, _PRESTARTED = _PRESTARTED, None
  if prestarted is not None and prestarted.process.poll() is not None:
    prestarted.stop()  # It died: the caller starts one of its own.
    return None
  return prestarted


def stop() -> None:
  """Stops a prestarted worker nobody adopted."""
  prestarted = take()
  if prestarted is not None:
    prestarted.stop()


atexit.register(stop)
