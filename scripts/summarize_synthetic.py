"""Tables and plots of scripts/reproduce_synthetic.sh's runs, for REPRODUCTION.md.

  .venv/bin/python scripts/summarize_synthetic.py runs/reproduction docs/figures
"""

import csv
import os
import sys

from tff_algos import plot

ALGOS = (('fedavg', 'FedAvg'), ('fedprox0', 'FedProx μ=0'),
         ('fedprox1', 'FedProx μ=1'), ('fedisgd', 'FedISGD λ=1'))
STRAGGLERS = ('0', '0.5', '0.9')
TABLE3 = (('synthetic_0_0', 'Synthetic(0,0)', (79.6, 83.6, 85.0)),
          ('synthetic_0.5_0.5', 'Synthetic(0.5,0.5)', (79.3, 81.7, 84.5)),
          ('synthetic_1_1', 'Synthetic(1,1)', (69.7, 75.6, 76.3)))


def rows(run_dir):
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    return list(csv.DictReader(f))


def final(run_dir):
  """(final train loss, mean train loss over rounds 1…T, final test acc)."""
  data = rows(run_dir)
  mean_loss = sum(float(r['train_loss']) for r in data[1:]) / (len(data) - 1)
  return (float(data[-1]['train_loss']), mean_loss,
          float(data[-1]['test_accuracy']))


def last_half_accuracy(run_dir):
  """Mean test accuracy over rounds T/2+1 … T (FedISGD Tables 3–4)."""
  data = [r for r in rows(run_dir)[1:] if r['test_accuracy']]
  half = data[len(data) // 2:]
  return 100 * sum(float(r['test_accuracy']) for r in half) / len(half)


def main(runs, figures):
  os.makedirs(figures, exist_ok=True)
  print('| algorithm | ' + ' | '.join(
      f'{float(s):.0%} stragglers' for s in STRAGGLERS) + ' |')
  print('|---' * (len(STRAGGLERS) + 1) + '|')
  for key, name in ALGOS:
    cells = []
    for s in STRAGGLERS:
      loss, mean_loss, accuracy = final(os.path.join(runs, f'fig1_{key}_s{s}'))
      cells.append(f'{loss:.3f} / {mean_loss:.3f} / {100 * accuracy:.1f}%')
    print(f'| {name} | ' + ' | '.join(cells) + ' |')
  for s in STRAGGLERS:
    plot.main([os.path.join(runs, f'fig1_{key}_s{s}') for key, _ in ALGOS] + [
        '--metric=train_loss', f'--out={figures}/fig1_stragglers_{s}.png',
        f'--title=Synthetic(1,1), {float(s):.0%} stragglers'])
  print()
  print('| dataset | FedAvg (paper / ours) | FedProx (paper / ours) | '
        'FedISGD (paper / ours) |')
  print('|---|---|---|---|')
  for task, name, paper in TABLE3:
    dirs = [os.path.join(runs, f't3_{a}_{task}')
            for a in ('fedavg', 'fedprox', 'fedisgd')]
    cells = [f'{p:.1f} / {last_half_accuracy(d):.1f}'
             for p, d in zip(paper, dirs)]
    print(f'| {name} | ' + ' | '.join(cells) + ' |')
    plot.main(dirs + ['--metric=train_loss', f'--out={figures}/table3_{task}.png',
                      f'--title={name}, no stragglers'])


if __name__ == '__main__':
  main(*sys.argv[1:3])
