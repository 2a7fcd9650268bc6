"""Plots a metric of one or more runs against rounds (the papers' figures).

  python -m tff_algos.plot RUN_DIR... --metric=train_loss --out=fig.png

Each RUN_DIR holds a metrics.csv (and config.json, which names the line).
"""

import argparse
import csv
import json
import os
import sys

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top


def read_metric(run_dir, metric):
  """(rounds, values) of the rows of run_dir/metrics.csv that have `metric`."""
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    rows = [r for r in csv.DictReader(f) if r.get(metric)]
  return [int(r['round']) for r in rows], [float(r[metric]) for r in rows]


def label(run_dir):
  path = os.path.join(run_dir, 'config.json')
  if not os.path.exists(path):
    return os.path.basename(os.path.normpath(run_dir))
  with open(path) as f:
    config = json.load(f)
  text = config['algo']
  if config['algo'] == 'fedprox':
    text += f' μ={config["mu"]:g}' + (' adaptive' if config['adaptive_mu']
                                       else '')
  elif config['algo'] == 'fedisgd':
    text += f' λ={config["mu"]:g}'
  if config.get('straggler_fraction'):
    text += f' ({config["straggler_policy"] or "default"} stragglers)'
  return text


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='+')
  parser.add_argument('--metric', default='train_loss')
  parser.add_argument('--out', required=True)
  parser.add_argument('--title', default='')
  args = parser.parse_args(argv)
  figure, axes = plt.subplots(figsize=(5, 3.5))
  for run_dir in args.run_dirs:
    if not os.path.exists(os.path.join(run_dir, 'metrics.csv')):
      parser.exit(2, f'plot: error: no metrics.csv in {run_dir}\n')
    rounds, values = read_metric(run_dir, args.metric)
    if not rounds:
      parser.exit(2, f'plot: error: {run_dir} has no {args.metric!r} values\n')
    axes.plot(rounds, values, label=label(run_dir))
  axes.set_xlabel('# rounds')
  axes.set_ylabel(args.metric)
  axes.set_title(args.title)
  axes.legend()
  figure.tight_layout()
  figure.savefig(args.out, dpi=120)
  return 0


if __name__ == '__main__':
  sys.exit(main())
