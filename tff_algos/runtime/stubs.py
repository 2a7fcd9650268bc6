"""TFF execution contexts over gRPC executor stubs whose every failure is a
`WorkerError` (used by the local worker, `local.py`, and remote workers,
`remote.py`).

Why, and what was measured:
  * `CheckedStub`: TFF's own stub marks UNAVAILABLE as retryable and its
    context retries forever, with no deadlines, so a dead or hung worker
    would hang the run; here it is one error naming the worker
    (docs/guide/remote-workers.md: "Nothing is retried";
    tests/runtime/test_runtime.py
    and test_workers.py). A reliability reason: no time, memory or
    security figure concerns it.
  * `dispose_batch_size=1`: memory. With TFF's default of 20 batched
    disposals the worker kept the last 2–3 rounds' client data
    (docs/PERFORMANCE.md, "Start-up and memory"); with this and the rest
    of the start-up work, the MNIST 2NN run's worker peaked at 194 MB
    instead of 212 MB (one-round runs; this part's own share was not
    measured).
  * Disposing without waiting: one Dispose call per dropped value would
    otherwise block Python on a round trip each; not measured.
"""

import time

import grpc
import tensorflow_federated as tff

from tff_algos.runtime import WorkerError

GRPC_OPTIONS = [
  ('grpc.max_message_length', 2 * 10**9),
  ('grpc.max_receive_message_length', 2 * 10**9),
  ('grpc.max_send_message_length', 2 * 10**9),
]
_DISPOSE_TIMEOUT_S = 5.0  # Freeing values on a worker: best effort.


def executor_context(
  stub_fn, compiler_fn=None, on_executor=None, asynchronous=False
):
  """A synchronous (or, `asynchronous`, an async) TFF context whose
  executors talk to `stub_fn()` (a `tff.framework.RemoteExecutorStub`);
  `on_executor` sees each new one."""

  def executor_stack(cardinalities):
    cardinalities.setdefault(tff.CLIENTS, 0)  # As TFF's default factory does.
    # Values are freed on the worker as soon as Python drops them: TFF's
    # default batches 20 disposals, so the worker held the client data of
    # the last 2-3 rounds (docs/PERFORMANCE.md, "Start-up and memory").
    executor = tff.framework.RemoteExecutor(stub_fn(), dispose_batch_size=1)
    executor.set_cardinalities(cardinalities)
    if on_executor is not None:
      on_executor(executor)
    return executor

  context = (
    tff.framework.AsyncExecutionContext
    if asynchronous
    else tff.framework.SyncExecutionContext
  )
  return context(
    executor_fn=tff.framework.ResourceManagingExecutorFactory(
      executor_stack_fn=executor_stack
    ),
    compiler_fn=compiler_fn,
    transform_args=tff.tensorflow.transform_args,
    transform_result=tff.tensorflow.transform_result,
  )


class CheckedStub(tff.framework.RemoteExecutorStub):
  """TFF's executor RPCs to one worker, where every failure is a WorkerError.

  TFF's own `RemoteExecutorGrpcStub` marks UNAVAILABLE as retryable, and
  TFF's execution context then retries forever: a dead worker would hang
  the run (and it has no deadlines: a hung one would too). `worker` says
  what a failure means: it has `failure` (why it is unusable, or None),
  `fail(reason)`, `lost(error)` (the reason for a call that found it gone)
  and `deadline` (None, or a function giving a call's deadline in seconds
  and recording `deadline(took=seconds)` after each call).
  """

  def __init__(self, worker, stub):
    self._worker = worker
    self._stub = stub
    self._disposing = set()
    self._generation = getattr(worker, 'generation', None)

  def _call(self, method, request):
    worker = self._worker
    if self._generation != getattr(worker, 'generation', None):
      # The worker was stopped or replaced on purpose (runtime.stop, a new
      # log file) since this stub's executor was made: TFF's context drops
      # that executor on a RetryableError and makes one on the new worker.
      raise tff.framework.RetryableError('the local TFF worker was replaced')
    if worker.failure:
      raise WorkerError(worker.failure)
    timeout = worker.deadline() if worker.deadline else None
    start = time.monotonic()
    try:
      result = getattr(self._stub, method)(request, timeout=timeout)
    except (grpc.RpcError, ValueError) as e:
      # ValueError: gRPC's "Cannot invoke RPC on closed channel!".
      code = e.code() if isinstance(e, grpc.Call) else None
      if worker.failure:
        raise WorkerError(worker.failure) from None
      if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None:
        worker.fail(
          f'{worker.name} did not answer within {timeout:.0f} s '
          '(hung, or starved of CPU?)'
        )
        raise WorkerError(worker.failure) from None
      if code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        None,
      ):
        worker.fail(worker.lost(code.name if code else e))
        raise WorkerError(worker.failure) from None
      # The worker is fine; the computation failed on it. TensorFlow's
      # message goes on with the failing node on lines of its own: joined,
      # so that a command reports it in one line.
      raise WorkerError(
        f'a computation failed on {worker.name}: {code.name}: '
        + ' '.join(e.details().split())
      ) from None
    if worker.deadline:
      worker.deadline(took=time.monotonic() - start)
    return result

  def get_executor(self, request):
    return self._call('GetExecutor', request)

  def create_value(self, request):
    return self._call('CreateValue', request)

  def create_struct(self, request):
    return self._call('CreateStruct', request)

  def create_call(self, request):
    return self._call('CreateCall', request)

  def create_selection(self, request):
    return self._call('CreateSelection', request)

  def compute(self, request):
    return self._call('Compute', request)

  def dispose(self, request):
    try:  # Runs from finalizers: never raise; never wait (values are
      # disposed one at a time, as soon as they are dropped, so waiting
      # would cost a round trip per value). gRPC cancels a call whose future
      # is collected: kept until done.
      future = self._stub.Dispose.future(request, timeout=_DISPOSE_TIMEOUT_S)
      self._disposing.add(future)
      future.add_done_callback(self._disposing.discard)
    except Exception:
      pass

  def dispose_executor(self, request):
    try:
      self._stub.DisposeExecutor(request, timeout=_DISPOSE_TIMEOUT_S)
    except Exception:
      pass
