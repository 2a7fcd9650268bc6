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
rounds to target and speedup, FedISGD-style last-half accuracy, the
seconds a round took, from each run's summary.json; over
several --seed values also mean ± std per setting, summary_seeds.csv; over
several client_lr values the best η of each row marked) and one figure per
metric and swept setting (several seeds: mean and min-max band).
"""

import csv
import dataclasses
import itertools
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

from tff_algos.analysis import plot
from tff_algos.runtime import processes
from tff_algos.simulation import columns
from tff_algos.simulation import results

# The summary's columns: what each one holds (written under summary.md).
SUMMARY_COLUMNS = {
  'rounds': 'rounds run',
  'finished': 'the run finished (summary.json written)',
  'final_train_loss': 'training loss f(w) after the last round',
  'final_train_loss_sampled': 'training loss over the fixed sample of '
  'clients (--eval_clients) after the last '
  'round',
  'final_test_accuracy': 'test accuracy after the last round',
  'best_test_accuracy': 'best test accuracy of any evaluated round',
  'last_half_test_accuracy': 'mean test accuracy over the evaluated '
  'rounds T/2 < t <= T (FedISGD Tables 3-4)',
  'updates_per_round': "FedAvg's u = E·n/(K·B): local updates per client "
  'per round (§3)',
  'target_accuracy': 'the --target_accuracy',
  'rounds_to_target': 'first round whose best-so-far test accuracy '
  'reaches the target, interpolated between evaluated '
  'rounds (FedAvg §3; — = not reached)',
  'updates_to_target': "a pooled run's minibatch updates to the "
  'target (rounds × updates per round; each a round '
  'of communication if federated: FedAvg Table 3)',
  'final_epsilon': "a DP run's ε after the last round, at its δ (the "
  "trained model's)",
  'final_deployment_epsilon': 'with a noise cohort, the ε of the '
  'deployment it stands for (not the trained '
  "model's)",
  'final_client_test_accuracy_p10': "10th percentile of the clients' "
  'own test accuracy after the last '
  'round (unweighted)',
  'final_client_test_accuracy_p50': 'their median',
  'final_client_test_accuracy_min': "the worst client's",
  'final_client_test_accuracy_std': 'the spread (standard deviation) of '
  "the clients' own test accuracy",
  'speedup': 'rounds to target of the first variant with the same swept '
  'values / this one',
  'seconds_per_round': "the median seconds a round took (summary.json's "
  'median_seconds_per_round: from its training to its checkpoint, '
  'evaluation included, over the rounds of the process that finished '
  'the run; — for an unfinished run)',
  'code': "the run's code, computation and data (config.json's "
  'provenance), by a short id: runs of other ids are never '
  'averaged',
}
# Compared across seeds (mean ± std); rounds to target over those that
# reached it.
SEED_METRICS = (
  'final_test_accuracy',
  'best_test_accuracy',
  'last_half_test_accuracy',
  'final_train_loss',
  'final_train_loss_sampled',
  'rounds_to_target',
  'final_epsilon',
  'final_deployment_epsilon',
  'final_client_test_accuracy_p10',
  'final_client_test_accuracy_p50',
  'final_client_test_accuracy_min',
  'final_client_test_accuracy_std',
  'seconds_per_round',
)
# Plotted per swept combination: the training loss (train_loss, or
# train_loss_sampled for runs with --eval_clients) and this.
METRICS_PLOTTED = ('test_accuracy',)


@dataclasses.dataclass(frozen=True)
class Run:
  name: str  # folder under the sweep's output_dir
  variant: str
  swept: tuple  # ((flag, value), ...) of the --sweep flags
  args: tuple  # flags after the common ones


def parse_variant(text):
  """'NAME: --a=1 --b=2' -> ('NAME', ['--a=1', '--b=2'])."""
  name, sep, flags = text.partition(':')
  name = name.strip()
  if (
    not sep
    or not re.fullmatch(r'[\w.+=-]+', name)
    or not all(a.startswith('--') for a in shlex.split(flags))
  ):
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
    raise ValueError(
      f'--only: no variant {", ".join(sorted(unknown))}; the '
      f'variants are {", ".join(variants)}'
    )
  variants = [
    (name, args) for name, args in variants.items() if not only or name in only
  ]
  sweeps = list(dict(parse_sweep(s) for s in sweeps).items())
  runs = []
  for values in itertools.product(*[vs for _, vs in sweeps]):
    swept = tuple(zip([flag for flag, _ in sweeps], values))
    for name, args in variants:
      folder = '__'.join([name] + [f'{flag}-{value}' for flag, value in swept])
      runs.append(
        Run(
          folder,
          name,
          swept,
          tuple(args) + tuple(f'--{flag}={value}' for flag, value in swept),
        )
      )
  return runs


class SweepInterrupted(Exception):
  """The sweep was interrupted (Ctrl-C, SIGTERM) during a run."""

  def __init__(self, message, signum):
    super().__init__(message)
    self.signum = signum


def _duration(seconds):
  seconds = int(round(seconds))
  return (
    f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'
    if seconds >= 3600
    else f'{seconds // 60}:{seconds % 60:02d}'
  )


def run_all(runs, common_args, output_dir, command, env=None, finished=None):
  """Runs each run in its own process (`command` + the common flags + the
  run's + its --output_dir); returns {name: exit code}. A run for which
  `finished(run, run_dir)` holds is not started (exit code 0). Each start
  is a line on stderr with the sweep's progress: elapsed time and, once a
  run has ended, an estimate of the time left (the mean time of the runs
  this sweep ran, times the runs left).

  A run dies with the sweep: SIGTERM reaches it when this process ends,
  however it ends (even by SIGKILL), and Ctrl-C reaches the terminal's
  whole process group. Ctrl-C or SIGTERM here stops the current run, lets
  it finish writing, and raises SweepInterrupted.
  """
  codes, took = {}, []
  start = time.monotonic()

  def on_terminate(signum, frame):
    del frame
    raise SweepInterrupted('', signum)

  previous = signal.signal(signal.SIGTERM, on_terminate)
  try:
    for i, run in enumerate(runs, 1):
      run_dir = os.path.join(output_dir, run.name)
      if finished is not None and finished(run, run_dir):
        print(f'[{i}/{len(runs)}] {run.name}: finished', file=sys.stderr)
        codes[run.name] = 0
        continue
      left = len(runs) - i + 1
      eta = (
        f', about {_duration(statistics.fmean(took) * left)} left'
        if took
        else ''
      )
      print(
        f'[{i}/{len(runs)}] {run.name} ({_duration(time.monotonic() - start)}'
        f' elapsed{eta})',
        file=sys.stderr,
        flush=True,
      )
      began = time.monotonic()
      process = subprocess.Popen(
        [*command, *common_args, *run.args, f'--output_dir={run_dir}'],
        stdout=subprocess.DEVNULL,
        env=env,
        preexec_fn=processes.die_with_parent(signal.SIGTERM),
      )
      try:
        codes[run.name] = process.wait()
        took.append(time.monotonic() - began)
      except (KeyboardInterrupt, SweepInterrupted) as e:
        signum = getattr(e, 'signum', signal.SIGINT)
        process.send_signal(
          signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT
        )
        process.wait()
        name = 'interrupted' if signum == signal.SIGINT else 'terminated'
        raise SweepInterrupted(
          f'sweep {name} during run {i} of {len(runs)} ({run.name})', signum
        ) from None
      if codes[run.name] == 2:  # A usage error: later runs would fail too.
        break
  finally:
    signal.signal(signal.SIGTERM, previous)
  return codes


def table(runs, output_dir, target_accuracy=None):
  """One summary row per run (aligned with `runs`); speedup over the
  same-sweep baseline run."""
  rows, baseline = [], {}
  for run in runs:
    run_dir = os.path.join(output_dir, run.name)
    row = dict(run=run.name, variant=run.variant, **dict(run.swept))
    try:
      if results.has_rows(run_dir):
        row.update(results.summarize(run_dir, target_accuracy))
        row['seconds_per_round'] = results.seconds_per_round(run_dir)
        row['code'] = results.code_id(run_dir)
    except (ValueError, KeyError, TypeError) as e:  # results.DamagedFile...
      print(f'summary: {run.name} left out: {e}', file=sys.stderr)
    baseline.setdefault(run.swept, row.get('rounds_to_target'))
    if target_accuracy is not None:
      base, rounds = baseline[run.swept], row.get('rounds_to_target')
      row['speedup'] = base / rounds if base and rounds else None
    rows.append(row)
  return rows


def seed_table(runs, rows):
  """Rows of the runs that differ only in --seed, combined: per variant and
  other swept setting, the seeds, and per SEED_METRICS metric its mean and
  standard deviation (n − 1) over those seeds; rounds to target over the
  seeds that reached it, with how many did (`reached`). [] unless the seed
  takes several values."""
  seeds = {v for run in runs for f, v in run.swept if f == 'seed'}
  if len(seeds) < 2:
    return []
  groups = {}
  for run, row in zip(runs, rows):
    if 'rounds' in row:  # Runs of other code are never pooled as seeds.
      key = (run.variant, row.get('code')) + tuple(
        (f, v) for f, v in run.swept if f != 'seed'
      )
      groups.setdefault(key, []).append(row)
  combined = []
  for (variant, code, *swept), group in groups.items():
    entry = dict(
      variant=variant,
      **dict(swept),
      code=code,
      seeds=' '.join(str(r.get('seed')) for r in group),
    )
    for metric in SEED_METRICS:
      values = [r[metric] for r in group if r.get(metric) is not None]
      if metric == 'rounds_to_target' and 'target_accuracy' in group[0]:
        entry['reached'] = f'{len(values)}/{len(group)}'
      if values:
        entry[f'{metric}_mean'] = statistics.fmean(values)
        entry[f'{metric}_std'] = (
          statistics.stdev(values) if len(values) > 1 else 0.0
        )
    combined.append(entry)
  return combined


def mark_best(rows, setting, keys, target_accuracy=None):
  """Marks, among rows that differ only in `setting` (the swept learning
  rate: FedAvg §3 picks η per row from a grid), the best one: `best` = '★',
  or '★ edge' when it is the smallest or largest value tried (extend the
  grid). Best: most (seeds) reaching the target, then fewest rounds to it;
  without a target, the highest last-half (else final) test accuracy.
  `keys`: the row's settings other than `setting` (variant, swept flags).
  """
  groups = {}
  for row in rows:
    if setting in row and ('rounds' in row or 'seeds' in row):
      groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)

  def value(row, metric):
    return row.get(f'{metric}_mean', row.get(metric))

  def score(row):
    if target_accuracy is not None:
      if 'reached' in row:
        count, total = row['reached'].split('/')
        fraction = int(count) / int(total)
      else:
        fraction = float(row.get('rounds_to_target') is not None)
      rounds = value(row, 'rounds_to_target')
      return (-fraction, rounds if rounds is not None else float('inf'))
    accuracy = value(row, 'last_half_test_accuracy')
    if accuracy is None:
      accuracy = value(row, 'final_test_accuracy')
    return (-(accuracy or 0.0),)

  for group in groups.values():
    best = min(group, key=score)
    grid = sorted(float(r[setting]) for r in group)
    at_edge = len(grid) > 1 and float(best[setting]) in (grid[0], grid[-1])
    for row in group:
      row['best'] = ('★ edge' if at_edge else '★') if row is best else ''
  return rows


def _cell(value):
  if value is None:
    return '—'
  if isinstance(value, float):
    return f'{value:.4g}'
  return str(value)


def _markdown(rows, columns):
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  return lines + [
    '| ' + ' | '.join(_cell(row.get(c)) for c in columns) + ' |' for row in rows
  ]


def _columns(rows):
  columns = []
  for row in rows:
    columns += [k for k in row if k not in columns]
  return columns


def _csv(rows):
  return results.csv_text(_columns(rows), rows)


def _seed_markdown(combined):
  """The combined rows with 'mean ± std' cells."""
  shown = []
  for entry in combined:
    row = {k: v for k, v in entry.items() if not k.endswith(('_mean', '_std'))}
    for metric in SEED_METRICS:
      if f'{metric}_mean' in entry:
        row[metric] = (
          f'{entry[f"{metric}_mean"]:.4g} ± {entry[f"{metric}_std"]:.2g}'
        )
      elif metric in ('rounds_to_target',) and 'reached' in entry:
        row[metric] = None
    if 'best' in entry:
      row['best'] = entry['best']
    shown.append(row)
  return _markdown(shown, _columns(shown))


def write_summary(rows, output_dir, target_accuracy=None, runs=None):
  """output_dir/summary.md and summary.csv (a row per run), and with
  several seeds summary_seeds.csv (mean and std over seeds), each written
  atomically from the rows of runs that have results. Returns the lines of
  summary.md and the paths written. A swept client_lr gets its best value
  marked per row.

  Writes nothing and returns None when an existing summary.csv has more
  rows: a summary never shrinks because a re-run (with other flags, or
  failing) has fewer results.
  """
  combined = seed_table(runs, rows) if runs is not None else []
  kept = [row for row in rows if 'rounds' in row]
  existing = os.path.join(output_dir, 'summary.csv')
  if os.path.exists(existing):
    try:
      with open(existing, newline='', encoding='utf-8') as f:
        if len(list(csv.DictReader(f))) > len(kept):
          return None
    except (UnicodeDecodeError, csv.Error):
      print(f'{existing} is damaged: written again', file=sys.stderr)
  lr_swept = any('client_lr' in row for row in kept)
  if lr_swept:
    keys = ['variant'] + sorted(
      {
        f
        for run in runs or ()
        for f, _ in run.swept
        if f not in ('client_lr', 'seed')
      }
    )
    mark_best(combined or kept, 'client_lr', keys, target_accuracy)
  lines = [f'# Summary of {len(kept)} runs in {output_dir}', '']
  if combined:
    lines += ['## Mean ± standard deviation over seeds', '']
    lines += _seed_markdown(combined) + ['', '## Runs', '']
  lines += _markdown(kept, _columns(kept)) + ['', 'Columns:']
  lines += [
    f'- {name}: {text}'
    for name, text in SUMMARY_COLUMNS.items()
    if any(name in row for row in kept)
  ]
  if combined:
    lines.append(
      '- seeds, and mean ± std (n − 1) over them; reached: how '
      'many seeds reached the target (rounds to target is the '
      'mean over those)'
    )
  if lr_swept:
    lines.append(
      '- best: ★ the client_lr (η) of the row (the same settings '
      'but η) with the most seeds reaching the target, then the '
      'fewest rounds to it (without a target: the highest '
      'last-half test accuracy), FedAvg §3; "edge": the best is '
      'the smallest or largest η tried, so the grid should be '
      'extended'
    )
  if target_accuracy is not None:
    lines.append(f'- target: test accuracy {target_accuracy:g}')
  files = {'summary.csv': _csv(kept), 'summary.md': '\n'.join(lines) + '\n'}
  if combined:
    files['summary_seeds.csv'] = _csv(combined)
  for name, content in files.items():
    results.write_atomically(os.path.join(output_dir, name), content)
  return lines, [os.path.join(output_dir, name) for name in files]


def _legend_label(variant, described):
  """A sweep plot's line: what a single-run plot calls it (`described`:
  the algorithm with its hyper-parameters, e.g. "FedProx μ=0.01", and the
  settings that set it apart), after the variant's name, which the
  summary's rows go by, unless it already begins with that name."""
  if re.match(re.escape(variant) + r'(?!\w)', described):
    return described
  return f'{variant}: {described}'


