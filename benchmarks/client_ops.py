"""Where local training time goes, op by op.

  .venv/bin/python benchmarks/client_ops.py --task=mnist_iid_2nn \
      --data_dir=../shared/data [--algo=fedavg] [--batch_size=10] \
      [--epochs=1] [--client_lr=0.05] [--repeat=20] [--serial]

Builds the run's per-client process
whose clients read their data where they train (`learning.StoredInput`,
what `--client_execution=auto` runs for the 2NN, the CNN and the LSTMs),
takes the TensorFlow computation of one client's training out of it (the
one that reads the client's files) and runs it for the first client of
round 1 in a TensorFlow session set up as TFF's worker sets up its
sessions (Grappler and the JIT off, `optimize_for_static_graph`; TFF's
`session_provider.cc`), in this process: TFF's `worker_binary` links its
own copy of TensorFlow, so the figures are this process's TensorFlow
running the worker's graph.

Prints the median time of a call over --repeat calls (after three that
warm up), per step of the call, then, from one call traced with
TensorFlow's step stats, the time each kind of op took in all, per step.
By default ops run two at a time (TensorFlow's inter-op threads) and share
the intra-op threads, so an op's time includes its waits and the times add
up to more than the call's; --serial gives each op the machine alone.
"""

import collections
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags
from absl import logging

import common  # Before TensorFlow: it prepares the runtime.

# isort: split
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

from tff_algos import learning
from tff_algos import runtime
from tff_algos.simulation import client_inputs
from tff_algos.simulation import trainer
from tff_algos.simulation.client_store import ClientStore
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

FLAGS = flags.FLAGS
flags.DEFINE_string('task', 'mnist_iid_2nn', 'Task name.')
flags.DEFINE_string('algo', 'fedavg', 'As run_experiment.py --algo.')
flags.DEFINE_float('client_lr', 0.05, 'Client learning rate.')
flags.DEFINE_string('data_dir', None, 'As run_experiment.py --data_dir.')
flags.DEFINE_integer('epochs', 1, 'E.')
flags.DEFINE_integer('batch_size', 10, 'B.')
flags.DEFINE_integer('repeat', 20, 'Timed calls (after three warm-ups).')
flags.DEFINE_integer('top', 20, 'Op kinds listed.')
flags.DEFINE_bool(
  'serial',
  False,
  'One inter-op and one intra-op thread, so that each op runs alone and '
  "the ops' times add up to the call's.",
)


def _tensorflow_computations(message):
  """Every TensorFlow computation in a computation proto, depth first."""
  if (
    isinstance(message, computation_pb2.Computation)
    and message.WhichOneof('computation') == 'tensorflow'
  ):
    yield message.tensorflow
    return
  for field, value in message.ListFields():
    if field.type == field.TYPE_MESSAGE:
      repeated = field.label == field.LABEL_REPEATED
      for part in value if repeated else [value]:
        yield from _tensorflow_computations(part)


def _graph(computation):
  graph_def = tf.compat.v1.GraphDef()
  computation.graph_def.Unpack(graph_def)
  return graph_def


def _reads_files(graph_def):
  functions = graph_def.library.function
  nodes = [*graph_def.node, *(n for f in functions for n in f.node_def)]
  return any(node.op == 'ReadFile' for node in nodes)


def _tensor_names(binding):
  kind = binding.WhichOneof('binding')
  if kind == 'tensor':
    return [binding.tensor.tensor_name]
  return [n for part in binding.struct.element for n in _tensor_names(part)]


def _session(graph_def, as_the_worker, serial):
  """A session of `graph_def`: `as_the_worker`, as TFF's worker makes them
  (`session_provider.cc`), else with TensorFlow's defaults (Grappler on,
  as for a `tf.function` in this process); `serial`: with one thread of
  each kind."""
  config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
  if serial:
    config.inter_op_parallelism_threads = 1
    config.intra_op_parallelism_threads = 1
  if as_the_worker:
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    optimizer = config.graph_options.optimizer_options
    optimizer.opt_level = tf.compat.v1.OptimizerOptions.L0
    optimizer.global_jit_level = tf.compat.v1.OptimizerOptions.OFF
    config.experimental.optimize_for_static_graph = True
    config.experimental.disable_output_partition_graphs = True
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.import_graph_def(graph_def, name='')
  return tf.compat.v1.Session(graph=graph, config=config)


