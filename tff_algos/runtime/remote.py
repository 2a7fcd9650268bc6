"""Client work spread over remote TFF workers (`--workers=host:port,...`).

Imported only when remote workers are used. `runtime.start(workers=[...])`
installs `SpreadContext` as TFF's default
context. A computation that takes CLIENTS-placed data and aggregates it once
(a learning process's `next`, a federated evaluation) is split at that
aggregation, as TFF's own mergeable-computation compiler does
(`tff.backends.native` `compile_to_mergeable_comp_form`), into
  1. the work up to the aggregation: the clients are cut into one contiguous
     slice per worker and every worker computes, in parallel, the values its
     clients contribute (their local training, for `next`);
  2. the aggregation: the local runtime folds all clients' contributions in
     client order, starting from the aggregation's zero, exactly as the local
     runtime does for the unsplit computation; and
  3. the rest (the server update), on the local runtime.
TFF's `MergeableCompExecutionContext` instead merges partial sums computed by
each worker, which changes the order of floating-point additions; folding
here keeps every result bit-identical to the local runtime for the same seed.
Computations without CLIENTS-placed data, with dependent aggregations
(FedISGD's round, the federated dissimilarity), or with CLIENTS-placed results
run on the local runtime unchanged.

The workers speak TFF's executor protocol over gRPC, which has no
authentication and no encryption (see docs/guide/remote-workers.md). Failures
are never retried: a worker that cannot be reached at start, dies, or stops
answering (a liveness probe with a deadline, every few seconds) raises
`WorkerError` naming it, and every in-flight call is cancelled.

Measured (docs/guide/remote-workers.md): no speed-up where it could be
measured. On one 2-core machine two loopback workers only matched the
local runtime (FedProx on Synthetic(1,1), K=10, E=20, B=10: 0.36–0.43 s
per round against 0.34–0.41 s local); workers on other machines, where
client work would dominate the traffic, were not measured. What the fold
in client order buys is measured: TFF's MergeableCompExecutionContext's
FedProx train loss differed from the local runtime's in the 7th
significant digit by round 3, while with this one `metrics.csv` is
byte-identical (tests/runtime/test_workers.py). Security is
docs/guide/remote-workers.md's: the protocol
has no authentication or encryption, so workers listen on loopback and
are reached through SSH tunnels ("What TFF's executor protocol does not
protect").
"""

import functools
import os
import queue
import threading
import time

from absl import logging
import grpc
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.proto.v0 import executor_pb2_grpc

# TFF 0.87 internals (pinned in requirements.txt) used to split a
# computation at its aggregation, as `tff.backends.native`'s
# mergeable-computation compiler does; its public entry point
# (`create_mergeable_comp_execution_context`) offers no way to fold instead
# of merge. Public aliases are used where 0.87 has them
# (tff.framework.Lambda, CompiledComputation, to_call_dominant;
# tff.types.contains). Imported only when remote workers are used.
from tensorflow_federated.python.core.environments.tensorflow_backend import (
  tensorflow_building_block_factory,
)
from tensorflow_federated.python.core.environments.tensorflow_backend import (
  tensorflow_computation_factory,
)
from tensorflow_federated.python.core.environments.tensorflow_backend import (
  tensorflow_tree_transformations,
)
from tensorflow_federated.python.core.impl.compiler import transformations
from tensorflow_federated.python.core.impl.compiler import tree_analysis

from tff_algos.runtime import stubs
from tff_algos.runtime import WorkerError
from tff_algos.runtime.stubs import executor_context
from tff_algos.runtime.stubs import GRPC_OPTIONS

_mergeable_comp_compiler = tff.backends.native.mergeable_comp_compiler

CONNECT_TIMEOUT_S = 20.0  # To reach a worker at start.
PROBE_EVERY_S = 5.0  # Liveness probe of each connected worker...
PROBE_TIMEOUT_S = 30.0  # ...which must answer within this (even when busy).


