"""Child processes that die with their parent (Linux; no TensorFlow).

TFF 0.87 does not stop its worker when Python exits, and a worker holding
our stdout/stderr keeps a pipeline reading them from ever ending
(docs/guide/runtime.md); `PR_SET_PDEATHSIG` kills it even when we are
SIGKILLed (tests/runtime/test_runtime.py). A sweep's runs die with it the
same way (`analysis.sweep`). A reason of lifetime, not time, memory or
security: nothing was measured.
"""

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum=signal.SIGKILL):
  """A `preexec_fn` for subprocess.Popen: the child gets `signum` when the
  thread that started it dies, even when that process is SIGKILLed."""

  def preexec():  # Runs in the child between fork and exec.
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)

  return preexec
