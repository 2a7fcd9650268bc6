"""Where a FedAvg round's time goes: client work vs evaluation vs transport.

  .venv/bin/python benchmarks/round_profile.py --task=mnist_iid_2nn \
      --data_dir=../shared/data --epochs=1 --batch_size=50 [--rounds=3]

Runs --rounds FedAvg rounds (after one warm-up round) as experiment.run does
and times, per round (median): `process.next` (the round through the TFF
runtime), split into the Python side's serialization of the values it sends
(TFF's value_serialization), the gRPC calls that create those values in the
worker, and the call that runs the round (the worker's TF work), each summed
over its calls; then the
evaluation of f(w) over all clients' train and test data, once through the
TFF runtime (`evaluation.build_federated_evaluation`, what every round did
before issue 6; split the same way) and once in this process
(`evaluation.build_evaluation`).
"""

import collections
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.core.impl.executors import value_serialization  # pylint: disable=g-import-not-at-top

import common  # pylint: disable=g-import-not-at-top
import tasks  # pylint: disable=g-import-not-at-top
from tff_algos import composition  # pylint: disable=g-import-not-at-top
from tff_algos import evaluation  # pylint: disable=g-import-not-at-top
from tff_algos import experiment  # pylint: disable=g-import-not-at-top
from tff_algos import fedavg  # pylint: disable=g-import-not-at-top
from tff_algos import runtime  # pylint: disable=g-import-not-at-top
from tff_algos.sampling import ClientSampler  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string('task', 'mnist_iid_2nn', 'Task name.')
flags.DEFINE_string('data_dir', None, 'As run_experiment.py --data_dir.')
flags.DEFINE_integer('clients_per_round', 10, 'K.')
flags.DEFINE_integer('epochs', 1, 'E.')
flags.DEFINE_integer('batch_size', 50, 'B.')
flags.DEFINE_float('client_lr', 0.05, 'Client learning rate.')
flags.DEFINE_integer('rounds', 3, 'Measured rounds (after one warm-up).')

_SECONDS = collections.defaultdict(float)


def _timed(owner, name, label):
  """Adds the time spent in owner.name to _SECONDS[label]."""
  function = getattr(owner, name)

  def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
      return function(*args, **kwargs)
    finally:
      _SECONDS[label] += time.perf_counter() - start

  setattr(owner, name, timed)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  _timed(value_serialization, 'serialize_value', 'serialize (Python)')
  stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub
  _timed(stub, 'create_value', 'create_value (gRPC + worker)')
  _timed(stub, 'create_call', 'create_call (the worker computes)')
  _timed(stub, 'compute', 'compute (results back to Python)')
  task = common.load_task_or_exit(FLAGS.task, FLAGS.data_dir)
  runtime.start()
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  process = fedavg.build_fed_avg(task.model_fn, FLAGS.client_lr)
  evaluations = collections.OrderedDict(
      (name, build(task.model_fn)) for name, build in (
          ('evaluation through the TFF runtime',
           evaluation.build_federated_evaluation),
          ('evaluation in process', evaluation.build_evaluation)))
  sampler = ClientSampler(len(train), FLAGS.clients_per_round, FLAGS.epochs,
                          seed=0)
  state = process.set_model_weights(
      process.initialize(),
      composition.initial_model_weights(task.model_fn, 0))
  rows = collections.defaultdict(list)

  def measure(label, function):
    _SECONDS.clear()
    start = time.perf_counter()
    result = function()
    rows[label, None].append(time.perf_counter() - start)
    for part, seconds in _SECONDS.items():
      rows[label, part].append(seconds)
    return result

  for round_num in range(1, FLAGS.rounds + 2):
    inputs = experiment.round_inputs(sampler, sampler.round_plan(round_num),
                                     train, round_num, FLAGS.batch_size)
    state = measure('process.next (one round)',
                    lambda: process.next(state, inputs).state)  # pylint: disable=cell-var-from-loop
    weights = process.get_model_weights(state)
    for name, evaluate in evaluations.items():
      measure(f'{name} (train + test)',
              lambda: (evaluate(weights, train), evaluate(weights, test)))  # pylint: disable=cell-var-from-loop
    if round_num == 1:  # Warm-up: tracing, first transfers.
      rows.clear()
  print(f'{FLAGS.task}: K={FLAGS.clients_per_round}, E={FLAGS.epochs}, '
        f'B={FLAGS.batch_size}; median seconds over {FLAGS.rounds} rounds')
  for (label, part), seconds in rows.items():
    print(f'{label:50s} {statistics.median(seconds):8.3f}'
          if part is None else f'  {part:48s} {statistics.median(seconds):8.3f}')
  runtime.stop()


if __name__ == '__main__':
  app.run(main)
