"""Plots a metric of runs against rounds (the papers' figures).

Each run folder holds a metrics.csv (and config.json, which names the line).
The command line is `python -m tff_algos.plot`.
"""

import os

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from tff_algos.analysis import results  # pylint: disable=g-import-not-at-top
from tff_algos.simulation.columns import DESCRIPTIONS  # pylint: disable=g-import-not-at-top
from tff_algos.simulation.config import Config  # pylint: disable=g-import-not-at-top


def label(run_dir):
  """The line's name: the algorithm with its μ/λ, and the stragglers."""
  saved = results.read_json(run_dir, results.CONFIG_FILE)
  try:
    config = Config.from_json(saved).resolved()
    text = config.algorithm.legend(config)
  except (TypeError, ValueError):  # No config.json, or an unknown algorithm.
    return os.path.basename(os.path.normpath(run_dir))
  if config.straggler_fraction:
    text += (f' ({config.straggler_fraction:.0%} stragglers, '
             f'{config.straggler_policy})')
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
  axes.set_ylabel(metric, fontsize=9)
  if metric in DESCRIPTIONS:
    figure.text(0.01, 0.005, f'{metric}: {DESCRIPTIONS[metric]}', fontsize=6,
                color='gray')
  axes.set_title(title)
  axes.legend()
  figure.tight_layout()
  figure.savefig(out, dpi=120)
  plt.close(figure)
