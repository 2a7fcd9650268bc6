"""Plots a metric of runs against rounds (the papers' figures) or against
another column (accuracy against the privacy spent, ε).

Each run folder holds a metrics.csv and a config.json. Runs that differ
only in their seed are one line: their mean, with a band from their
minimum to their maximum. Each line is named by what sets it apart from
the other lines (its algorithm, then the settings that differ), and the
figure is titled with what all of them share (the task first); runs of
different tasks are refused unless asked for. The command line is
`python -m tff_algos.plot`. Imports no TensorFlow.
"""

import os
import textwrap

from tff_algos.simulation import results
from tff_algos.simulation.columns import DESCRIPTIONS
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve
from tff_algos.simulation.declarations import SETTINGS


def _pyplot():
  """matplotlib.pyplot, imported when a plot is drawn (a run's command line
  imports this module; pyplot would cost it 0.3–0.9 s and 57 MB,
  docs/PERFORMANCE.md "Start-up and memory")."""
  import matplotlib

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  return plt


# The columns whose descriptions hold formulas, as mathtext.
MATH_DESCRIPTIONS = {
  'train_loss': r'training loss $f(w) = \Sigma_k\, p_k F_k(w)$, all '
  r'clients',
  'grad_variance': r'$\Sigma_k\, p_k \|\nabla F_k(w) - \nabla f(w)\|^2$ '
  r'(FedProx §5.3.3)',
  'grad_dissimilarity': r'$B(w) = (\Sigma_k\, p_k \|\nabla F_k(w)\|^2 / '
  r'\|\nabla f(w)\|^2)^{1/2}$ (FedProx Def. 3)',
  'update_spread': r'$(1/K)\,\Sigma_k \|u_k - \bar{u}\|^2$, '
  r'$u_k = w_t - w_k$',
}
# Settings that tell runs apart (those a declaration gives a label), in
# the order a label or title names them: the task first, what the plot is
# of, then --help's. The algorithm's own, μ/λ and its extra
# hyper-parameters, are in its legend entry.
_SHOWN = {
  s.record_key: s
  for s in sorted(SETTINGS, key=lambda s: s.name != 'task')
  if s.label
}


class MixedTasksError(ValueError):
  """The runs to plot are of different tasks."""


def _settings(run_dir):
  """The run's resolved settings (config.json), and their flat values
  without the seed."""
  saved = {}
  try:
    saved, _ = results.read_config(run_dir)
    settings = resolve(Config.from_json(saved))
  except (TypeError, ValueError):  # No or a damaged config.json (named by
    return None, dict(saved)  # the folder), or an unknown algorithm.
  values = settings.to_json()
  values.pop('seed', None)
  return settings, values


def _legend(settings, run_dir):
  """The run's algorithm and its own hyper-parameters: its entry's legend,
  else the one its summary recorded (an algorithm of a module not
  imported here), else the folder's name."""
  if settings is not None:
    return settings.entry.legend(settings.algorithm)
  summary = results.read_json(run_dir, results.SUMMARY_FILE) or {}
  return summary.get('legend') or os.path.basename(os.path.normpath(run_dir))


def setting_text(key, value):
  """How a plot names the setting `key` at `value` (its declared label)."""
  try:
    return _SHOWN[key].label.format(value)
  except (KeyError, ValueError, TypeError):  # Not labelled, or not its type.
    return f'{key}={value}'


def describe(groups, seeds='mean'):
  """(title, [label per group]) of `groups` ([run folders] each): a label
  names the group's algorithm and the settings in which the groups
  differ, and how its seeds are combined (`seeds`: 'mean', or 'pooled':
  the caller says it);
  the title, the settings they all share."""
  described = [_settings(dirs[0]) for dirs in groups]
  keys = list(_SHOWN)
  if not any(v.get('straggler_fraction') for _, v in described):
    keys.remove('straggler_policy')  # No stragglers: no policy to tell.
  differ = [k for k in keys if len({repr(v.get(k)) for _, v in described}) > 1]
  labels = []
  for (config, values), dirs in zip(described, groups):
    parts = [
      setting_text(k, values.get(k))
      for k in differ
      if values.get(k) is not None
    ]
    label = ', '.join([_legend(config, dirs[0])] + parts)
    labels.append(
      f'{label} (mean of {len(dirs)} seeds, band min–max)'
      if len(dirs) > 1 and seeds == 'mean'
      else label
    )
  if len(set(labels)) < len(labels):  # Alike but their code: say which.
    labels = [
      f'{label} [code {results.code_id(d[0]) or "unrecorded"}]'
      for label, d in zip(labels, groups)
    ]
  if len(set(labels)) < len(labels):  # Still alike: name folders.
    labels = [
      f'{label} [{os.path.basename(os.path.normpath(d[0]))}]'
      for label, d in zip(labels, groups)
    ]
  shared = described[0][1] if described else {}
  title = ', '.join(
    setting_text(k, shared[k])
    for k in keys
    if k not in differ
    and _SHOWN[k].in_title
    and shared.get(k) not in (None, _SHOWN[k].plain)
  )
  return title, labels


