"""Plots a metric of one or more runs against rounds (the papers' figures).

  python -m tff_algos.plot RUN_DIR... --metric=train_loss --out=fig.png

One line per run folder, named by what sets it apart from the others
(algorithm and settings), under a title naming what they share; runs that
differ only in their seed are one line, their mean, with a band from their
minimum to their maximum. Runs of different tasks are refused unless
--allow_mixed_tasks. Modules a run was started with (--import) are
imported for its algorithm's name and metrics. Imports no TensorFlow.
"""

import os
import sys

from tff_algos import cli
from tff_algos.algorithms import registry
from tff_algos.analysis import plot
from tff_algos.simulation import results
from tff_algos.simulation.columns import COLUMNS

PROGRAM = 'python -m tff_algos.plot'


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


def main(argv=None):
  parser = cli.ArgumentParser(
      prog=PROGRAM,
      description='Plot a metric of run folders against rounds, one line per '
                  'run (runs differing only in the seed: their mean, with a '
                  'min-max band), labelled by what differs between them.')
  parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR',
                      help='a run folder (holding metrics.csv), as '
                           'python -m tff_algos --output_dir wrote it')
  parser.add_argument('--metric', default='train_loss',
                      help='the metrics.csv column to plot (default: '
                           'train_loss, the global objective f(w)): '
                           + ', '.join(COLUMNS[1:]) +
                           ', and the metrics of the runs\' algorithms')
  parser.add_argument('--out', required=True, metavar='FILE',
                      help='the image to write (.png, .pdf, .svg)')
  parser.add_argument('--title', default=None,
                      help='the figure\'s title (default: what the runs '
                           'share)')
  parser.add_argument('--allow_mixed_tasks', action='store_true',
                      help='plot runs of different tasks on one axis')
  args = parser.parse_args(argv)
  try:
    for run_dir in args.run_dirs:
      if not os.path.isdir(run_dir):
        raise ValueError(f'no such run folder: {run_dir}')
      if not results.has_rows(run_dir):
        raise ValueError(f'no rounds in {run_dir}/{results.METRICS_FILE}')
      results.read_json(run_dir, results.CONFIG_FILE)  # Checked here.
    _import_run_modules(args.run_dirs)
    metrics = set(COLUMNS[1:]) | {m for name in registry.names()
                                  for m in registry.get(name).metrics}
    if args.metric not in metrics:
      raise ValueError(f'--metric={args.metric}: not a metrics.csv column; '
                       f'choose from {", ".join(sorted(metrics))}')
    groups = plot.seed_groups(args.run_dirs)
    if not args.allow_mixed_tasks:
      plot.check_one_task(groups)
    plot.plot_bands(groups, args.metric, args.out, args.title,
                    description=_description(args.metric))
  except (ValueError, OSError) as e:
    parser.error(str(e))
  print(f'wrote {args.out} ({args.metric} of {len(args.run_dirs)} runs)',
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
