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
from tff_algos.simulation import results
from tff_algos.simulation.columns import COLUMNS

PROGRAM = 'python -m tff_algos.plot'
DESCRIPTION = ('Plot a metric of run folders (RUN_DIR: a folder python -m '
               'tff_algos wrote, holding metrics.csv) against rounds, one '
               'line per run (runs differing only in the seed: their mean, '
               'with a min-max band), labelled by what differs between '
               'them.')
_FLAGS = (
    cli.Flag('DEFINE_string', 'metric', 'train_loss',
             'The metrics.csv column to plot (train_loss: the global '
             'objective f(w)), any column of the runs\' metrics.csv: '
             + ', '.join(COLUMNS[1:]) + ' and the columns of the runs\' '
             'algorithms and callbacks.'),
    cli.Flag('DEFINE_string', 'x', 'round',
             'The x axis: round, or a column that grows with the rounds, '
             'the same for every seed: epsilon draws a privacy-utility '
             'curve (the metric against the ε spent).'),
    cli.Flag('DEFINE_string', 'out', None,
             'The image to write (.png, .pdf, .svg).'),
    cli.Flag('DEFINE_string', 'title', None,
             'The figure\'s title (default: what the runs share).'),
    cli.Flag('DEFINE_bool', 'allow_mixed_tasks', False,
             'Plot runs of different tasks on one axis.'),
    cli.Flag('DEFINE_bool', 'per_client', False,
             'Instead of a metric against rounds: the clients\' final test '
             'accuracy, an empirical CDF per run (seeds pooled), from each '
             'run\'s client_accuracy.csv.'),
)


def _import_run_modules(run_dirs):
  """Imports the modules the runs were started with (config.json's
  `imports`), so their algorithms' labels and metrics are known; a module
  that cannot be imported leaves the folder's name as the label."""
  for run_dir in run_dirs:
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
      if not results.has_rows(run_dir):
        raise ValueError(f'no rounds in {run_dir}/{results.METRICS_FILE}')
      results.read_json(run_dir, results.CONFIG_FILE)  # Checked here.
    _import_run_modules(run_dirs)
    groups = plot.seed_groups(run_dirs)
    if not holder.allow_mixed_tasks:
      plot.check_one_task(groups)
    if holder.per_client:
      plot.plot_client_accuracy(groups, holder.out, holder.title)
    else:
      metrics = {c for d in run_dirs for c in results.read_rows(d)[0]} - {
          'round'}
      for flag, column in (('metric', holder.metric), ('x', holder.x)):
        if column not in metrics | ({'round'} if flag == 'x' else set()):
          raise ValueError(f'--{flag}={column}: not a column of these '
                           f'runs\' metrics.csv; choose from '
                           f'{", ".join(sorted(metrics))}')
      plot.plot_bands(groups, holder.metric, holder.out, holder.title,
                      description=_description(holder.metric), x=holder.x)
  except (ValueError, OSError, cli.UsageError) as e:
    cli.fail(PROGRAM, e)
  what = 'the clients\' final test accuracy' if holder.per_client else (
      holder.metric)
  print(f'wrote {holder.out} ({what} of {len(run_dirs)} runs)',
        file=sys.stderr)
  return 0


def _description(metric):
  """An algorithm's own metric's description (None for a built-in one)."""
  for name in registry.names():
    if metric in registry.get(name).metrics:
      return registry.get(name).metrics[metric].replace('$', r'\$')
  return None


if __name__ == '__main__':
  sys.exit(main())
