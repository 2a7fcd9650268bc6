"""Large cohorts of small models: seconds per round of the simulation's
client executions against the reference (one TFF call per client, its data
sent), side by side.

  .venv/bin/python benchmarks/cohort.py [--cases=NAME,...] [--rounds=N]
      [--executions=E,...] [--data_dir=DIR] [--json=PATH]

For each case (benchmarks/cases.py: a task, its model, the cohort K and
the local work) the same rounds are run in ONE process by each execution of
the simulation loop (`trainer.loop_for`, without the evaluation: the training
round as run_experiment.py runs it, drawing the schedule and calling the
process), alternating round by round so that load from other processes
hits them alike (--executions, of):
  compiled     --client_execution=compiled (`simulation.compiled`);
  auto         --client_execution=auto: compiled where it pays, else
               per client with each client reading its data in
               the worker (`simulation.client_store`);
  per_client   --client_execution=per_client (the reference path).
Each reports the median seconds of a training round over --rounds measured
rounds (after one warm-up round, which traces), the seconds per client,
and the bytes serialized to the TFF worker per round (the Python side's
serialization of every value a round sends), and per_client's seconds as
a multiple of its own. All start from the same model and draw the same
clients and minibatches; each also gives the largest relative difference
of its model from per_client's after the rounds run.
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

from cases import CASES
import common  # Before TensorFlow: it prepares the runtime.

# isort: split
import numpy as np

import tasks
from tff_algos import learning
from tff_algos.runtime import profiling
from tff_algos.simulation import trainer

EXECUTIONS = ('compiled', 'auto', 'per_client')

FLAGS = flags.FLAGS
flags.DEFINE_list(
  'cases',
  ['mlr_synthetic_10', 'mlr_mnist_100'],
  f'Cases to run, of: {", ".join(CASES)}.',
)
flags.DEFINE_integer('rounds', 5, 'Measured rounds (after one warm-up).')
flags.DEFINE_list(
  'executions',
  ['compiled', 'per_client'],
  f'Client executions to compare with per_client, of: {", ".join(EXECUTIONS)}.',
)
flags.DEFINE_string(
  'data_dir',
  None,
  'Where the dataset tasks read their data (as $TFF_DATA_DIR).',
)
flags.DEFINE_string('json', None, 'Also write the results here.')


def _loops(case, task, train):
  """The case's loop per execution, and how each trains its clients."""
  loops = {}
  for execution in dict.fromkeys([*FLAGS.executions, 'per_client']):
    settings = common.case_settings(
      case, execution, len(train), rounds=FLAGS.rounds + 1
    )
    process, how = trainer.build_for_run(settings, task.model_fn)
    loops[execution] = (
      trainer.loop_for(
        settings, task.model_fn, train, process=process, evaluate=False
      ),
      how,
    )
  return loops


def run_case(name):
  case = CASES[name]
  task = common.load_task_or_exit(case.task, None)
  train = tasks.client_arrays(task.train)
  loops = _loops(case, task, train)
  initial = learning.initial_model_weights(task.model_fn, 0)
  states = {e: loop.initial_state(initial) for e, (loop, _) in loops.items()}
  seconds = collections.defaultdict(list)
  sent = collections.defaultdict(list)
  for round_num in range(1, FLAGS.rounds + 2):
    for execution, (loop, _) in loops.items():
      profiling.SENT.clear()
      start = time.perf_counter()
      states[execution], _, _ = loop.train(states[execution], round_num)
      seconds[execution].append(time.perf_counter() - start)
      sent[execution].append(profiling.SENT['bytes'])
  weights = {
    e: loop.process.get_model_weights(states[e]).trainable
    for e, (loop, _) in loops.items()
  }
  result = dict(
    case=name,
    task=case.task,
    model=case.model,
    clients_per_round=case.clients_per_round,
    epochs=case.epochs,
    batch_size=case.batch_size,
    rounds=FLAGS.rounds,
  )
  reference = statistics.median(seconds['per_client'][1:])
  for execution, (_, how) in loops.items():
    median = statistics.median(seconds[execution][1:])
    result[execution] = dict(
      how=how,
      seconds_per_round=median,
      seconds_per_client=median / case.clients_per_round,
      bytes_per_round=statistics.median(sent[execution][1:]),
      first_round_seconds=seconds[execution][0],
      per_client_ratio=reference / median,
      relative_difference=max(
        float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
        for a, b in zip(weights[execution], weights['per_client'])
      ),
    )
  return result


def _print(result):
  print(
    f'{result["case"]}: {result["task"]} {result["model"]}, '
    f'K={result["clients_per_round"]}, E={result["epochs"]}, '
    f'B={result["batch_size"]} (median of {result["rounds"]} rounds)'
  )
  for execution in EXECUTIONS:
    if execution not in result:
      continue
    r = result[execution]
    print(
      f'  {execution:10s} {r["seconds_per_round"]:8.4f} s/round  '
      f'{1e3 * r["seconds_per_client"]:8.3f} ms/client  '
      f'{r["bytes_per_round"] / 1e6:9.3f} MB sent  '
      f'per_client/this {r["per_client_ratio"]:.2f}x  '
      f'model differs by {r["relative_difference"]:.2e}  ({r["how"]})'
    )
  print(
    f'  (models compared after {result["rounds"] + 1} rounds, relative)',
    flush=True,
  )


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  unknown = [c for c in FLAGS.cases if c not in CASES]
  if unknown:
    raise app.UsageError(f'unknown cases {unknown}; of {", ".join(CASES)}')
  unknown = [e for e in FLAGS.executions if e not in EXECUTIONS]
  if unknown:
    raise app.UsageError(
      f'unknown executions {unknown}; of {", ".join(EXECUTIONS)}'
    )
  if FLAGS.data_dir:
    os.environ['TFF_DATA_DIR'] = FLAGS.data_dir
  common.runtime.start()
  profiling.instrument()
  results = []
  try:
    for name in FLAGS.cases:
      results.append(run_case(name))
      _print(results[-1])
  finally:
    common.runtime.stop()
  if FLAGS.json:
    with open(FLAGS.json, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  app.run(main)