class RemoteWorker:
  """A connection to one remote `worker_binary` and a TFF context on it.

  Timeouts: the module's CONNECT_TIMEOUT_S, PROBE_EVERY_S and
  PROBE_TIMEOUT_S as they are when the worker is connected.
  """

  deadline = None  # A liveness probe instead: calls may take long.

  def __init__(self, address):
    connect_timeout = CONNECT_TIMEOUT_S
    self.address = address
    self.name = f'the TFF worker at {address}'
    self.clients_served = 0  # Clients whose work this worker computed.
    self.failure = None  # Why it is unusable, once it is.
    self._executors = []  # To free their state on the worker at close().
    self._closed = threading.Event()
    self._close_lock = threading.Lock()
    self._channel = grpc.insecure_channel(address, GRPC_OPTIONS)
    ready = grpc.channel_ready_future(self._channel)
    try:
      ready.result(timeout=connect_timeout)
    except grpc.FutureTimeoutError:
      ready.cancel()  # Stops its polling of the channel before we close it.
      self._channel.close()
      raise WorkerError(
        f'cannot reach the TFF worker at {address} within '
        f'{connect_timeout:g} s (is it running? for another machine, is '
        'the SSH tunnel up?)'
      ) from None
    grpc_stub = executor_pb2_grpc.ExecutorGroupStub(self._channel)
    try:  # Speaks TFF's executor protocol (not just any gRPC server)?
      executor = grpc_stub.GetExecutor(
        executor_pb2.GetExecutorRequest(
          cardinalities=[
            executor_pb2.Cardinality(
              placement=computation_pb2.Placement(uri=tff.CLIENTS.uri),
              cardinality=0,
            )
          ]
        ),
        timeout=connect_timeout,
      )
      grpc_stub.DisposeExecutor(
        executor_pb2.DisposeExecutorRequest(executor=executor.executor),
        timeout=connect_timeout,
      )
    except grpc.RpcError as e:
      self._channel.close()
      raise WorkerError(
        f'{address} does not answer as a TFF worker: '
        f'{e.code().name}: {e.details()}'
      ) from None
    self.stub = stubs.CheckedStub(self, grpc_stub)
    # No compiler: SpreadContext hands it computations compiled once.
    self.context = executor_context(
      lambda: self.stub, on_executor=self._executors.append
    )
    # Any answer (UNIMPLEMENTED) shows the worker alive; none in time: not.
    self._probe = self._channel.unary_unary('/tff_algos.Liveness/Probe')
    threading.Thread(
      target=self._probe_loop,
      args=(PROBE_EVERY_S, PROBE_TIMEOUT_S),
      name=f'probe {address}',
      daemon=True,
    ).start()

  def _probe_loop(self, every, timeout):
    """Fails the worker if it stops answering (hung, or its host is gone)."""
    while not self._closed.wait(every):
      start = time.monotonic()
      try:
        self._probe(b'', timeout=timeout)
      except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
          continue
        if not self._closed.is_set():
          self.fail(
            f'the TFF worker at {self.address} stopped answering '
            f'({e.code().name} after '
            f'{time.monotonic() - start:.0f} s): is it alive?'
          )
        return
      except Exception:
        return  # The channel was closed under us.

  def files_in(self, folder):
    """The names of the files in `folder` (an absolute path) on this
    worker's machine; none if it has no such folder."""
    paths = self.context.invoke(_matching_files(), os.path.join(folder, '*'))
    return {os.path.basename(p.decode()) for p in paths}

  def file_digests(self, paths, key):
    """(size, `keyed_digest`) of each file of `paths` (absolute) as this
    worker's machine holds it."""
    sizes, digests = self.context.invoke(_file_digests(tuple(key)), paths)
    return list(zip(sizes.tolist(), digests.tolist()))

  def lost(self, error):
    """Why a failed call means the worker is lost (for `CheckedStub`)."""
    return f'lost the TFF worker at {self.address} ({error}): did it die?'

  def fail(self, reason):
    """Records why the worker is unusable and cancels its in-flight calls."""
    if self.failure is None:
      self.failure = reason
    self.close()

  def close(self):
    """Disconnects; a healthy worker first frees what we left on it."""
    with self._close_lock:
      if self._closed.is_set():
        return
      self._closed.set()
      if self.failure is None:
        for executor in self._executors:
          executor.close()  # DisposeExecutor, with a deadline.
      self._executors = []
      self._channel.close()  # Cancels in-flight calls.


@functools.cache
def _matching_files():
  """pattern → the paths matching it, on the worker that runs it."""

  @tff.tensorflow.computation(tf.string)
  def matching_files(pattern):
    return tf.io.matching_files(pattern)

  return matching_files


