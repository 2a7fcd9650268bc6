"""glibc malloc arenas: two per core, in this process and in its workers.

glibc lets up to 8 × cores threads each allocate from their own arena, and
an arena keeps the memory freed into it for its own later use. TensorFlow's
thread pools (in this process and in the TFF worker) spread a round's
tensors over many arenas, each holding its share of the peak, so the
process grows beyond what it uses at any time. TensorFlow runs two pools
of one thread per core (inter-op and intra-op): two arenas per core let
them all allocate at once without sharing an arena's lock.

Measured (docs/PERFORMANCE.md, "Start-up and memory", "Two malloc arenas
per core"): the MNIST CNN run's peak was 1,647–1,674 MB with two arenas
per core against 1,750–1,814 MB with glibc's default, about 100 MB less.
One arena per core saved more (1,591–1,629 MB) but cost time: on
`synthetic_mlr`, with the machine busy, three of its four runs fell to
8,234–10,739 steps/s (two per core: 14,203–17,556; glibc's default:
13,380–14,445), threads waiting for an arena's lock. The results are the
same: the arenas decide where memory comes from, not what is computed.

A user's $MALLOC_ARENA_MAX is left as it is, here and in the workers.
"""

import ctypes
import os

ENV = 'MALLOC_ARENA_MAX'
_M_ARENA_MAX = -8  # glibc's malloc.h.


def arenas() -> int:
  """The arenas a process may have: two per core it may run on."""
  return 2 * len(os.sched_getaffinity(0))


def limit_arenas() -> None:
  """Limits this process to `arenas()` malloc arenas, unless $MALLOC_ARENA_MAX
  is set (glibc has read it). Takes effect only before a second thread
  allocates (glibc fixes the limit then): call it first."""
  if ENV in os.environ:
    return
  try:
    mallopt = ctypes.CDLL(None).mallopt  # glibc and musl (a no-op there).
  except (OSError, AttributeError):
    return
  mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
  mallopt(_M_ARENA_MAX, arenas())


def child_env(env) -> dict:
  """`env` with the same limit for a child process (the TFF worker), unless
  it sets $MALLOC_ARENA_MAX itself."""
  env = dict(env)
  env.setdefault(ENV, str(arenas()))
  return env
