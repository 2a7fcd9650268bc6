"""FedProx Figure 1, Synthetic(1,1), 90% stragglers, FedAvg (drops
stragglers: one client per round): how much the seed moves it, in the numpy
reference, over seeds 0-9, with
  - our draws: our initial weights (tff_algos.learning) and our sampler's
    clients, stragglers and minibatches (tff_algos.simulation.sampling),
    replayed in the reference; on seed 0 this reproduces our TFF run's
    training loss (the run folder, if given) round by round;
  - the reference's own draws (numpy_fedavg.own_schedule and its init).

  .venv/bin/python tools/crosscheck/fig1_fedavg_seeds.py NPZ [RUN_FOLDER]

NPZ: our Synthetic(1,1), data seed 0 (export_synthetic.py). Unlike the
reference itself, this driver imports our code (for our draws).
"""

import csv
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..'))

from tasks import models
from tff_algos import learning
from tff_algos.simulation.sampling import ClientSampler
from tff_algos.simulation.sampling import StragglerPolicy

_SPEC = importlib.util.spec_from_file_location(
  'numpy_fedavg', os.path.join(os.path.dirname(__file__), 'numpy_fedavg.py')
)
ref = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ref)

K, E, B, LR, FRACTION, ROUNDS = 10, 20, 10, 0.01, 0.9, 200


def main(npz, run_folder=None):
  clients, test = ref.read_npz_clients(npz)
  sizes = [len(y) for _, y in clients]
  model = ref.mlr(60, 10)
  model_fn = models.multinomial_logistic_regression(60, 10)
  found = {'our draws': [], 'its own draws': []}
  for seed in range(10):
    sampler = ClientSampler(len(clients), K, E, seed, FRACTION)

    def ours(r, sampler=sampler):
      work = []
      for plan in sampler.participants(r, StragglerPolicy.DROP):
        order, ends = sampler.minibatch_schedule(
          r, plan.client, sizes[plan.client], plan.epochs, B
        )
        work.append(ref.ClientWork(plan.client, np.split(order, ends[:-1])))
      return work

    initial = [
      np.asarray(w, np.float32)
      for w in learning.initial_model_weights(model_fn, seed).trainable
    ]
    replay = ref.train(
      model, clients, test, LR, ROUNDS, ours, initial, eval_every=1
    )
    own = ref.train(
      model,
      clients,
      test,
      LR,
      ROUNDS,
      ref.own_schedule(len(clients), sizes, K, E, B, seed, FRACTION, False),
      model.init(np.random.default_rng([seed, 0x1417])),
      eval_every=1,
    )
    for name, history in (('our draws', replay), ('its own draws', own)):
      losses = history['train_loss']
      found[name].append((losses[-1], float(np.mean(losses[1:]))))
    if seed == 0 and run_folder:
      with open(os.path.join(run_folder, 'metrics.csv')) as f:
        tff = [float(r['train_loss']) for r in csv.DictReader(f)]
      print(
        f'seed 0, our draws: the reference vs our TFF run, largest '
        f'|Δ training loss| over rounds 0-{ROUNDS}: '
        f'{max(abs(a - b) for a, b in zip(tff, replay["train_loss"])):.1e}'
      )
  for name, values in found.items():
    values = np.array(values)
    print(
      f'{name}: final loss {", ".join(f"{v:.3f}" for v in values[:, 0])}'
      f' (mean {values[:, 0].mean():.3f} ± {values[:, 0].std(ddof=1):.3f}'
      f'); mean loss over rounds 1-{ROUNDS} {values[:, 1].mean():.3f} ± '
      f'{values[:, 1].std(ddof=1):.3f}'
    )


if __name__ == '__main__':
  main(*sys.argv[1:])