# The keyed hash's range: all of int64's non-negative values.
_DIGEST_BUCKETS = 2**63 - 1


def keyed_digest(content, key) -> int:
  """The SipHash-2-4 of the bytes `content` under `key` (two ints below
  2**63), as `RemoteWorker.file_digests` computes it on a worker: with a
  key of the run's own, no copy made before the run can collide."""
  return int(
    tf.strings.to_hash_bucket_strong([content], _DIGEST_BUCKETS, key)[0]
  )


@functools.cache
def _file_digests(key):
  """paths → (their files' sizes, `keyed_digest`s), on the worker that
  runs it: the files are read there, one at a time."""

  @tff.tensorflow.computation(tff.TensorType(np.str_, [None]))
  def file_digests(paths):
    def size_and_digest(path):
      content = tf.io.read_file(path)
      digest = tf.strings.to_hash_bucket_strong(
        content[tf.newaxis], _DIGEST_BUCKETS, list(key)
      )[0]
      return tf.strings.length(content), digest

    return tf.map_fn(
      size_and_digest, paths, fn_output_signature=(tf.int32, tf.int64)
    )

  return file_digests


class _SplitForm:
  """A computation split at its single (possibly zipped) aggregation."""

  def __init__(self, client_values, aggregate, after_aggregate):
    self.client_values = client_values  # arg → contributions@CLIENTS
    self.aggregate = aggregate  # contributions@CLIENTS → @SERVER
    self.after_aggregate = after_aggregate  # (arg, aggregate@SERVER) → result


def split_at_aggregation(comp):
  """`comp` as a `_SplitForm`; raises if it is not one aggregation deep.

  TFF 0.87's `compile_to_mergeable_comp_form`, except that the work before
  the aggregation returns the clients' contributions themselves, so that
  one fold over all clients can replace its per-subround partial
  aggregates and merges.
  """
  lam = _mergeable_comp_compiler._ensure_lambda(comp.to_building_block())
  lowered, _ = tensorflow_tree_transformations.replace_intrinsics_with_bodies(
    lam
  )
  call_dominant = tff.framework.Lambda(
    lowered.parameter_name,
    lowered.parameter_type,
    tff.framework.to_call_dominant(lowered.result),
  )
  tree_analysis.check_aggregate_not_dependent_on_aggregate(call_dominant)
  before, after = transformations.force_align_and_split_by_intrinsics(
    call_dominant,
    [tensorflow_building_block_factory.create_null_federated_aggregate()],
  )
  zero, accumulate, merge, report = (
    _mergeable_comp_compiler._extract_federated_aggregate_computations(before)
  )
  identity_proto, identity_type = (
    tensorflow_computation_factory.create_identity(merge.type_signature.result)
  )
  identity = tff.framework.CompiledComputation(
    identity_proto, type_signature=identity_type
  )
  before = tff.framework.ConcreteComputation(
    computation_proto=before.proto,
    context_stack=tff.framework.get_context_stack(),
  )
  after = tff.framework.ConcreteComputation(
    computation_proto=after.proto,
    context_stack=tff.framework.get_context_stack(),
  )

  @tff.federated_computation(before.type_signature.parameter)
  def client_values(arg):
    return before(arg)['federated_aggregate_param'][0]

  @tff.federated_computation(client_values.type_signature.result)
  def aggregate(values):
    return tff.federated_aggregate(values, zero(), accumulate, merge, identity)

  @tff.federated_computation(
    before.type_signature.parameter,
    tff.FederatedType(identity.type_signature.result, tff.SERVER),
  )
  def after_aggregate(arg, aggregated):
    return after(arg, [tff.federated_map(report, aggregated)])

  after_aggregate = tff.framework.ConcreteComputation.with_type(
    after_aggregate,
    tff.FunctionType(
      after_aggregate.type_signature.parameter, comp.type_signature.result
    ),
  )
  return _SplitForm(client_values, aggregate, after_aggregate)


def _clients_placed(type_spec):
  return (
    isinstance(type_spec, tff.FederatedType)
    and type_spec.placement is tff.CLIENTS
    and not type_spec.all_equal
  )


def num_clients(value, type_spec):
  """The number of clients in `value`'s CLIENTS-placed parts (None if none)."""
  if _clients_placed(type_spec):
    return len(value)
  if isinstance(type_spec, tff.StructType):
    for element, (_, element_type) in zip(
      tff.structure.from_container(value),
      tff.structure.iter_elements(type_spec),
    ):
      n = num_clients(element, element_type)
      if n is not None:
        return n
  return None