def seed_groups(run_dirs):
  """[run folders] per setting: runs whose settings differ only in the seed
  and whose code, computation and data are the same (`results.code_id`)
  form one group (in the order first seen)."""
  groups = {}
  for run_dir in run_dirs:
    saved, _ = results.read_config(run_dir)
    saved.pop('seed', None)
    key = (
      (repr(sorted(saved.items())), results.code_id(run_dir))
      if saved
      else run_dir
    )
    groups.setdefault(key, []).append(run_dir)
  return list(groups.values())


def check_one_task(groups):
  """MixedTasksError naming the tasks when `groups` hold several."""
  found = sorted(
    {str(_settings(dirs[0])[1].get('task', '?')) for dirs in groups}
  )
  if len(found) > 1:
    raise MixedTasksError(
      f'the runs are of different tasks ({", ".join(found)}), whose '
      'curves do not share an axis: plot each task on its own, or pass '
      '--allow_mixed_tasks'
    )


# A figure's size in inches (matplotlib's unit), unless the caller's.
FIGSIZE = (5.5, 4)


def _save(figure, axes, out, footnote=None):
  """Writes `figure` to `out` (`_lay_out`)."""
  _lay_out(figure, axes, footnote)
  _write(figure, out)


def _lay_out(figure, axes, footnote=None):
  """The legend below the axes (long labels never cover the curves or the
  axis), and `footnote` over the axes, under the title."""
  axes.legend(
    fontsize=7,
    loc='upper center',
    bbox_to_anchor=(0.5, -0.16),
    ncol=1,
    frameon=False,
  )
  if footnote:
    note = axes.annotate(
      footnote,
      xy=(0, 1),
      xycoords='axes fraction',
      xytext=(0, 4),
      textcoords='offset points',
      fontsize=7,
      color='dimgray',
      va='bottom',
    )
    _title_above(figure, axes, note)


# Points between the footnote over the axes and the title's lowest line.
_TITLE_GAP = 4


def _title_above(figure, axes, note):
  """Puts the title's lowest line (bottom-aligned: descenders included)
  `_TITLE_GAP` points above `note`, as tall as its text makes it: a
  formula's sums and subscripts stand taller than text, and a fixed pad
  let them reach into the title."""
  renderer = figure.canvas.get_renderer()
  above_axes = (
    note.get_window_extent(renderer).y1 - axes.get_window_extent(renderer).y1
  )
  title = axes.title
  axes.set_title(
    title.get_text(),
    fontsize=title.get_fontsize(),
    va='bottom',
    pad=above_axes * 72 / figure.dpi + _TITLE_GAP,
  )


def _write(figure, out):
  """`figure` into the file `out`, whole (nothing clipped at the edges)."""
  figure.savefig(out, dpi=120, bbox_inches='tight')
  _pyplot().close(figure)


def plot_client_accuracy(groups, out, title=None, labels=None, figsize=FIGSIZE):
  """The clients' final test accuracy, one empirical CDF per group of
  `groups` (its runs' clients pooled: seeds together), from each run's
  client_accuracy.csv, into the file `out`: what share of the clients
  the model serves at most so well. ValueError for a run without that
  file (a model whose accuracy is not per client)."""
  if labels is None or title is None:
    shared, described = describe(groups, seeds='pooled')
    labels, title = labels or described, shared if title is None else title
  figure, axes = _pyplot().subplots(figsize=figsize)
  for label_text, run_dirs in zip(labels, groups):
    accuracies, clients = [], set()
    for run_dir in run_dirs:
      if not os.path.exists(
        os.path.join(run_dir, results.CLIENT_ACCURACY_FILE)
      ):
        raise ValueError(
          f'{run_dir} has no {results.CLIENT_ACCURACY_FILE} '
          '(runs of models with a per-client accuracy write '
          'it when they finish)'
        )
      run_accuracies = results.read_client_accuracy(run_dir)
      accuracies += run_accuracies
      clients.add(len(run_accuracies))
    accuracies.sort()
    shares = [(i + 1) / len(accuracies) for i in range(len(accuracies))]
    if len(clients) == 1:  # Seeds of one population: say it once.
      counted = f'{min(clients):,} clients' + (
        f' × {len(run_dirs)} seeds, pooled' if len(run_dirs) > 1 else ''
      )
    else:
      counted = f'{len(accuracies):,} client results of {len(run_dirs)} runs'
    axes.step(
      accuracies, shares, where='post', label=f'{label_text} ({counted})'
    )
  axes.set_xlabel('final test accuracy of a client')
  axes.set_ylabel('share of clients with at most this accuracy', fontsize=9)
  axes.set_title(textwrap.fill(title, 60), fontsize=9)
  _save(figure, axes, out)


