"""Where a FedAvg round's time goes: client work vs evaluation vs transport.

  .venv/bin/python benchmarks/round_profile.py --task=mnist_iid_2nn \
      --data_dir=../shared/data --epochs=1 --batch_size=50 [--rounds=3]

Runs --rounds FedAvg rounds (after one warm-up round) of the simulation loop
(`tff_algos.simulation.loop`, as run_experiment.py does) and times, per
round (median): the loop's training round (drawing the schedule and
`process.next` through the TFF runtime), split into the Python side's serialization of the values it sends
(TFF's value_serialization), the gRPC calls that create those values in the
worker, and the call that runs the round (the worker's TF work), each summed
over its calls; then the
evaluation of f(w) over all clients' train and test data, once through the
TFF runtime (`federated_evaluation.build_federated_evaluation`, which ships
every client's data to the worker; split the same way) and once in this process
(`evaluation.build_evaluation`).
"""

import collections
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags
from absl import logging

import common

# The tests' reference evaluation, a TFF computation (tests/simulation).
sys.path.insert(
  0,
  os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'simulation'
  ),
)
import federated_evaluation  # noqa: E402

import tasks
from tff_algos import learning
from tff_algos import runtime
from tff_algos.runtime import profiling
from tff_algos.simulation import evaluation
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

FLAGS = flags.FLAGS
flags.DEFINE_string('task', 'mnist_iid_2nn', 'Task name.')
flags.DEFINE_string('data_dir', None, 'As run_experiment.py --data_dir.')
flags.DEFINE_integer('clients_per_round', 10, 'K.')
flags.DEFINE_integer('epochs', 1, 'E.')
flags.DEFINE_integer('batch_size', 50, 'B.')
flags.DEFINE_float('client_lr', 0.05, 'Client learning rate.')
flags.DEFINE_integer('rounds', 3, 'Measured rounds (after one warm-up).')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  profiling.instrument()
  task = common.load_task_or_exit(FLAGS.task, FLAGS.data_dir)
  runtime.start()
  train = tasks.client_arrays(task.train)
  test = tasks.client_arrays(task.test)
  loop = trainer.loop_for(
    resolve(
      Config(
        algo='fedavg',
        task=FLAGS.task,
        clients_per_round=FLAGS.clients_per_round,
        epochs=FLAGS.epochs,
        batch_size=FLAGS.batch_size,
        client_lr=FLAGS.client_lr,
      )
    ),
    task.model_fn,
    train,
    evaluate=False,
  )
  evaluations = collections.OrderedDict(
    (name, build(task.model_fn))
    for name, build in (
      (
        'evaluation through the TFF runtime',
        federated_evaluation.build_federated_evaluation,
      ),
      ('evaluation in process', evaluation.build_evaluation),
    )
  )
  state = loop.initial_state(learning.initial_model_weights(task.model_fn, 0))
  rows = collections.defaultdict(list)

  def measure(label, function):
    profiling.SECONDS.clear()
    start = time.perf_counter()
    result = function()
    rows[label, None].append(time.perf_counter() - start)
    for part, seconds in profiling.SECONDS.items():
      rows[label, part].append(seconds)
    return result

  for round_num in range(1, FLAGS.rounds + 2):
    # measure() calls each lambda at once, in this iteration.
    state, _, _ = measure(
      'the training round (loop.train)',
      lambda: loop.train(state, round_num),  # noqa: B023
    )
    weights = loop.process.get_model_weights(state)
    for name, evaluate in evaluations.items():
      measure(
        f'{name} (train + test)',
        lambda: (evaluate(weights, train), evaluate(weights, test)),  # noqa: B023
      )
    if round_num == 1:  # Warm-up: tracing, first transfers.
      rows.clear()
  print(
    f'{FLAGS.task}: K={FLAGS.clients_per_round}, E={FLAGS.epochs}, '
    f'B={FLAGS.batch_size}; median seconds over {FLAGS.rounds} rounds'
  )
  for (label, part), seconds in rows.items():
    print(
      f'{label:50s} {statistics.median(seconds):8.3f}'
      if part is None
      else f'  {part:48s} {statistics.median(seconds):8.3f}'
    )
  runtime.stop()


if __name__ == '__main__':
  app.run(main)
