"""FedProx Figure 12's two sampling schemes: the local steps behind each
round's averaged model, from the run folders and the runs' own draws.

  .venv/bin/python tools/fig12_local_steps.py --runs=runs [--task=synthetic_iid]

A client of fedprox_fig12 runs E = 20 epochs of B = 10 minibatches, so its
local steps grow with its n_k. Each round, this script redraws the clients
the run selected (tff_algos.simulation.sampling, the run's seed and scheme;
the generated task's training sizes) and checks their local steps against
the run's logged `local_steps` column; then it weights each client's steps
by its aggregation weight (n_k / Σ n_k over the selected under uniform
sampling, 1/K under sampling ∝ n_k): the local steps behind the averaged
model. Reads run folders, and generates the task to know its sizes (tasks/synthetic.py).
"""

import argparse
import csv
import math
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from tasks import synthetic
from tff_algos.simulation import sampling

K, E, B = 10, 20, 10


def training_sizes(task, data_seed=0):
  alpha, beta, iid, classes = synthetic.parse_name(task)
  train, _ = synthetic.split_devices(
    *synthetic.generate(
      alpha, beta, iid, data_seed, classes_per_device=classes
    ),
    data_seed,
  )
  return np.array([len(d['y']) for d in train.values()])


def weighted_steps(folder, scheme, seed, sizes):
  """(rounds whose logged local_steps the redraw reproduces, rounds, mean
  aggregation-weighted local steps per round)."""
  sampler = sampling.ClientSampler(
    num_clients=len(sizes),
    clients_per_round=K,
    epochs=E,
    seed=seed,
    scheme=scheme,
    client_sizes=sizes.tolist(),
  )
  steps = np.array([E * math.ceil(n / B) for n in sizes])
  with open(os.path.join(folder, 'metrics.csv')) as f:
    logged = {
      int(r['round']): int(r['local_steps'])
      for r in csv.DictReader(f)
      if r.get('local_steps')
    }
  same, behind = 0, []
  for round_num, total in logged.items():
    chosen = sampler.selected(round_num)
    same += int(steps[chosen].sum()) == total
    weights = (
      sizes[chosen] / sizes[chosen].sum()
      if scheme == 'uniform'
      else np.full(len(chosen), 1 / len(chosen))
    )
    behind.append(float(weights @ steps[chosen]))
  return same, len(logged), statistics.fmean(behind)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', default='runs')
  parser.add_argument('--task', default='synthetic_iid')
  args = parser.parse_args()
  sizes = training_sizes(args.task)
  print(
    f'{args.task}: {len(sizes)} clients, {sizes.sum()} training '
    f'examples, the largest {sizes.max()} ({sizes.max() / sizes.sum():.1%})'
  )
  for scheme in ('uniform', 'proportional'):
    for mu in ('0', '1'):
      for seed in (0, 1, 2):
        folder = os.path.join(
          args.runs,
          'fedprox_fig12',
          f'{scheme}_mu{mu}__task-{args.task}__seed-{seed}',
        )
        if not os.path.exists(os.path.join(folder, 'summary.json')):
          continue
        same, rounds, behind = weighted_steps(folder, scheme, seed, sizes)
        print(
          f'{scheme}_mu{mu} seed {seed}: the redraw reproduces the logged '
          f'local steps in {same} of {rounds} rounds; local steps behind '
          f'the averaged model {behind:.0f} per round'
        )


if __name__ == '__main__':
  main()
