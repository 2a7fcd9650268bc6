"""Local-SGD throughput: ours vs TFF's built-in FedProx vs a fused TF loop.

  .venv/bin/python benchmarks/throughput.py --workload=synthetic_mlr [--json PATH]

In ONE process, the same rounds (same clients, minibatches and μ) are run
  1. ours: tff_algos.build_fed_prox through the TFF runtime;
  2. TFF's tff.learning.algorithms.build_weighted_fed_prox on tf.data
     datasets holding exactly the same minibatches;
  3. fused: the same proximal SGD steps as one plain tf.function per client,
     no federated runtime (the practical limit of this machine).
Each reports local SGD steps per second and seconds per round (median over
--rounds measured rounds after --warmup rounds). The last line gives the
ratios ours/TFF-built-in and ours/fused.
"""

import collections
import json
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

import tasks  # pylint: disable=g-import-not-at-top
from tff_algos import composition  # pylint: disable=g-import-not-at-top
from tff_algos import experiment  # pylint: disable=g-import-not-at-top
from tff_algos import fedprox  # pylint: disable=g-import-not-at-top
from tff_algos import runtime  # pylint: disable=g-import-not-at-top
from tff_algos.sampling import ClientSampler  # pylint: disable=g-import-not-at-top

# name: (task, clients per round K, epochs E, batch size B, client lr, μ)
WORKLOADS = {
    'synthetic_mlr': ('synthetic_1_1', 10, 20, 10, 0.01, 1.0),
}

FLAGS = flags.FLAGS
flags.DEFINE_enum('workload', 'synthetic_mlr', list(WORKLOADS), 'Workload.')
flags.DEFINE_integer('rounds', 5, 'Measured rounds.')
flags.DEFINE_integer('warmup', 2, 'Rounds run first and not measured '
                     '(tracing, compilation).')
flags.DEFINE_string('json', None, 'Also write the results to this file.')


def tf_dataset(client_input):
  """The minibatches of one client input, in order, as a tf.data.Dataset."""
  data = client_input['data']
  order, ends = client_input['example_order'], client_input['batch_ends']
  n = len(next(iter(data.values())))
  batch_size = int(ends[0])
  epochs = [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      (k, v[order[e * n:(e + 1) * n]]) for k, v in data.items()))
            .batch(batch_size) for e in range(len(order) // n)]
  dataset = epochs[0]
  for more in epochs[1:]:
    dataset = dataset.concatenate(more)
  return dataset


def build_fused_round(model, learning_rate, mu):
  """One round's local work as plain TF: a tf.function per client (traced
  once), then the n_k-weighted mean of the client models."""
  variables = model.trainable_variables

  @tf.function(reduce_retracing=True)
  def train(initial, data, order, ends):
    for v, w in zip(variables, initial):
      v.assign(w)
    start = tf.constant(0)
    for end in ends:
      batch = tf.nest.map_structure(lambda t: tf.gather(t, order[start:end]),
                                    data)
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      for v, g, w0 in zip(variables, tape.gradient(loss, variables), initial):
        v.assign_sub(learning_rate * (g + mu * (v - w0)))
      start = end
    return [tf.identity(v) for v in variables]

  def fused_round(weights, inputs):
    total, weight = None, 0.0
    for (client_input,) in inputs:
      n = float(len(client_input['data']['y']))
      result = train(weights, client_input['data'],
                     client_input['example_order'],
                     client_input['batch_ends'])
      total = [n * r.numpy() + (0 if total is None else t)
               for r, t in zip(result, total or result)]
      weight += n
    return [tf.constant(t / weight) for t in total]

  return fused_round


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  runtime.start()
  task_name, k, epochs, batch_size, lr, mu = WORKLOADS[FLAGS.workload]
  task = tasks.load_task(task_name)
  arrays = tasks.client_arrays(task.train)
  sampler = ClientSampler(len(arrays), k, epochs, seed=0)
  rounds = range(1, FLAGS.warmup + FLAGS.rounds + 1)
  inputs = {r: experiment.round_inputs(sampler, sampler.round_plan(r), arrays,
                                       r, batch_size) for r in rounds}
  steps = {r: sum(len(i[0]['batch_ends']) for i in inputs[r]) for r in rounds}
  datasets = {r: [tf_dataset(i[0]) for i in inputs[r]] for r in rounds}
  initial = composition.initial_model_weights(task.model_fn, 0)

  def measure(run_round):
    seconds = []
    for r in rounds:
      start = time.perf_counter()
      run_round(r)
      if r > FLAGS.warmup:
        seconds.append(time.perf_counter() - start)
    total_steps = sum(steps[r] for r in rounds if r > FLAGS.warmup)
    return dict(steps_per_second=total_steps / sum(seconds),
                seconds_per_round=statistics.median(seconds))

  results = {}
  for name, process, round_data in (
      ('ours', fedprox.build_fed_prox(task.model_fn, lr, mu), inputs),
      ('tff_builtin', tff.learning.algorithms.build_weighted_fed_prox(
          task.model_fn, proximal_strength=mu,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0)),
       datasets)):
    state = process.set_model_weights(process.initialize(), initial)

    def run_round(r, process=process, round_data=round_data):
      nonlocal state
      state = process.next(state, round_data[r]).state

    results[name] = measure(run_round)

  fused_round = build_fused_round(task.model_fn(), lr, mu)
  weights = [tf.constant(w) for w in initial.trainable]

  def fused(r):
    nonlocal weights
    weights = fused_round(weights, inputs[r])

  results['fused'] = measure(fused)
  results['ratio_ours_over_tff_builtin'] = (
      results['ours']['steps_per_second'] /
      results['tff_builtin']['steps_per_second'])
  results['ratio_ours_over_fused'] = (
      results['ours']['steps_per_second'] /
      results['fused']['steps_per_second'])
  for name in ('ours', 'tff_builtin', 'fused'):
    print(f'{name:12s} {results[name]["steps_per_second"]:10.0f} steps/s '
          f'{results[name]["seconds_per_round"]:8.3f} s/round')
  print(f'{FLAGS.workload}: ours/tff_builtin = '
        f'{results["ratio_ours_over_tff_builtin"]:.2f}x, ours/fused = '
        f'{results["ratio_ours_over_fused"]:.2f}x')
  if FLAGS.json:
    with open(FLAGS.json, 'w') as f:
      json.dump(dict(workload=FLAGS.workload, **results), f, indent=2)
  runtime.stop()


if __name__ == '__main__':
  app.run(main)
