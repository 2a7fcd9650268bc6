"""Plots a metric of one or more runs against rounds (the papers' figures).

  python -m tff_algos.plot RUN_DIR... --metric=train_loss --out=fig.png
  python -m tff_algos.plot RUN_DIR... --metric=test_accuracy --x=epsilon \
      --out=privacy_utility.png

One line per run folder, named by what sets it apart from the others
(algorithm and settings), under a title naming what they share; runs that
differ only in their seed are one line, their mean, with a band from their
minimum to their maximum (runs of other code are never averaged with them).
Runs of different tasks are refused unless --allow_mixed_tasks. Modules a
run was started with (--import) are imported for its algorithm's name and
metrics. Imports no TensorFlow.
"""

import os
import sys

from tff_algos import cli
from tff_algos.algorithms import registry
from tff_algos.analysis import plot
from tff_algos.simulation import columns
from tff_algos.simulation import results
from tff_algos.simulation.columns import COLUMNS

PROGRAM = 'python -m tff_algos.plot'
DESCRIPTION = (
  'Plot a metric of run folders (RUN_DIR: a folder python -m '
  'tff_algos wrote, holding metrics.csv) against rounds, one '
  'line per run (runs differing only in the seed: their mean, '
  'with a min-max band), labelled by what differs between '
  'them.'
)
_FLAGS = (
  cli.Flag(
    'DEFINE_string',
    'metric',
    None,
    "The metrics.csv column to plot, any column of the runs' "
    'metrics.csv: ' + ', '.join(COLUMNS[1:]) + ' and the columns '
    "of the runs' algorithms and callbacks (default: their "
    'training loss, train_loss: the global objective f(w), or '
    'train_loss_sampled for runs with --eval_clients).',
  ),
  cli.Flag(
    'DEFINE_string',
    'x',
    'round',
    'The x axis: round, or a column that grows with the rounds, '
    'the same for every seed: epsilon draws a privacy-utility '
    'curve (the metric against the ε spent).',
  ),
  cli.Flag(
    'DEFINE_string', 'out', None, 'The image to write (.png, .pdf, .svg).'
  ),
  cli.Flag(
    'DEFINE_string',
    'title',
    None,
    "The figure's title (default: what the runs share).",
  ),
  cli.Flag(
    'DEFINE_multi_string',
    'label',
    [],
    "A line's legend entry, once per line in the order the lines "
    'appear (default: what sets each line apart).',
  ),
  cli.Flag(
    'DEFINE_string',
    'figsize',
    '5.5,4',
    "The figure's width and height in inches, WIDTH,HEIGHT.",
  ),
  cli.Flag(
    'DEFINE_bool',
    'allow_mixed_tasks',
    False,
    'Plot runs of different tasks on one axis.',
  ),
  cli.Flag(
    'DEFINE_bool',
    'per_client',
    False,
    "Instead of a metric against rounds: the clients' final test "
    'accuracy, an empirical CDF per run (seeds pooled), from each '
    "run's client_accuracy.csv.",
  ),
)


def _import_run_modules(run_dirs):
  """Imports the modules the runs were started with (config.json's
  `imports`), so their algorithms' labels and metrics are known, for the
  runs whose summary does not record them (unfinished ones); a module
  that cannot be imported leaves the folder's name as the label."""
  for run_dir in run_dirs:
    if 'legend' in (results.read_json(run_dir, results.SUMMARY_FILE) or {}):
      continue
    saved = results.read_json(run_dir, results.CONFIG_FILE) or {}
    try:
      cli.import_modules(saved.get('imports') or ())
    except cli.UsageError as e:
      print(f'{PROGRAM}: note: {run_dir}: {e}', file=sys.stderr)


def _arguments(argv):
  """(flags, run folders) of the command line; UsageError for bad ones."""
  holder = cli.flag_values((), _FLAGS)
  args, _ = cli.expand_flagfiles(argv)
  run_dirs = cli.parse(holder, args, positional=True)
  if not run_dirs:
    raise cli.UsageError('give the run folders to plot (RUN_DIR ...)')
  if not holder.out:
    raise cli.UsageError('--out is required: the image to write')
  return holder, run_dirs


def _figsize(text):
  """(width, height) of --figsize; UsageError unless two positive numbers."""
  try:
    width, height = (float(v) for v in text.split(','))
  except ValueError:
    width = height = 0.0
  if not (0 < width <= 100 and 0 < height <= 100):
    raise cli.UsageError(
      f'--figsize={text}: expected WIDTH,HEIGHT in inches '
      '(numbers in (0, 100]), e.g. 8,5'
    )
  return width, height


