"""A config that expands to several runs: run them all, then table and plot.

A flag file becomes a sweep with two repeatable flags of run_experiment.py:
  --variant='NAME: --flag=value ...'  one run per variant (an algorithm, an
                                      (E, B) setting, ...); the first is the
                                      baseline of the speedup column;
  --sweep=FLAG=V1,V2,...              every variant for each value (several
                                      --sweep flags: their cartesian product).
Each run is `run_experiment.py` in its own process with the common flags,
then the variant's, then the swept values, writing OUTPUT_DIR/RUN_NAME/.
Re-running the same command skips finished runs and resumes unfinished
ones. At the end OUTPUT_DIR holds summary.md and summary.csv (FedAvg-style
rounds to target and speedup, FedISGD-style last-half accuracy) and one
figure per metric and swept setting.
"""

import csv
import dataclasses
import io
import itertools
import os
import shlex
import signal
import subprocess
import sys

from tff_algos.analysis import plot
from tff_algos.analysis import results
from tff_algos.runtime import processes

METRICS_PLOTTED = ('train_loss', 'test_accuracy')


@dataclasses.dataclass(frozen=True)
class Run:
  name: str              # folder under the sweep's output_dir
  variant: str
  swept: tuple           # ((flag, value), ...) of the --sweep flags
  args: tuple            # flags after the common ones


def parse_variant(text):
  """'NAME: --a=1 --b=2' -> ('NAME', ['--a=1', '--b=2'])."""
  name, sep, flags = text.partition(':')
  name = name.strip()
  if not sep or not name or '/' in name or not all(
      a.startswith('--') for a in shlex.split(flags)):
    raise ValueError(f'--variant={text!r}: expected "NAME: --flag=value ..."')
  return name, shlex.split(flags)


def parse_sweep(text):
  """'mu=0,0.1,1' -> ('mu', ['0', '0.1', '1'])."""
  flag, sep, values = text.partition('=')
  values = [v.strip() for v in values.split(',') if v.strip()]
  if not sep or not flag.strip() or not values:
    raise ValueError(f'--sweep={text!r}: expected "FLAG=VALUE1,VALUE2,..."')
  return flag.strip().lstrip('-'), values


def expand(variants, sweeps, only=()):
  """The runs of a sweep: variants × the cartesian product of the sweeps.

  A later variant of the same name, or a later sweep over the same flag,
  replaces the earlier one (command-line flags override the flag file).
  `only`: keep just these variants (by name).
  """
  variants = dict(parse_variant(v) for v in variants) or {'run': []}
  unknown = set(only) - set(variants)
  if unknown:
    raise ValueError(f'--only: no variant {", ".join(sorted(unknown))}; the '
                     f'variants are {", ".join(variants)}')
  variants = [(name, args) for name, args in variants.items()
              if not only or name in only]
  sweeps = list(dict(parse_sweep(s) for s in sweeps).items())
  runs = []
  for values in itertools.product(*[vs for _, vs in sweeps]):
    swept = tuple(zip([flag for flag, _ in sweeps], values))
    for name, args in variants:
      folder = '__'.join([name] + [f'{flag}-{value}' for flag, value in swept])
      runs.append(Run(folder, name, swept, tuple(args) + tuple(
          f'--{flag}={value}' for flag, value in swept)))
  return runs


class Interrupted(Exception):
  """The sweep was interrupted (Ctrl-C, SIGTERM) during a run."""

  def __init__(self, message, signum):
    super().__init__(message)
    self.signum = signum


