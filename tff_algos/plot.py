"""Plots a metric of one or more runs against rounds (the papers' figures).

  python -m tff_algos.plot RUN_DIR... --metric=train_loss --out=fig.png

One line per run folder (named by its algorithm and settings), rounds on x;
runs that differ only in their seed are one line, their mean, with a band
from their minimum to their maximum. Imports no TensorFlow.
"""

import argparse
import os
import sys

from tff_algos.analysis import plot
from tff_algos.analysis import results
from tff_algos.simulation.columns import COLUMNS


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog='python -m tff_algos.plot',
      description='Plot a metric of run folders against rounds, one line per '
                  'run (runs differing only in the seed: their mean, with a '
                  'min-max band).')
  parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR',
                      help='a run folder (holding metrics.csv), as '
                           'run_experiment.py --output_dir wrote it')
  parser.add_argument('--metric', default='train_loss',
                      choices=COLUMNS[1:],
                      help='the metrics.csv column to plot (default: '
                           'train_loss, the global objective f(w))')
  parser.add_argument('--out', required=True, metavar='FILE',
                      help='the image to write (.png, .pdf, .svg)')
  parser.add_argument('--title', default='', help='the figure\'s title')
  args = parser.parse_args(argv)
  for run_dir in args.run_dirs:
    if not os.path.isdir(run_dir):
      parser.exit(2, f'{parser.prog}: error: no such run folder: {run_dir}\n')
    if not results.has_rows(run_dir):
      parser.exit(2, f'{parser.prog}: error: no rounds in '
                  f'{os.path.join(run_dir, results.METRICS_FILE)}\n')
  try:
    plot.plot_bands(plot.seed_groups(args.run_dirs), args.metric, args.out,
                    args.title)
  except (ValueError, OSError) as e:
    parser.exit(2, f'{parser.prog}: error: {e}\n')
  print(f'wrote {args.out} ({args.metric} of {len(args.run_dirs)} runs)',
        file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