def _labels(holder, groups):
  """--label's entries, one per line; UsageError for another count."""
  if holder.label and len(holder.label) != len(groups):
    raise cli.UsageError(
      f'{len(holder.label)} --label for {len(groups)} lines (runs that '
      'differ only in their seed are one line): give one per line'
    )
  return holder.label or None


def main(argv=None):
  """The command line `argv` (the arguments after the program)."""
  argv = sys.argv[1:] if argv is None else list(argv)
  if cli.wants_help(['', *argv]):
    print(cli.usage(PROGRAM, DESCRIPTION, (), _FLAGS, ' RUN_DIR...'))
    return 0
  try:
    holder, run_dirs = _arguments(argv)
    for run_dir in run_dirs:
      if not os.path.isdir(run_dir):
        raise ValueError(f'no such run folder: {run_dir}')
      if not os.path.exists(os.path.join(run_dir, results.METRICS_FILE)):
        raise ValueError(_not_a_run_folder(run_dir))
      if not results.has_rows(run_dir):
        raise ValueError(f'no rounds in {run_dir}/{results.METRICS_FILE}')
      results.read_json(run_dir, results.CONFIG_FILE)  # Checked here.
    _import_run_modules(run_dirs)
    recorded = _recorded_metrics(run_dirs)
    groups = plot.seed_groups(run_dirs)
    if not holder.allow_mixed_tasks:
      plot.check_one_task(groups)
    shape = dict(
      labels=_labels(holder, groups), figsize=_figsize(holder.figsize)
    )
    if holder.per_client:
      plot.plot_client_accuracy(groups, holder.out, holder.title, **shape)
      what = "the clients' final test accuracy"
    else:
      metrics = {c for d in run_dirs for c in results.read_rows(d)[0]} - {
        'round'
      }
      metric = holder.metric or columns.training_loss_column(metrics)
      for flag, column in (('metric', metric), ('x', holder.x)):
        if column not in metrics | ({'round'} if flag == 'x' else set()):
          raise ValueError(
            f'--{flag}={column}: not a column of these '
            f"runs' metrics.csv; choose from "
            f'{", ".join(sorted(metrics))}'
          )
      plot.plot_bands(
        groups,
        metric,
        holder.out,
        holder.title,
        description=_description(metric, recorded),
        x=holder.x,
        **shape,
      )
      what = metric
  except (ValueError, OSError, cli.UsageError) as e:
    cli.fail(PROGRAM, e)
  print(f'wrote {holder.out} ({what} of {len(run_dirs)} runs)', file=sys.stderr)
  return 0


def _not_a_run_folder(folder):
  """What to pass instead of `folder`, which holds no metrics.csv: the run
  folders in it (a sweep's), and the plots a sweep drew there."""
  names = sorted(os.listdir(folder))
  runs = [
    os.path.join(folder, name)
    for name in names
    if os.path.isfile(os.path.join(folder, name, results.METRICS_FILE))
  ]
  if not runs:
    return (
      f'{folder} is not a run folder (it holds no {results.METRICS_FILE}): '
      'pass the --output_dir of a run'
    )
  shown = ' '.join(runs[:2]) + (' ...' if len(runs) > 2 else '')
  kind = "a sweep's" if 'summary.csv' in names else 'a folder of runs'
  message = (
    f'{folder} is {kind} folder, not a run folder: pass the run folders '
    f'in it ({shown}; all of them: {os.path.join(folder, "*", "")})'
  )
  plots = [name for name in names if name.endswith('.png')]
  if plots:
    message += (
      f", or open the sweep's own plots there ({', '.join(plots[:3])}"
      + (', ...' if len(plots) > 3 else '')
      + ')'
    )
  return message


def _recorded_metrics(run_dirs):
  """The algorithms' own columns and their descriptions, as the runs'
  summaries recorded them."""
  recorded = {}
  for run_dir in run_dirs:
    summary = results.read_json(run_dir, results.SUMMARY_FILE) or {}
    recorded.update(summary.get('algorithm_metrics') or {})
  return recorded


def _description(metric, recorded):
  """An algorithm's own column's description (None for a built-in one):
  a registered algorithm's, or one the runs recorded."""
  for name in registry.names():
    entry = registry.get(name)
    own = {**entry.columns, **entry.metrics}
    if metric in own:
      return own[metric].replace('$', r'\$')
  if metric in recorded:
    return str(recorded[metric]).replace('$', r'\$')
  return None


if __name__ == '__main__':
  sys.exit(cli.exit_on_ctrl_c(PROGRAM, main))
