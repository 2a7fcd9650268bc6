"""How far the models of compiled clients are from the per-client path's:
the table of docs/PERFORMANCE.md ("Compiled clients").

  .venv/bin/python benchmarks/compiled_equivalence.py [--rounds=1,20]
      [--json=PATH]

For every case of tests/simulation/test_compiled.py (algorithm, aggregator,
stragglers, sampling, client optimizer; Synthetic(1,1), MLR), the same run
with --client_execution=compiled and with per_client, from the
same initial model and with the same draws, and after each of --rounds
rounds the largest relative difference of each one's model from
per_client's: max over weight tensors of max |w − w_per_client| /
max |w_per_client|.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags
from absl import logging

import common  # Before TensorFlow: it prepares the runtime.

# isort: split
import numpy as np

import tasks
from tff_algos import learning
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests')
sys.path += [_TESTS, os.path.join(_TESTS, 'simulation')]  # Its cases.
import test_compiled  # noqa: E402

FLAGS = flags.FLAGS
EXECUTIONS = ('compiled',)  # Against per_client.
flags.DEFINE_list('rounds', ['1', '20'], 'The rounds after which to compare.')
flags.DEFINE_string('json', None, 'Also write the table here.')


def _differences(case, rounds, task, arrays):
  """{execution: {round: its relative difference after it}}."""
  loops, states = {}, {}
  for execution in (*EXECUTIONS, 'per_client'):
    settings = resolve(
      Config.create(
        **dict(test_compiled.QUICK, **case, rounds=max(rounds)),
        client_execution=execution,
      ),
      num_clients=len(arrays),
    )
    loops[execution] = trainer.loop_for(settings, task.model_fn, arrays)
    states[execution] = loops[execution].initial_state(
      learning.initial_model_weights(task.model_fn, settings.run.seed)
    )
  found = {e: {} for e in EXECUTIONS}
  for round_num in range(max(rounds) + 1):
    for execution, loop in loops.items():
      states[execution] = loop.step(states[execution], round_num).state
    if round_num in rounds:
      weights = {
        e: loop.process.get_model_weights(states[e]).trainable
        for e, loop in loops.items()
      }
      for execution in EXECUTIONS:
        found[execution][round_num] = max(
          float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
          for a, b in zip(weights[execution], weights['per_client'])
        )
  return found


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  rounds = sorted(int(r) for r in FLAGS.rounds)
  common.runtime.start()
  task = tasks.load_task('synthetic_1_1')
  arrays = tasks.client_arrays(task.train)
  table = {}
  try:
    print(
      '| case | '
      + ' | '.join(
        f'{e}, after {r} round{"s" * (r > 1)}'
        for e in EXECUTIONS
        for r in rounds
      )
      + ' |'
    )
    print('|---|' + '---:|' * len(rounds) * len(EXECUTIONS))
    for name, case in test_compiled.CASES.items():
      table[name] = _differences(case, rounds, task, arrays)
      print(
        f'| {name} | '
        + ' | '.join(
          f'{table[name][e][r]:.1e}' for e in EXECUTIONS for r in rounds
        )
        + ' |',
        flush=True,
      )
  finally:
    common.runtime.stop()
  if FLAGS.json:
    with open(FLAGS.json, 'w') as f:
      json.dump(table, f, indent=2)


if __name__ == '__main__':
  app.run(main)