def run_all(runs, common_args, output_dir, script):
  """Runs each run in its own process; returns {name: exit code}.

  A run dies with the sweep: SIGTERM reaches it when this process ends,
  however it ends (even by SIGKILL), and Ctrl-C reaches the terminal's
  whole process group. Ctrl-C or SIGTERM here stops the current run, lets
  it finish writing, and raises Interrupted.
  """
  codes = {}

  def on_terminate(signum, frame):
    del frame
    raise Interrupted('', signum)

  previous = signal.signal(signal.SIGTERM, on_terminate)
  try:
    for i, run in enumerate(runs, 1):
      print(f'[{i}/{len(runs)}] {run.name}', file=sys.stderr, flush=True)
      command = [sys.executable, script, *common_args, *run.args,
                 f'--output_dir={os.path.join(output_dir, run.name)}']
      process = subprocess.Popen(
          command, stdout=subprocess.DEVNULL,
          preexec_fn=processes.die_with_parent(signal.SIGTERM))
      try:
        codes[run.name] = process.wait()
      except (KeyboardInterrupt, Interrupted) as e:
        signum = getattr(e, 'signum', signal.SIGINT)
        process.send_signal(signal.SIGTERM if signum == signal.SIGTERM
                            else signal.SIGINT)
        process.wait()
        name = 'interrupted' if signum == signal.SIGINT else 'terminated'
        raise Interrupted(f'sweep {name} during run {i} of {len(runs)} '
                          f'({run.name})', signum) from None
      if codes[run.name] == 2:  # A usage error: later runs would fail too.
        break
  finally:
    signal.signal(signal.SIGTERM, previous)
  return codes


def table(runs, output_dir, target_accuracy=None):
  """One summary row per run; speedup over the same-sweep baseline run."""
  rows, baseline = [], {}
  for run in runs:
    run_dir = os.path.join(output_dir, run.name)
    row = dict(run=run.name, variant=run.variant, **dict(run.swept))
    if results.has_rows(run_dir):
      row.update(results.summarize(run_dir, target_accuracy))
    baseline.setdefault(run.swept, row.get('rounds_to_target'))
    if target_accuracy is not None:
      base, rounds = baseline[run.swept], row.get('rounds_to_target')
      row['speedup'] = base / rounds if base and rounds else None
    rows.append(row)
  return rows


def _cell(value):
  if value is None:
    return '—'
  if isinstance(value, float):
    return f'{value:.4g}'
  return str(value)


def write_summary(rows, output_dir, target_accuracy=None):
  """output_dir/summary.md and summary.csv, each written atomically, from
  the rows of runs that have results; the lines of summary.md.

  Writes nothing and returns None when an existing summary.csv has more
  rows: a summary never shrinks because a re-run (with other flags, or
  failing) has fewer results.
  """
  rows = [row for row in rows if 'rounds' in row]
  existing = os.path.join(output_dir, 'summary.csv')
  if os.path.exists(existing):
    with open(existing, newline='') as f:
      if len(list(csv.DictReader(f))) > len(rows):
        return None
  columns = []
  for row in rows:
    columns += [k for k in row if k not in columns]
  text = io.StringIO()
  writer = csv.DictWriter(text, columns)
  writer.writeheader()
  writer.writerows(rows)
  header = ' | '.join(columns)
  lines = [f'| {header} |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(_cell(row.get(c)) for c in columns) + ' |'
            for row in rows]
  if target_accuracy is not None:
    lines.append(f'\nrounds_to_target: first round whose best-so-far test '
                 f'accuracy reaches {target_accuracy:g} (linear interpolation '
                 'between evaluated rounds; — = not reached). speedup: over '
                 'the first variant with the same swept values.')
  for name, content in (('summary.csv', text.getvalue()),
                        ('summary.md', '\n'.join(lines) + '\n')):
    results.write_atomically(os.path.join(output_dir, name), content)
  return lines


def plot_runs(runs, output_dir, target_accuracy=None):
  """One figure per metric and swept setting: a line per variant."""
  by_swept = {}
  for run in runs:
    if results.has_rows(os.path.join(output_dir, run.name)):
      by_swept.setdefault(run.swept, []).append(run)
  for swept, group in by_swept.items():
    suffix = ''.join(f'__{flag}-{value}' for flag, value in swept)
    for metric in METRICS_PLOTTED:
      plot.plot_runs(
          [os.path.join(output_dir, run.name) for run in group],
          metric, os.path.join(output_dir, f'{metric}{suffix}.png'),
          title=', '.join(f'{flag}={value}' for flag, value in swept),
          labels=[run.variant for run in group],
          target=target_accuracy if metric == 'test_accuracy' else None)
