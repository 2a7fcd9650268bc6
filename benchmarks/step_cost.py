"""What one client's local step costs in this process, compiled by XLA and
not: the compiled round of `simulation.compiled` (`round_function`) for
one client, against the same loop as a tf.function without XLA.

  .venv/bin/python benchmarks/step_cost.py [--cases=NAME,...] [--steps=N]
      [--repeats=N] [--data_dir=DIR] [--json=PATH]

For each case (benchmarks/cases.py: a task, its model, B and the
client's learning rate), its algorithm's client step (`ClientTraining`,
as a run with --client_execution=compiled builds it) is run for --steps
minibatches of B examples of the task's largest client, from the same
initial model; each way's median seconds of a call over --repeats calls
(after one that traces and compiles), divided by --steps. Both ways
compute the same steps: their models are compared too.
"""

import functools
import json
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags
from absl import logging

from cases import CASES
import common  # Before TensorFlow: it prepares the runtime.

# isort: split
import numpy as np
import tensorflow as tf

import tasks
from tff_algos import learning
from tff_algos.learning.client_work import PROXIMAL_WEIGHT
from tff_algos.simulation import compiled
from tff_algos.simulation import trainer

FLAGS = flags.FLAGS
flags.DEFINE_list(
  'cases',
  ['mlr_synthetic_10', 'mlr_mnist_10', '2nn_mnist_10'],
  f'Cases to run, of: {", ".join(CASES)}.',
)
flags.DEFINE_integer('steps', 320, 'Minibatch steps a call.')
flags.DEFINE_integer('repeats', 20, 'Measured calls (after one warm-up).')
flags.DEFINE_string(
  'data_dir',
  None,
  'Where the dataset tasks read their data (as $TFF_DATA_DIR).',
)
flags.DEFINE_string('json', None, 'Also write the results here.')


def _round_functions(case, task):
  """The case's compiled round and the same round without XLA (by name),
  its client's training, the process's local training and the task's
  largest client's arrays."""
  clients = tasks.client_arrays(task.train)
  settings = common.case_settings(case, 'compiled', len(clients))
  process, _ = trainer.build_for_run(settings, task.model_fn)
  specs = [
    tf.TensorSpec(w.shape, tf.float32)
    for w in process.get_model_weights.type_signature.result.trainable
  ]
  client = compiled.ClientTraining(
    process.model_fn, process.local_training, specs
  )
  train = max(clients, key=lambda a: len(a['y']))
  batch = {
    name: tf.TensorSpec([case.batch_size, *values.shape[1:]], values.dtype)
    for name, values in train.items()
  }
  fresh, step = client.traced(batch, proximal=False)
  uncompiled = tf.function(
    functools.partial(compiled.run_round, fresh, step, specs, client.gradient),
    autograph=False,
  )
  with_xla = compiled.round_function(fresh, step, specs, client.gradient)
  return (
    {'compiled': with_xla, 'uncompiled': uncompiled},
    client,
    process.local_training,
    train,
  )


def _inputs(case, task, client, local, train):
  """One call's arguments: --steps minibatches of the client's examples,
  in order, wrapping around."""
  examples = len(train['y'])
  order = np.arange(FLAGS.steps * case.batch_size) % examples
  sizes = np.full(FLAGS.steps, case.batch_size)
  indices, valid, starts = compiled.layout([(order, sizes)], case.batch_size)
  # μ = 0 and the client optimizer's hyper-parameters as the run's.
  optimizer = local.optimizer
  hparams = dict(
    optimizer.get_hparams(optimizer.initialize(tuple(client.specs)))
  )
  hparams[PROXIMAL_WEIGHT] = 0.0
  weights = learning.initial_model_weights(task.model_fn, 0).trainable
  return (
    [tf.constant(w, tf.float32) for w in weights],
    {k: tf.constant(v, tf.float32) for k, v in hparams.items()},
    {k: tf.constant(v) for k, v in train.items()},
    tf.constant(indices),
    tf.constant(valid),
    tf.constant(starts),
    tf.constant(1),
  )


def run_case(name):
  case = CASES[name]
  task = common.load_task_or_exit(case.task, None)
  functions, client, local, train = _round_functions(case, task)
  arguments = _inputs(case, task, client, local, train)
  result = dict(case=name, task=case.task, model=case.model, steps=FLAGS.steps)
  outputs = {}
  for way, function in functions.items():
    outputs[way], _ = function(*arguments)  # Traces (and compiles).
    seconds = []
    for _ in range(FLAGS.repeats):
      start = time.perf_counter()
      updates, _ = function(*arguments)
      updates[0].numpy()
      seconds.append(time.perf_counter() - start)
    result[way] = statistics.median(seconds) / FLAGS.steps
  result['uncompiled_over_compiled'] = result['uncompiled'] / result['compiled']
  result['relative_difference'] = max(
    float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
    for a, b in zip(outputs['compiled'], outputs['uncompiled'])
  )
  return result


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  unknown = [c for c in FLAGS.cases if c not in CASES]
  if unknown:
    raise app.UsageError(f'unknown cases {unknown}; of {", ".join(CASES)}')
  if FLAGS.data_dir:
    os.environ['TFF_DATA_DIR'] = FLAGS.data_dir
  results = []
  for name in FLAGS.cases:
    r = run_case(name)
    results.append(r)
    print(
      f'{name}: {r["task"]} {r["model"]}, one client, {r["steps"]} steps: '
      f'compiled {1e6 * r["compiled"]:.1f} µs a step, uncompiled '
      f'{1e6 * r["uncompiled"]:.1f} ({r["uncompiled_over_compiled"]:.2f}x); '
      f'updates differ by {r["relative_difference"]:.1e}',
      flush=True,
    )
  if FLAGS.json:
    with open(FLAGS.json, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  app.run(main)
