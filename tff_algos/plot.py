"""Plots a metric of one or more runs against rounds (the papers' figures).

  python -m tff_algos.plot RUN_DIR... --metric=train_loss --out=fig.png

Each RUN_DIR holds a metrics.csv (and config.json, which names the line).
"""

import argparse
import os
import sys

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from tff_algos import results  # pylint: disable=g-import-not-at-top


def label(run_dir):
  """The line's name: the algorithm and its μ/λ and stragglers."""
  config = results.read_json(run_dir, results.CONFIG_FILE)
  if config is None:
    return os.path.basename(os.path.normpath(run_dir))
  text = config['algo']
  if config['algo'] == 'fedprox':
    text += f' μ={config["mu"]:g}' + (' adaptive' if config['adaptive_mu']
                                       else '')
  elif config['algo'] == 'fedisgd':
    text += f' λ={config["mu"]:g}'
  if config.get('straggler_fraction'):
    text += f' ({config["straggler_policy"] or "default"} stragglers)'
  return text


def plot_runs(run_dirs, metric, out, title='', labels=None, target=None):
  """Draws `metric` against rounds, one line per run, into the file `out`
  (with a dashed horizontal line at `target`, if given)."""
  figure, axes = plt.subplots(figsize=(5, 3.5))
  for i, run_dir in enumerate(run_dirs):
    rounds, values = results.series(results.read_rows(run_dir), metric)
    if not rounds:
      raise ValueError(f'{run_dir} has no {metric!r} values')
    axes.plot(rounds, values, label=labels[i] if labels else label(run_dir))
  if target is not None:
    axes.axhline(target, color='gray', linestyle='--', linewidth=1,
                 label=f'target {target:g}')
  axes.set_xlabel('# rounds')
  axes.set_ylabel(metric)
  axes.set_title(title)
  axes.legend()
  figure.tight_layout()
  figure.savefig(out, dpi=120)
  plt.close(figure)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('run_dirs', nargs='+')
  parser.add_argument('--metric', default='train_loss')
  parser.add_argument('--out', required=True)
  parser.add_argument('--title', default='')
  args = parser.parse_args(argv)
  for run_dir in args.run_dirs:
    if not results.has_rows(run_dir):
      parser.exit(2, f'plot: error: no rounds in {run_dir}/'
                  f'{results.METRICS_FILE}\n')
  try:
    plot_runs(args.run_dirs, args.metric, args.out, args.title)
  except ValueError as e:
    parser.exit(2, f'plot: error: {e}\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
