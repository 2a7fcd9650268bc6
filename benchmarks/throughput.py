"""Local-SGD throughput: ours vs TFF's built-in algorithm vs a fused TF loop.

  .venv/bin/python benchmarks/throughput.py --workload=NAME [--json PATH]
      [--data_dir DIR] [--rounds N] [--warmup N]

Workloads (WORKLOADS below): `synthetic_mlr` (FedProx Synthetic(1,1), μ = 1,
MLR), `mnist_cnn` (FedAvg, MNIST IID 100 × 600, CNN), `shakespeare_lstm`
(FedAvg, TFF's federated Shakespeare, char-LSTM) and `synthetic_one_client`
(FedAvg on Synthetic(1,1), one client per round, E = 20, B = 10: the round's
fixed cost); the dataset workloads read
--data_dir (default: as run_experiment.py, $TFF_DATA_DIR else ~/.tff).

In ONE process, the same rounds (same clients, minibatches and μ) are run
  1. ours: FedProx (μ > 0) or FedAvg (μ = 0), a round of the simulation loop
     (`tff_algos.simulation.loop`, what run_experiment.py runs: drawing the
     round's schedule and the process's round through the TFF runtime);
  2. TFF's tff.learning.algorithms.build_weighted_fed_prox (μ > 0) or
     build_weighted_fed_avg (μ = 0) on tf.data datasets holding exactly the
     same minibatches;
  3. fused: the same (proximal) SGD steps as one plain tf.function per client,
     no federated runtime (the practical limit of this machine);
  4. ours_production: our production build (`learning.DatasetInput(E)`, as
     docs/guide/porting.md ports it) on each client's first pass, E passes: as
     many steps, the first pass's order repeated.
The four run round by round in turn (so that load from other processes hits
all four alike). Each reports local SGD steps per second and seconds per
round (median over --rounds measured rounds after --warmup rounds), and the
same per CPU second of this process plus the TFF worker (CPU time is less
skewed than wall time by other processes on the machine; wall time is the
figure that counts). The last line gives the ratios ours/TFF-built-in and
ours/fused (then the same per CPU second), and ours' seconds per round split
into its local steps (at the fused loop's rate) and the per-round overhead
(the rest: serialization, RPCs, the TFF runtime), or where ours takes less
than those steps alone (clients compiled), no split (the
JSON's overhead_seconds_per_round is then null). --clients_per_round and --epochs
shrink a workload for quick checks (the test suite uses them).
"""

import collections
import json
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

import tasks
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedprox
from tff_algos.simulation import client_inputs
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

Workload = collections.namedtuple(
  'Workload', 'task clients_per_round epochs batch_size client_lr mu'
)
WORKLOADS = {
  # FedProx Synthetic(1,1) (Li et al. 2020): K=10, E=20, B=10, lr 0.01, μ=1.
  'synthetic_mlr': Workload('synthetic_1_1', 10, 20, 10, 0.01, 1.0),
  # FedAvg CNN on MNIST IID (McMahan et al. 2017): K=10 (C=0.1), E=5, B=10.
  'mnist_cnn': Workload('mnist_iid_cnn', 10, 5, 10, 0.05, 0.0),
  # FedAvg char-LSTM on TFF's Shakespeare: K=10, E=1, B=10.
  'shakespeare_lstm': Workload('shakespeare', 10, 1, 10, 1.0, 0.0),
  # One client per round (FedAvg at K=10 with 90% stragglers dropped):
  # Synthetic(1,1), E=20, B=10: the round's fixed cost against its steps.
  'synthetic_one_client': Workload('synthetic_1_1', 1, 20, 10, 0.01, 0.0),
}

FLAGS = flags.FLAGS
flags.DEFINE_enum('workload', 'synthetic_mlr', list(WORKLOADS), 'Workload.')
flags.DEFINE_integer('rounds', 5, 'Measured rounds.')
flags.DEFINE_integer(
  'warmup', 2, 'Rounds run first and not measured (tracing, compilation).'
)
flags.DEFINE_string('json', None, 'Also write the results to this file.')
flags.DEFINE_string(
  'data_dir',
  None,
  'Where dataset workloads find their '
  'files (default $TFF_DATA_DIR, else ~/.tff).',
)
flags.DEFINE_integer('clients_per_round', None, "Override the workload's K.")
flags.DEFINE_integer('epochs', None, "Override the workload's E.")