def plot_runs(runs, rows, output_dir, target_accuracy=None):
  """One figure per metric and swept setting: a line per variant (over
  several seeds, their mean with a band from min to max), named by the
  variant and, as in a single-run plot, its algorithm's hyper-parameters
  and the settings that set it apart (`_legend_label`), titled with the
  settings they share and the swept values, of the runs whose `table` row
  (`rows`, aligned with `runs`) has results (runs of other code: another
  line). Returns the files written."""
  by_swept = {}
  for run, row in zip(runs, rows):
    if 'rounds' in row:
      others = tuple((f, v) for f, v in run.swept if f != 'seed')
      by_swept.setdefault(others, {}).setdefault(
        (run.variant, row.get('code')), []
      ).append(os.path.join(output_dir, run.name))
  written = []
  for swept, lines in by_swept.items():
    suffix = ''.join(f'__{flag}-{value}' for flag, value in swept)
    groups = list(lines.values())
    shared, described = plot.describe(groups)
    labels = [
      _legend_label(variant, text)
      for (variant, _), text in zip(lines, described)
    ]
    title = '; '.join(
      filter(
        None, [shared, ', '.join(f'{flag}={value}' for flag, value in swept)]
      )
    )
    loss = columns.training_loss_column(
      (results.read_rows(groups[0][0]) or [{}])[0]
    )
    for metric in (loss, *METRICS_PLOTTED):
      written.append(os.path.join(output_dir, f'{metric}{suffix}.png'))
      plot.plot_bands(
        groups,
        metric,
        written[-1],
        title=title,
        labels=labels,
        target=target_accuracy if metric == 'test_accuracy' else None,
      )
  return written
