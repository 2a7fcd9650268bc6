"""Plots a metric of runs against rounds (the papers' figures).

Each run folder holds a metrics.csv (and config.json, which names the line).
The command line is `python -m tff_algos.plot`.
"""

import os

from tff_algos.analysis import results
from tff_algos.simulation.columns import DESCRIPTIONS
from tff_algos.simulation.config import Config


def _pyplot():
  """matplotlib.pyplot, imported when a plot is drawn (issue 22: a run's
  command line imports this module; pyplot costs it 0.3–0.9 s and 57 MB)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


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


def seed_groups(run_dirs):
  """(label, [run folders]) per setting: runs whose config.json differ only
  in the seed form one group (in the order first seen)."""
  groups = {}
  for run_dir in run_dirs:
    saved = dict(results.read_json(run_dir, results.CONFIG_FILE) or {})
    saved.pop('seed', None)
    key = repr(sorted(saved.items())) if saved else run_dir
    groups.setdefault(key, []).append(run_dir)
  return [(label(dirs[0]), dirs) for dirs in groups.values()]


def plot_bands(groups, metric, out, title='', target=None):
  """Draws `metric` against rounds for each (label, [run folders]) of
  `groups`: one run as a line; several (seeds) as their mean, with a band
  from their minimum to their maximum, over the rounds all of them
  measured. Into the file `out` (a dashed line at `target`, if given)."""
  figure, axes = _pyplot().subplots(figsize=(5, 3.5))
  for label_text, run_dirs in groups:
    curves = [dict(zip(*results.series(results.read_rows(d), metric)))
              for d in run_dirs]
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    if not rounds:
      raise ValueError(f'{run_dirs[0]} has no {metric!r} values')
    values = [[c[r] for c in curves] for r in rounds]
    mean = [sum(v) / len(v) for v in values]
    if len(run_dirs) > 1:
      label_text = f'{label_text} (mean of {len(run_dirs)})'
    line, = axes.plot(rounds, mean, label=label_text)
    if len(run_dirs) > 1:
      axes.fill_between(rounds, [min(v) for v in values],
                        [max(v) for v in values], color=line.get_color(),
                        alpha=0.2, linewidth=0)
  _finish(figure, axes, metric, out, title, target)


def _finish(figure, axes, metric, out, title, target):
  """The target line, axis labels, the metric's description, the file."""
  if target is not None:
    axes.axhline(target, color='gray', linestyle='--', linewidth=1,
                 label=f'target {target:g}')
  axes.set_xlabel('# rounds')
  axes.set_ylabel(metric, fontsize=9)
  if metric in DESCRIPTIONS:
    figure.text(0.01, 0.005, f'{metric}: {DESCRIPTIONS[metric]}', fontsize=6,
                color='gray')
  axes.set_title(title)
  axes.legend(fontsize=8)
  figure.tight_layout(rect=(0, 0.03, 1, 1))
  figure.savefig(out, dpi=120)
  _pyplot().close(figure)