def slice_clients(value, type_spec, start, stop):
  """`value` with every CLIENTS-placed part cut to clients [start, stop)."""
  if _clients_placed(type_spec):
    return value[start:stop]
  if isinstance(type_spec, tff.StructType):
    return tff.structure.Struct(
      [
        (name, slice_clients(element, element_type, start, stop))
        for element, (name, element_type) in zip(
          tff.structure.from_container(value),
          tff.structure.iter_elements(type_spec),
        )
      ]
    )
  return value


class SpreadContext(tff.framework.SyncContext):
  """Runs each client-data computation's client work on remote workers."""

  def __init__(self, local_context, workers):
    self._local = local_context
    self.workers = workers
    # id(computation) → (computation, kept so that its id is not reused;
    # (_SplitForm, compiled client_values) or None: run it locally). Keyed
    # by id: a computation's hash serializes its whole proto.
    self._forms = {}
    self._lock = threading.Lock()

  def _form(self, comp):
    with self._lock:
      if id(comp) not in self._forms:
        self._forms[id(comp)] = (comp, self._split(comp))
      return self._forms[id(comp)][1]

  @staticmethod
  def _split(comp):
    signature = comp.type_signature
    if (
      signature.parameter is None
      or tff.types.contains(signature.result, _clients_placed)
      or not tff.types.contains(signature.parameter, _clients_placed)
    ):
      return None
    try:
      form = split_at_aggregation(comp)
    except Exception as e:
      # E.g. two dependent aggregations: the whole computation runs locally.
      logging.debug('Not split (runs locally): %s', e)
      return None
    return form, tff.backends.native.desugar_and_transform_to_native(
      form.client_values
    )

  def invoke(self, comp, arg):
    form = None
    if arg is not None and isinstance(comp, tff.framework.ConcreteComputation):
      form = self._form(comp)
    if form is None:
      return self._local.invoke(comp, arg)
    form, client_values = form
    parameter = form.client_values.type_signature.parameter
    n = num_clients(arg, parameter)
    if not n:
      return self._local.invoke(comp, arg)
    k = min(n, len(self.workers))
    bounds = [n * i // k for i in range(k + 1)]
    shares = list(zip(self.workers, bounds, bounds[1:]))
    results = self._run_in_parallel(
      [
        (worker, client_values, slice_clients(arg, parameter, start, stop))
        for worker, start, stop in shares
      ]
    )
    contributions = []
    for (worker, start, stop), result in zip(shares, results):
      contributions.extend(result)
      worker.clients_served += stop - start
    aggregated = self._local.invoke(form.aggregate, contributions)
    return self._local.invoke(
      form.after_aggregate,
      tff.structure.Struct(
        [(None, slice_clients(arg, parameter, 0, 0)), (None, aggregated)]
      ),
    )

  def _run_in_parallel(self, calls):
    """[(worker, comp, arg)] → results; the first lost worker stops all.

    Daemon threads, so that an interrupted run never waits for them.
    """
    done = queue.Queue()
    results = [None] * len(calls)

    def run(i, worker, comp, arg):
      try:
        results[i] = worker.context.invoke(comp, arg)
        done.put((i, None))
      except BaseException as e:
        done.put((i, e))

    for i, call in enumerate(calls):
      threading.Thread(
        target=run,
        args=(i, *call),
        daemon=True,
        name=f'tff-worker {call[0].address}',
      ).start()
    first_error = None
    try:
      for _ in calls:
        i, error = done.get()
        worker = calls[i][0]
        if error is None:
          continue
        if worker.failure:  # Lost: the others' results would be useless.
          self._fail_all(worker.failure)
          raise WorkerError(worker.failure) from None
        first_error = first_error or error
    except BaseException:  # E.g. KeyboardInterrupt: cancel the calls.
      self._fail_all(
        'the run was interrupted; call runtime.start(workers=...) to reconnect'
      )
      raise
    if first_error is not None:
      raise first_error
    return results

  def _fail_all(self, reason):
    for worker in self.workers:
      worker.fail(reason)  # Keeps a worker's own failure if it has one.

  def close(self):
    for worker in self.workers:
      worker.close()