def _op_seconds(run_metadata):
  """op kind → (how many ran, their seconds in all)."""
  kinds = collections.defaultdict(lambda: [0, 0.0])
  for device in run_metadata.step_stats.dev_stats:
    for node in device.node_stats:
      label = node.timeline_label
      kind = label.split(' = ')[1].split('(')[0] if ' = ' in label else '?'
      kinds[kind][0] += 1
      kinds[kind][1] += (
        node.op_end_rel_micros - node.op_start_rel_micros
      ) / 1e6
  return kinds


def _per_client(task, settings):
  """(graph, feed, fetches, steps, initializers) of the first client of
  round 1 in the per-client process whose clients read their data in the
  worker."""
  process = trainer.build_process(
    settings, task.model_fn, learning.StoredInput()
  )
  proto = tff.framework.ConcreteComputation.get_proto(process.next)
  ((client, graph),) = [
    (c, g)
    for c in _tensorflow_computations(proto)
    if _reads_files(g := _graph(c))
  ]
  data = trainer.ClientData.of(task, settings)
  sampler = trainer.sampler(settings, data.train)
  inputs = client_inputs.round_inputs(
    sampler,
    sampler.participants(1, settings.policy),
    data.train,
    1,
    settings.algorithm.batch_size,
    ClientStore.of(data.train),
  )
  state = process.initialize()
  argument = [state.client_work, process.get_model_weights(state), inputs[0]]
  values = tff.structure.flatten(
    tff.structure.from_container(argument, recursive=True)
  )
  feed = dict(zip(_tensor_names(client.parameter), values, strict=True))
  steps = len(inputs[0]['batch_ends'])
  init = [client.initialize_op] if client.initialize_op else []
  return graph, feed, _tensor_names(client.result), steps, init


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  task = common.load_task_or_exit(FLAGS.task, FLAGS.data_dir)
  settings = resolve(
    Config(
      algo=FLAGS.algo,
      task=FLAGS.task,
      epochs=FLAGS.epochs,
      batch_size=FLAGS.batch_size,
      client_lr=FLAGS.client_lr,
      client_execution='per_client',
    )
  )
  runtime.start()
  graph, feed, fetches, steps, init = _per_client(task, settings)
  what = 'one client'
  session = _session(graph, True, FLAGS.serial)
  if init:
    session.run(init)
  for _ in range(3):
    session.run(fetches, feed)
  seconds = []
  for _ in range(FLAGS.repeat):
    start = time.perf_counter()
    session.run(fetches, feed)
    seconds.append(time.perf_counter() - start)
  call = statistics.median(seconds)
  print(
    f'{FLAGS.algo} on {FLAGS.task}, E={FLAGS.epochs}, '
    f'B={FLAGS.batch_size}: {what}, {steps} steps: {call * 1e3:.2f} ms a '
    f'call (median of {FLAGS.repeat}), {call / steps * 1e6:.0f} µs a step'
  )
  traced = tf.compat.v1.RunMetadata()
  session.run(
    fetches,
    feed,
    options=tf.compat.v1.RunOptions(
      trace_level=tf.compat.v1.RunOptions.FULL_TRACE
    ),
    run_metadata=traced,
  )
  kinds = _op_seconds(traced)
  count = sum(n for n, _ in kinds.values())
  print(f'one traced call: {count / steps:.0f} ops a step')
  print(f'{"op":36s} {"ops a step":>10s} {"µs a step":>10s}')
  ranked = sorted(kinds.items(), key=lambda kv: -kv[1][1])
  for kind, (n, total) in ranked[: FLAGS.top]:
    if kind in ('StatefulPartitionedCall', 'PartitionedCall'):
      continue  # A call's time holds its ops' times.
    print(f'{kind:36s} {n / steps:10.1f} {total / steps * 1e6:10.1f}')


if __name__ == '__main__':
  app.run(main)
