"""One evaluation pass of a task's model over all clients of a split, with
the predictions made across clients against client by client, side by
side.

  .venv/bin/python benchmarks/evaluation_passes.py [--task=shakespeare]
      [--split=test] [--rows_per_pass=256,1024] [--repeats=1]
      [--data_dir=DIR] [--json=PATH]

Both are `evaluation.build_evaluation` over the same weights (the task's
seeded initial model, as round 0 of a run evaluates it):
  client_by_client   across_clients=False (--client_execution=per_client,
                     the reference);
  across_clients     the default: passes of up to --rows_per_pass rows
                     that cross clients, each client's batches then given
                     to the metrics as client by client.
They alternate, --repeats times each, so that load from other processes
hits both alike; each line reports wall and CPU seconds (the first call
of each traces its function: reported apart as `first`), and the last
line the largest relative difference of their metrics and of the
clients' own accuracies. For a model whose metrics are sums over
examples (no `per_client_metrics`) the predictions cross clients either
way: across_clients is then, for a dense Keras classifier (the MLR, the
2NN), one XLA program (`compiled_evaluation.sums_of`) against the passes it
replaces, and for other models the same function.
"""

import json
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags

import common  # Before TensorFlow: it prepares the runtime.

# isort: split
import numpy as np

import tasks
from tff_algos import learning
from tff_algos.simulation import evaluation

_TASK = flags.DEFINE_string('task', 'shakespeare', 'Task to evaluate.')
_SPLIT = flags.DEFINE_enum(
  'split', 'test', ['train', 'test'], "Which clients' data."
)
_ROWS = flags.DEFINE_list(
  'rows_per_pass',
  [str(evaluation.ROWS_PER_PASS)],
  'Rows of a pass across clients (each a variant).',
)
_REPEATS = flags.DEFINE_integer(
  'repeats', 1, 'Timed calls of each after the first.'
)
_DATA_DIR = flags.DEFINE_string('data_dir', None, 'Where the datasets are.')
_JSON = flags.DEFINE_string('json', None, 'Also write the results here.')


def _timed(evaluate, weights, clients):
  wall, cpu = time.perf_counter(), time.process_time()
  result = evaluate.with_clients(weights, clients)
  return result, time.perf_counter() - wall, time.process_time() - cpu


def _difference(got, want):
  """The largest relative difference of the metrics and of the clients'
  accuracies (NaN for clients without data left out)."""
  (metrics, clients), (want_metrics, want_clients) = got, want
  values = [(float(metrics[k]), float(want_metrics[k])) for k in want_metrics]
  mask = ~np.isnan(want_clients.accuracy)
  values += zip(clients.accuracy[mask], want_clients.accuracy[mask])
  return max(abs(a - b) / max(abs(b), 1e-12) for a, b in values)


def main(argv):
  del argv
  if _DATA_DIR.value:
    os.environ['TFF_DATA_DIR'] = _DATA_DIR.value
  task = common.load_task_or_exit(_TASK.value, None)
  clients = tasks.client_arrays(getattr(task, _SPLIT.value))
  weights = learning.initial_model_weights(task.model_fn, 0)
  variants = {
    'client_by_client': evaluation.build_evaluation(
      task.model_fn, across_clients=False
    )
  }
  for rows in _ROWS.value:
    variants[f'across_clients_{rows}'] = evaluation.build_evaluation(
      task.model_fn, rows_per_pass=int(rows)
    )
  print(
    f'{_TASK.value} {_SPLIT.value}: {len(clients)} clients, '
    f'{sum(len(c["x"]) for c in clients)} examples'
  )
  times = {name: [] for name in variants}
  results = {}
  for call in range(_REPEATS.value + 1):
    for name, evaluate in variants.items():
      results[name], wall, cpu = _timed(evaluate, weights, clients)
      times[name].append((wall, cpu))
      print(
        f'{name:<24} {"first" if call == 0 else "call " + str(call)}: '
        f'{wall:7.1f} s wall {cpu:7.1f} CPU-s',
        flush=True,
      )
  reference = times['client_by_client'][1:]
  summary = {}
  for name, measured in times.items():
    wall = np.median([w for w, _ in measured[1:]])
    cpu = np.median([c for _, c in measured[1:]])
    summary[name] = dict(
      wall=wall,
      cpu=cpu,
      wall_ratio=np.median([w for w, _ in reference]) / wall,
      cpu_ratio=np.median([c for _, c in reference]) / cpu,
      relative_difference=_difference(
        results[name], results['client_by_client']
      ),
    )
    line = summary[name]
    print(
      f'{name:<24} median {wall:7.1f} s wall ({line["wall_ratio"]:.2f}×) '
      f'{cpu:7.1f} CPU-s ({line["cpu_ratio"]:.2f}×), max relative '
      f'difference {line["relative_difference"]:.1e}'
    )
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(summary, f, indent=1)


if __name__ == '__main__':
  app.run(main)
