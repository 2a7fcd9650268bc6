"""The loopback-only bind() shim for TFF's worker_binary (no TF import).

It exists for security, not speed or memory. TFF's `worker_binary` binds
to all interfaces and has no flag to change that, and it serves TFF's
executor protocol, which has no authentication: anyone who can reach its
port can run TensorFlow computations in it, which read and write files as
the worker's user (docs/guide/runtime.md and remote-workers.md). Preloading
`loopback_bind.c` into it (LD_PRELOAD) turns the
wildcard address into loopback, so only this machine can connect;
tests/runtime/test_runtime.py checks the listening sockets of running
experiments and of a worker started before TensorFlow. Without a C
compiler no worker is started (`ShimUnavailable`) unless
$TFF_ALGOS_WORKER_LISTEN_ALL=1 asks for an exposed one. Used by
`prestart` and `local` (the local worker) and `tff_algos.worker` (a worker
started for `--workers`).
"""

import hashlib
import importlib.util
import os
import shutil
import subprocess

from tff_algos.runtime import user_cache_folder

_SOURCE = os.path.join(os.path.dirname(__file__), 'loopback_bind.c')


def worker_binary():
  """Path of TFF's C++ worker_binary, found without importing TFF."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or spec.origin is None:
    raise RuntimeError('tensorflow_federated is not installed')
  return os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')


class ShimUnavailable(RuntimeError):
  """The shim cannot be built: a worker would listen on all interfaces."""


def loopback_shim():
  """Path of the compiled loopback-only bind() shim.

  Built once per source version with the system C compiler ($CC, else cc or
  gcc) into $XDG_CACHE_HOME/tff_algos (default ~/.cache/tff_algos). Raises
  `ShimUnavailable` when it cannot be built.
  """
  with open(_SOURCE, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  cache = user_cache_folder()  # Not $TFF_ALGOS_CACHE: a new
  # computation cache (a cold start-up benchmark) would rebuild it first.
  path = os.path.join(cache, f'loopback_bind-{digest}.so')
  if os.path.exists(path):
    return path
  compiler = os.environ.get('CC') or shutil.which('cc') or shutil.which('gcc')
  try:
    os.makedirs(cache, exist_ok=True)
    partial = f'{path}.{os.getpid()}.tmp'
    subprocess.run(
      [
        compiler or 'cc',
        '-shared',
        '-fPIC',
        '-O2',
        '-o',
        partial,
        _SOURCE,
        '-ldl',
      ],
      check=True,
      capture_output=True,
    )
    os.replace(partial, path)
    return path
  except (OSError, subprocess.CalledProcessError) as e:
    detail = getattr(e, 'stderr', None) or e
    if isinstance(detail, bytes):
      detail = detail.decode(errors='replace').strip().splitlines()[-1]
    raise ShimUnavailable(
      f'cannot build {_SOURCE} with a C compiler ({detail})'
    ) from e


def preload_env(env, shim):
  """`env` with `shim` prepended to LD_PRELOAD."""
  env = dict(env)
  env['LD_PRELOAD'] = ' '.join(filter(None, [shim, env.get('LD_PRELOAD')]))
  return env