def _positions(run_dirs, rounds, x):
  """The x positions of `rounds`: the rounds, or the `x` column's values
  there, which the group's runs must share (ε is the same for every seed);
  ValueError otherwise."""
  if x == 'round':
    return rounds
  shared = None
  for run_dir in run_dirs:
    column = dict(zip(*results.series(results.read_rows(run_dir), x)))
    if not set(rounds) <= set(column):
      raise ValueError(
        f'{run_dir} has no {x!r} value at some of its '
        'rounds: it cannot be the x axis'
      )
    values = [column[r] for r in rounds]
    if shared is not None and values != shared:
      raise ValueError(
        f'the seeds of {run_dir} have different {x!r} '
        'values by round: it cannot be their common x axis'
      )
    shared = values
  return shared


def plot_bands(
  groups,
  metric,
  out,
  title=None,
  target=None,
  description=None,
  labels=None,
  x='round',
  figsize=FIGSIZE,
):
  """Draws `metric` against rounds (or the column `x`, e.g. ε) for each
  group of `groups` ([run folders] each, see `seed_groups`): one run as a
  line; several (seeds) as their mean, with a band from their minimum to
  their maximum, over the rounds all of them measured. Lines are labelled
  and the figure titled by `describe` (`labels`, `title` replace them;
  title '' for none); `description` (default: the column's own) goes
  under the axes. Into the file `out` (a dashed line at `target`, if
  given). ValueError if a run has no `metric` values."""
  if labels is None or title is None:
    shared, described = describe(groups)
    labels, title = labels or described, shared if title is None else title
  figure, axes = _pyplot().subplots(figsize=figsize)
  for label_text, run_dirs in zip(labels, groups):
    curves = [
      dict(zip(*results.series(results.read_rows(d), metric))) for d in run_dirs
    ]
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    if not rounds:
      raise ValueError(f'{run_dirs[0]} has no {metric!r} values')
    positions = _positions(run_dirs, rounds, x)
    values = [[c[r] for c in curves] for r in rounds]
    mean = [sum(v) / len(v) for v in values]
    (line,) = axes.plot(
      positions, mean, label=label_text, marker=None if x == 'round' else '.'
    )
    if len(run_dirs) > 1:
      axes.fill_between(
        positions,
        [min(v) for v in values],
        [max(v) for v in values],
        color=line.get_color(),
        alpha=0.2,
        linewidth=0,
      )
  if target is not None:
    axes.axhline(
      target,
      color='gray',
      linestyle='--',
      linewidth=1,
      label=f'target {target:g}',
    )
  axes.set_xlabel('# rounds' if x == 'round' else _x_label(groups, x))
  axes.set_ylabel(metric, fontsize=9)
  # Wrapped to the axes' width (about 60 characters at the default size).
  axes.set_title(
    textwrap.fill(title, int(60 * figsize[0] / FIGSIZE[0])), fontsize=9, pad=14
  )
  description = description or MATH_DESCRIPTIONS.get(
    metric, DESCRIPTIONS.get(metric, '').replace('$', r'\$')
  )
  _save(
    figure,
    axes,
    out,
    textwrap.shorten(f'{metric}: {description}', 110) if description else None,
  )


def _x_label(groups, x):
  """The x axis's name: ε columns name their δ (and the runs' adjacency)."""
  if 'epsilon' not in x:
    return x
  shared = {
    (_settings(d[0])[1].get('dp_delta'), _settings(d[0])[1].get('dp_adjacency'))
    for d in groups
  }
  if len(shared) != 1:
    return f"{x} (at each line's δ)"
  ((delta, adjacency),) = shared
  what = 'ε of the deployment' if x == 'deployment_epsilon' else 'ε'
  return f'{what} at δ={delta:.2g} ({adjacency})' if delta is not None else x
