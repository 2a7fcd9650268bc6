"""Times the runtime's parts of a computation call (for
benchmarks/round_profile.py): the Python side's serialization of the values
it sends, and the gRPC calls to the worker. Uses TFF 0.87 internals; not
imported by runs, so it has no effect of its own on them.

It is the instrument behind docs/PERFORMANCE.md, "Where a round's time
goes": it showed an MNIST 2NN evaluation through the TFF runtime spending
1.5 s in serialization and gRPC against 0.5–0.6 s of TF work, which is why
the evaluation runs in the Python process (2.5 s → 0.31–0.39 s).
"""

import collections
import threading
import time

from tensorflow_federated.python.core.impl.executors import (
  remote_executor_grpc_stub,
)
from tensorflow_federated.python.core.impl.executors import value_serialization

SECONDS = collections.defaultdict(float)  # label → seconds since clear()
SENT = collections.Counter()  # 'bytes' serialized for the worker


def _timed(owner, name, label):
  """Adds the time spent in owner.name to SECONDS[label]."""
  function = getattr(owner, name)

  def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
      return function(*args, **kwargs)
    finally:
      SECONDS[label] += time.perf_counter() - start

  setattr(owner, name, timed)


def instrument():
  """Starts timing, once per process: serialization, the gRPC calls that
  create values in the worker, the call that runs the computation there,
  and the one that brings the results back; and counting the bytes
  serialized (`SENT`)."""
  if getattr(instrument, 'done', False):
    return
  instrument.done = True
  serialize = value_serialization.serialize_value
  # serialize_value calls itself for a value's parts: only the outermost
  # call's value is sent, and its time holds its parts' (per thread:
  # remote workers' calls run in threads).
  calls = threading.local()

  def counted(*args, **kwargs):
    calls.depth = getattr(calls, 'depth', 0) + 1
    start = time.perf_counter()
    try:
      proto, type_spec = serialize(*args, **kwargs)
    finally:
      calls.depth -= 1
    if not calls.depth:
      SECONDS['serialize (Python)'] += time.perf_counter() - start
      SENT['bytes'] += proto.ByteSize()
    return proto, type_spec

  value_serialization.serialize_value = counted
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub
  _timed(stub, 'create_value', 'create_value (gRPC + worker)')
  _timed(stub, 'create_call', 'create_call (the worker computes)')
  _timed(stub, 'compute', 'compute (results back to Python)')
