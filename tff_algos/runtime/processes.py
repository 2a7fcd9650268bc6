"""Child processes that die with their parent (Linux; no TensorFlow)."""

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum=signal.SIGKILL):
  """A `preexec_fn` for subprocess.Popen: the child gets `signum` when the
  thread that started it dies, even when that process is SIGKILLed."""

  def preexec():  # Runs in the child between fork and exec.
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)

  return preexec