def cpu_seconds():
  """CPU time used so far by this process and the TFF worker (Linux): less
  sensitive than wall time to other processes sharing the machine."""
  total = time.process_time()
  pid = runtime.worker_pid()
  if pid is not None:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
    total += (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
  return total


def build_fused_round(model, learning_rate, mu):
  """One round's local work as plain TF: a tf.function per client (traced
  once), then the n_k-weighted mean of the client models. μ = 0 (a Python
  number here) traces plain SGD steps, without the proximal term."""
  variables = model.trainable_variables

  @tf.function(reduce_retracing=True)
  def train(initial, data, order, ends):
    for v, w in zip(variables, initial):
      v.assign(w)
    start = tf.constant(0)
    for end in ends:
      batch = tf.nest.map_structure(  # Calls the lambda at once.
        lambda t: tf.gather(t, order[start:end]),  # noqa: B023
        data,
      )
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      for v, g, w0 in zip(variables, tape.gradient(loss, variables), initial):
        g = tf.convert_to_tensor(g)  # Embeddings' gradients: IndexedSlices.
        v.assign_sub(learning_rate * (g + mu * (v - w0) if mu else g))
      start = end
    return [tf.identity(v) for v in variables]

  def fused_round(weights, inputs):
    total, weight = None, 0.0
    for (client_input,) in inputs:
      n = float(len(client_input['data']['y']))
      result = train(
        weights,
        client_input['data'],
        client_input['example_order'],
        client_input['batch_ends'],
      )
      total = [
        n * r.numpy() + (0 if total is None else t)
        for r, t in zip(result, total or result)
      ]
      weight += n
    return [tf.constant(t / weight) for t in total]

  return fused_round


def _split_line(results):
  """Ours' round as its local steps at the fused loop's rate plus the
  rest, or, where it takes less than those steps alone, saying so."""
  steps_per_round = results['local_steps_per_round']
  ours = results['ours']['seconds_per_round']
  steps = results['local_steps_seconds_per_round']
  head = f'ours: {ours:.3f} s/round'
  if results['overhead_seconds_per_round'] is None:
    return (
      f'{head}, less than its {steps_per_round:.0f} local steps take in the '
      f'fused loop ({steps:.3f} s): no per-round overhead to split off'
    )
  return (
    f'{head} = {steps_per_round:.0f} local steps ({steps:.3f} s at the '
    f"fused loop's rate) + {results['overhead_seconds_per_round']:.3f} s "
    'per-round overhead'
  )


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  load_at_start = os.getloadavg()  # Other processes skew the figures.
  workload = WORKLOADS[FLAGS.workload]
  task = common.load_task_or_exit(workload.task, FLAGS.data_dir)
  runtime.start()
  k = FLAGS.clients_per_round or workload.clients_per_round
  epochs = FLAGS.epochs or workload.epochs
  batch_size, lr, mu = workload.batch_size, workload.client_lr, workload.mu
  arrays = tasks.client_arrays(task.train)
  settings = resolve(
    Config.create(
      algo='fedprox' if mu else 'fedavg',
      task=workload.task,
      clients_per_round=k,
      epochs=epochs,
      batch_size=batch_size,
      client_lr=lr,
      **(dict(mu=mu) if mu else {}),
    )
  )
  loop = trainer.loop_for(settings, task.model_fn, arrays, evaluate=False)
  sampler = loop.sampler
  rounds = range(1, FLAGS.warmup + FLAGS.rounds + 1)
  inputs = {
    r: client_inputs.round_inputs(
      sampler, sampler.round_plan(r), arrays, r, batch_size
    )
    for r in rounds
  }

  def steps_of(client_input):
    return len(client_input[0]['batch_ends'])

  steps = {r: sum(map(steps_of, inputs[r])) for r in rounds}
  datasets = {
    r: [client_inputs.as_dataset(i) for i in inputs[r]] for r in rounds
  }
  initial = learning.initial_model_weights(task.model_fn, 0)

  sgd = tff.learning.optimizers.build_sgdm
  if mu:
    builtin = tff.learning.algorithms.build_weighted_fed_prox(
      task.model_fn,
      proximal_strength=mu,
      client_optimizer_fn=sgd(lr),
      server_optimizer_fn=sgd(1.0),
    )
  else:
    builtin = tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn, client_optimizer_fn=sgd(lr), server_optimizer_fn=sgd(1.0)
    )

  production_arguments = dict(
    client_optimizer_fn=sgd(lr),
    server_optimizer_fn=sgd(1.0),
    client_input=learning.DatasetInput(epochs),
  )
  if mu:
    production = fedprox.build_fed_prox(
      task.model_fn, proximal_strength=mu, **production_arguments
    )
  else:
    production = fedavg.build_fed_avg(task.model_fn, **production_arguments)
  first_passes = {
    r: [
      client_inputs.as_dataset(i).take(steps_of(i) // epochs) for i in inputs[r]
    ]
    for r in rounds
  }

  def simulation_loop():
    state = loop.initial_state(initial)

    def run_round(r):
      nonlocal state
      state = loop.step(state, r).state

    return run_round

  def federated(process, round_data):
    state = process.set_model_weights(process.initialize(), initial)

    def run_round(r):
      nonlocal state
      state = process.next(state, round_data[r]).state

    return run_round

  def fused(fused_round):
    weights = [tf.constant(w) for w in initial.trainable]

    def run_round(r):
      nonlocal weights
      weights = fused_round(weights, inputs[r])

    return run_round

  runners = collections.OrderedDict(
    ours=simulation_loop(),
    tff_builtin=federated(builtin, datasets),
    fused=fused(build_fused_round(task.model_fn(), lr, mu)),
    ours_production=federated(production, first_passes),
  )
  # Round by round, the four ways in turn: a change in the load from other
  # processes then hits all four alike.
  wall, cpu = collections.defaultdict(list), collections.defaultdict(list)
  for r in rounds:
    for name, run_round in runners.items():
      start, start_cpu = time.perf_counter(), cpu_seconds()
      run_round(r)
      if r > FLAGS.warmup:
        wall[name].append(time.perf_counter() - start)
        cpu[name].append(cpu_seconds() - start_cpu)
  total_steps = sum(steps[r] for r in rounds if r > FLAGS.warmup)
  results = collections.OrderedDict()
  for name in runners:
    results[name] = dict(
      steps_per_second=total_steps / sum(wall[name]),
      seconds_per_round=statistics.median(wall[name]),
      steps_per_cpu_second=total_steps / sum(cpu[name]),
      cpu_seconds_per_round=statistics.median(cpu[name]),
    )
  results['ratio_ours_production_over_tff_builtin'] = (
    results['ours_production']['steps_per_second']
    / results['tff_builtin']['steps_per_second']
  )
  for other in ('tff_builtin', 'fused'):
    for measure, suffix in (
      ('steps_per_second', ''),
      ('steps_per_cpu_second', '_cpu'),
    ):
      results[f'ratio_ours_over_{other}{suffix}'] = (
        results['ours'][measure] / results[other][measure]
      )
  # The round's fixed cost: ours' seconds per round beyond what its local
  # steps cost in the fused plain-TF loop (same steps, no federated runtime).
  measured = [r for r in rounds if r > FLAGS.warmup]
  steps_per_round = statistics.median(steps[r] for r in measured)
  fused_step = statistics.median(
    w / steps[r] for w, r in zip(wall['fused'], measured)
  )
  results['local_steps_per_round'] = steps_per_round
  results['local_steps_seconds_per_round'] = steps_per_round * fused_step
  # Ours can take less than the fused loop's steps alone (its clients
  # compiled by XLA): then the rest is no overhead.
  rest = results['ours']['seconds_per_round'] - steps_per_round * fused_step
  results['overhead_seconds_per_round'] = rest if rest >= 0 else None
  for name in runners:
    print(
      f'{name:15s} {results[name]["steps_per_second"]:10.0f} steps/s '
      f'{results[name]["seconds_per_round"]:8.3f} s/round '
      f'{results[name]["steps_per_cpu_second"]:10.0f} steps/CPU-s '
      f'{results[name]["cpu_seconds_per_round"]:8.3f} CPU-s/round'
    )
  print(
    f'{FLAGS.workload}: ours/tff_builtin = '
    f'{results["ratio_ours_over_tff_builtin"]:.2f}x, ours/fused = '
    f'{results["ratio_ours_over_fused"]:.2f}x (per CPU second: '
    f'{results["ratio_ours_over_tff_builtin_cpu"]:.2f}x, '
    f'{results["ratio_ours_over_fused_cpu"]:.2f}x); ours_production/'
    f'tff_builtin = {results["ratio_ours_production_over_tff_builtin"]:.2f}x'
  )
  print(_split_line(results))
  if FLAGS.json:
    with open(FLAGS.json, 'w') as f:
      json.dump(
        dict(
          workload=FLAGS.workload,
          clients_per_round=k,
          epochs=epochs,
          rounds=FLAGS.rounds,
          warmup=FLAGS.warmup,
          load_average_at_start_and_end=[load_at_start, os.getloadavg()],
          **results,
        ),
        f,
        indent=2,
      )
  runtime.stop()


if __name__ == '__main__':
  app.run(main)
