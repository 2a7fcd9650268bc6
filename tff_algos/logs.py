"""One logging set-up for every entry point (command lines, notebooks,
scripts): TensorFlow's and TFF's chatter off, and no exception printed at
exit by TFF's never-used default context. Imports no TensorFlow.

`quiet()` must run before TensorFlow is imported to silence its C++ log
lines (importing `tff_algos` calls it); the Python loggers are set however
late it runs.
"""

import logging
import os
import sys
import warnings

_DONE = []


def _errors_only(record: logging.LogRecord) -> bool:
  return record.levelno >= logging.ERROR


def quiet() -> None:
  """Silences TensorFlow's and TFF's logs below errors, gRPC's fork notes
  and Python warnings from the libraries (not ours); idempotent."""
  if _DONE:
    return
  _DONE.append(True)
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # TF's C++ import chatter.
  os.environ.setdefault('GRPC_ENABLE_FORK_SUPPORT', '0')  # gRPC's fork notes.
  os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')
  for name in ('tensorflow', 'tensorflow_federated', 'absl', 'jax'):
    logger = logging.getLogger(name)
    logger.setLevel(logging.ERROR)
    # TensorFlow sets its logger back to INFO on first use in an
    # interactive session (a notebook kernel): a filter stays.
    logger.addFilter(_errors_only)
  for category in (DeprecationWarning, FutureWarning, UserWarning):
    for module in (
      'tensorflow',
      'tensorflow_federated',
      'keras',
      'jax',
      'tensorflow_privacy',
      'tensorboard',
      'google',
    ):
      warnings.filterwarnings('ignore', category=category, module=module)
  previous = sys.unraisablehook

  def unraisable(hook_args):
    # TFF creates a default context at import whose ServiceManager.__del__
    # runs at interpreter exit, when the module globals it reads are gone:
    # "Exception ignored in ... 'NoneType' object has no attribute 'Popen'".
    # It never started a worker here (runtime.install replaces it).
    if (
      getattr(hook_args.object, '__qualname__', '').endswith(
        'ServiceManager.__del__'
      )
      and sys.is_finalizing()
    ):
      return
    previous(hook_args)

  sys.unraisablehook = unraisable
