"""The scoreboard at the top of docs/REPRODUCTION.md, from run folders and
the committed ledger of results.

  .venv/bin/python tools/scoreboard.py [--runs=runs] [--runs=OTHER] [--write]
  .venv/bin/python tools/scoreboard.py --figure=COMMAND --out=FILE.png
      [--metric=train_loss_sampled] [--title=...]   (a command's runs drawn
      from the run folders, else the ledger: a panel per swept value)

One row per table cell or figure panel of the three papers: the paper's
value, ours (mean ± std over seeds where run with seeds), a status, for a
"differs" the reason, and the command (by id: the commands table follows
the rows, with the CPU time each took). `--runs` are folders holding the
commands' output folders (`--output_dir=runs/NAME` → ROOT/NAME); CPU times
come from ROOT/../logs/NAME.time* (/usr/bin/time -f '%U s user %S s sys %e s
wall': user + sys of the whole command, its runs and their TFF workers).

The ledger (docs/scoreboard_ledger.json, LEDGER) keeps what the run folders
held, so that the scoreboard regenerates the same on a clone without them:
- every finished run this script has seen (its summary, config and the
  metric columns the rows read), by command and run name; a run folder
  found under --runs replaces its ledger record;
- the CPU time of every /usr/bin/time file it has read;
- the results of commits fde88f1, 83f512b and 239ead1, whose run folders
  were not kept (UNKEPT): each row's value and status as their scoreboard
  stated them, the CPU hours of their commands and the runs they left
  stopped. A row that the recorded runs cannot compute shows that value,
  marked †.
With --write it also updates the ledger. Only finished runs count: a run
without summary.json is never recorded, and shows only as "not finished".

The quotes of FedProx and FedISGD here, and in the rows, are from their
Chinese texts, glossed in our English (QUOTES, under the rows).

Statuses, with the tolerances we use:
- matches: an accuracy within 2 percentage points of the paper's, or
  within 2 standard deviations of our seeds; rounds to a target within
  ±30%; a figure's stated comparison (quoted) holds in our runs;
- differs: otherwise, with what we measured, and a reason from REASONS
  backed by a measured number or a quoted fact (`reasons()`), else
  "unexplained";
- not run: with the expected CPU hours of its cell's runs on their own
  (Cell, "prices" below: the paper's or plotted rounds × 1.5 × the measured
  seconds per round × the runs still needed), else the bound of its whole
  command (NOT_RUN). `--cell=COMMAND.NAME` prints a cell's command; timed
  into ROOT/../logs/COMMAND.time.NAME, the cells table shows its CPU time
  beside the expected.
Reads run folders and the ledger only (analysis: no TensorFlow), except
the dataset statistics rows, which load the tasks (and fall back to the
ledger where the data is not there).
"""

import argparse
import csv
import fnmatch
import functools
import glob
import json
import math
import os
import re
import statistics
import sys
import typing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from tff_algos.analysis import plot
from tff_algos.simulation import columns
from tff_algos.simulation import results

DOC = os.path.join(os.path.dirname(__file__), '..', 'docs', 'REPRODUCTION.md')
LEDGER = os.path.join(
  os.path.dirname(__file__), '..', 'docs', 'scoreboard_ledger.json'
)
CROSSCHECK = os.path.join(
  os.path.dirname(__file__), 'crosscheck', 'results.json'
)
BEGIN, END = '<!-- scoreboard begin -->', '<!-- scoreboard end -->'
DATA = '--data_dir=../shared/data'
PY = '.venv/bin/python run_experiment.py'
INTERPOLATE = '.venv/bin/python -m tff_algos.interpolate'
FIG1_CSV = os.path.join(
  os.path.dirname(__file__),
  '..',
  'docs',
  'figures',
  'fedavg_fig1_interpolation.csv',
)
# The ledger's key for the results of commits fde88f1, 83f512b and 239ead1,
# whose run folders were not kept (a ledger may still name it by its old
# key, OLD_UNKEPT).
UNKEPT = 'results without run folders'
OLD_UNKEPT = 'earlier session'
# Where the rows' quotes come from: FedProx's only through our translation
# (a back-translation must not pass for the authors' English).
QUOTES = (
  'Quotes: FedProx (Li et al. 2020) from our Chinese translation of it '
  "(../shared/papers/fedprox_li2020_zh.txt), not its authors' English; "
  'FedISGD (Dou & Yuan 2022) from its Chinese text '
  '(fedisgd_dou2022_zh.txt); the English glosses of both are our '
  'translation of the Chinese text. FedAvg (McMahan et al. 2017) in its '
  "authors' English."
)

# id → the command (its output folder is runs/<id>).
COMMANDS = {
  'fedprox_fig1_synthetic': f'{PY} --flagfile=configs/fedprox/fig1_synthetic_1_1.flags',
  'fedprox_fig1_mnist': f'{PY} --flagfile=configs/fedprox/fig1_mnist.flags {DATA}',
  'fedprox_fig1_femnist': f'{PY} --flagfile=configs/fedprox/fig1_femnist.flags {DATA}',
  'fedprox_fig1_sent140': f'{PY} --flagfile=configs/fedprox/fig1_sent140.flags {DATA}',
  'fedprox_fig1_shakespeare': f'{PY} --flagfile=configs/fedprox/fig1_shakespeare.flags {DATA}',
  # The same with FedAvg's 256-unit char-LSTM instead of FedProx's 100 units
  # (App. C.1): whether the model shapes the curves.
  'fedprox_fig1_shakespeare_lstm256': f'{PY} --flagfile=configs/fedprox/fig1_shakespeare.flags '
  f'--task=shakespeare_roles {DATA}',
  'fedprox_fig2': f'{PY} --flagfile=configs/fedprox/fig2_heterogeneity.flags',
  'fedprox_fig3': f'{PY} --flagfile=configs/fedprox/fig3_adaptive_mu.flags',
  # Figure 2's Synthetic-IID panel on two more generated datasets (data
  # seeds 1, 2; training seed 0): whether the data draw explains its
  # variance ordering.
  'fedprox_fig2_iid_data_seeds': f'{PY} --flagfile=configs/fedprox/fig2_heterogeneity.flags '
  '--sweep=task=synthetic_iid --sweep=data_seed=1,2 --sweep=seed=0',
  'fedprox_fig5': f'{PY} --flagfile=configs/fedprox/fig5_synthetic_iid.flags',
  # Figure 8: Figure 1's runs without stragglers, with the dissimilarity.
  'fedprox_fig8_synthetic': f'{PY} --flagfile=configs/fedprox/fig1_synthetic_1_1.flags '
  '--only=FedProx_mu0,FedProx_mu1 --sweep=straggler_fraction=0 '
  '--dissimilarity_every=5',
  'fedprox_fig8_mnist': f'{PY} --flagfile=configs/fedprox/fig1_mnist.flags {DATA} '
  '--only=FedProx_mu0,FedProx_mu1 --sweep=straggler_fraction=0 '
  '--dissimilarity_every=5',
  'fedprox_fig8_femnist': f'{PY} --flagfile=configs/fedprox/fig1_femnist.flags {DATA} '
  '--only=FedProx_mu0,FedProx_mu1 --sweep=straggler_fraction=0 '
  '--dissimilarity_every=5',
  'fedprox_fig9_synthetic': f'{PY} --flagfile=configs/fedprox/fig9_e1_synthetic_1_1.flags',
  'fedprox_fig9_mnist': f'{PY} --flagfile=configs/fedprox/fig9_e1_mnist.flags {DATA}',
  'fedprox_fig9_femnist': f'{PY} --flagfile=configs/fedprox/fig9_e1_femnist.flags {DATA}',
  'fedprox_fig11': f'{PY} --flagfile=configs/fedprox/fig11_adaptive_mu.flags',
  'fedprox_fig12': f'{PY} --flagfile=configs/fedprox/fig12_sampling.flags',
  'fedisgd_table3': f'{PY} --flagfile=configs/fedisgd/table3_synthetic.flags',
  'fedisgd_table4_synthetic': f'{PY} --flagfile=configs/fedisgd/table4_synthetic.flags',
  'fedisgd_table4_mnist': f'{PY} --flagfile=configs/fedisgd/table4_mnist.flags {DATA}',
  'fedisgd_table4_emnist': f'{PY} --flagfile=configs/fedisgd/table4_emnist.flags {DATA}',
  'fedisgd_table4_sent140': f'{PY} --flagfile=configs/fedisgd/table4_sent140.flags {DATA}',
  'fedisgd_fig3_synthetic': f'{PY} --flagfile=configs/fedisgd/table4_synthetic.flags '
  '--sweep=straggler_fraction=0,0.5',
  'fedisgd_fig3_mnist': f'{PY} --flagfile=configs/fedisgd/table4_mnist.flags {DATA} '
  '--sweep=straggler_fraction=0,0.5',
  'fedisgd_fig3_emnist': f'{PY} --flagfile=configs/fedisgd/table4_emnist.flags {DATA} '
  '--sweep=straggler_fraction=0,0.5',
  'fedisgd_fig3_sent140': f'{PY} --flagfile=configs/fedisgd/table4_sent140.flags {DATA} '
  '--sweep=straggler_fraction=0,0.5',
  'fedavg_table1_2nn_b10_iid': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
  '--sweep=task=mnist_iid_2nn',
  # Seeds 0-2 at each C's best η of fedavg_table1_2nn_b10_iid (its grid
  # is seed 0).
  'fedavg_table1_2nn_b10_iid_seeds_c0': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
  '--sweep=task=mnist_iid_2nn --only=C0 --sweep=client_lr=0.1 '
  '--sweep=seed=0,1,2',
  'fedavg_table1_2nn_b10_iid_seeds': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
  '--sweep=task=mnist_iid_2nn --only=C0.1,C0.2,C0.5,C1 '
  '--sweep=client_lr=0.215 --sweep=seed=0,1,2',
  'fedavg_table1_2nn_b10_noniid': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
  '--sweep=task=mnist_pathological_2nn',
  'fedavg_table1_2nn_binf_iid': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_binf.flags {DATA} '
  '--sweep=task=mnist_iid_2nn',
  'fedavg_table1_2nn_binf_noniid': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_binf.flags {DATA} '
  '--sweep=task=mnist_pathological_2nn',
  'fedavg_table1_cnn': f'{PY} --flagfile=configs/fedavg/table1_mnist_cnn.flags {DATA}',
  'fedavg_table2_cnn_iid': f'{PY} --flagfile=configs/fedavg/table2_mnist_cnn.flags {DATA} '
  '--sweep=task=mnist_iid_cnn --only=E5_B10,FedSGD',
  'fedavg_table2_cnn': f'{PY} --flagfile=configs/fedavg/table2_mnist_cnn.flags {DATA}',
  # Seeds 0-2 at E5_B50 IID's best η of fedavg_table2_cnn (its grid is
  # seed 0).
  'fedavg_table2_cnn_seeds': f'{PY} --flagfile=configs/fedavg/table2_mnist_cnn.flags {DATA} '
  '--only=E5_B50 --sweep=task=mnist_iid_cnn --sweep=client_lr=0.215 '
  '--sweep=seed=0,1,2 --rounds=44',
  'fedavg_table2_shakespeare': f'{PY} --flagfile=configs/fedavg/table2_shakespeare_lstm.flags {DATA}',
  'fedavg_table3_cifar10': f'{PY} --flagfile=configs/fedavg/table3_cifar10.flags {DATA}',
  'fedavg_table3_cifar10_sgd': f'{PY} --flagfile=configs/fedavg/table3_cifar10_sgd.flags {DATA}',
  'fedavg_fig9_cifar10': f'{PY} --flagfile=configs/fedavg/fig9_cifar10_minibatches.flags {DATA}',
  # Not a run_experiment.py command: it writes the figure and, beside it,
  # the CSV the Figure 1 rows read (FIG1_CSV).
  'fedavg_fig1_interpolation': f'{INTERPOLATE} {DATA} '
  '--out=docs/figures/fedavg_fig1_interpolation.png',
  'fedavg_table4_2nn': f'{PY} --flagfile=configs/fedavg/table4_mnist_2nn.flags {DATA}',
  # Ours beside the numpy reference (tools/crosscheck): C = 0.1 at the
  # best η and at η = 0.0464, seeds 0-2 (η = 0.215 repeats runs of
  # fedavg_table1_2nn_b10_iid_seeds, on this machine).
  'fedavg_table1_2nn_b10_iid_crosscheck': f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
  '--sweep=task=mnist_iid_2nn --only=C0.1 --sweep=client_lr=0.0464,0.215 '
  '--sweep=seed=0,1,2',
  # Synthetic(α, β) is a random family and the FedISGD paper's draw is
  # not published: the same cells on three draws of the generator (data
  # seeds 0-2, training seed 0), to measure how much the draw moves them.
  'fedisgd_table3_data_seeds': f'{PY} --flagfile=configs/fedisgd/table3_synthetic.flags '
  '--sweep=task=synthetic_0.5_0.5,synthetic_1_1 '
  '--sweep=data_seed=0,1,2 --sweep=seed=0',
  'fedisgd_table4_synthetic_data_seeds': f'{PY} --flagfile=configs/fedisgd/table4_synthetic.flags '
  '--sweep=data_seed=0,1,2 --sweep=seed=0',
}

PP = 2.0  # Accuracies: within 2 percentage points ...
SIGMAS = 2.0  # ... or 2 standard deviations of our seeds.
ROUNDS_TOLERANCE = 0.3  # Rounds to target within ±30%.
# The metric columns a row may read; the ledger keeps only these.
COLUMNS = (
  'train_loss',
  'train_loss_sampled',
  'test_accuracy',
  'grad_variance',
  'vlg',
  'update_spread',
)


class RunRecord:
  """A run: its name (the folder's), metric rows ({column: str}, round 0
  first, only rounds where a COLUMNS value was measured), summary.json
  (empty: not finished) and config.json."""

  def __init__(self, name, rows, summary, config):
    self.name, self.rows = name, rows
    self.summary, self.config = summary or {}, config or {}

  @property
  def finished(self):
    return bool(self.summary)

  @classmethod
  def from_folder(cls, path):
    rows = results.read_rows(path) if results.has_rows(path) else []
    return cls(
      os.path.basename(path),
      _kept_rows(rows),
      results.read_json(path, results.SUMMARY_FILE),
      results.read_json(path, results.CONFIG_FILE),
    )

  def last_round(self):
    return int(
      self.summary.get('rounds', self.rows[-1]['round'] if self.rows else 0)
    )

  def to_json(self, kept=COLUMNS):
    """The ledger's record: summary, config essentials and the `kept`
    metric columns (at the rounds where one was measured)."""
    columns = ['round'] + [c for c in kept if any(r.get(c) for r in self.rows)]
    rows = [r for r in self.rows if any(r.get(c) for c in columns[1:])]
    return dict(
      summary=self.summary,
      config={
        k: self.config.get(k)
        for k in (
          'algo',
          'task',
          'rounds',
          'clients_per_round',
          'epochs',
          'batch_size',
          'client_lr',
          'mu',
          'lam',
          'straggler_fraction',
          'seed',
          'eval_every',
        )
        if k in self.config
      },
      metrics={c: [r.get(c, '') for r in rows] for c in columns},
    )

  @classmethod
  def from_json(cls, name, data):
    metrics = data['metrics']
    rows = [
      {c: values[i] for c, values in metrics.items()}
      for i in range(len(metrics['round']))
    ]
    return cls(name, rows, data['summary'], data['config'])


def _kept_rows(rows):
  """The rows where a COLUMNS value was measured, those values to 6
  significant digits (as the ledger keeps them, so that a run folder and
  its ledger record give the same numbers)."""
  return [
    dict(
      round=r['round'], **{c: f'{float(r[c]):.6g}' for c in COLUMNS if r.get(c)}
    )
    for r in rows
    if any(r.get(c) for c in COLUMNS)
  ]


def _hours(path):
  """(hours, note) of one /usr/bin/time file: user + sys; a part killed
  before /usr/bin/time wrote holds only its wall time, which we count;
  None while the command still runs (the file is empty)."""
  text = open(path).read()
  cpu = re.findall(r'([\d.]+) s (?:user|sys)', text)
  wall = re.findall(r'([\d.]+) s wall', text)
  if cpu:
    return sum(float(n) for n in cpu) / 3600, ''
  if wall:
    return float(wall[0]) / 3600, 'a killed part counted by its wall time'
  return None


class Ledger:
  """docs/scoreboard_ledger.json (see the module docstring)."""

  def __init__(self, path=LEDGER):
    self.path = path
    data = {}
    if path and os.path.exists(path):
      with open(path) as f:
        data = json.load(f)
    self.runs = data.get('runs', {})  # command → name → record
    self.cpu = data.get('cpu', {})  # command → time file → [h, note]
    self.unkept = data.get(
      UNKEPT, data.get(OLD_UNKEPT, {'rows': {}, 'cpu': {}, 'stopped': {}})
    )
    # The dataset statistics rows as last computed from the data.
    self.data_rows = data.get('data_rows', {})

  def save(self):
    data = {
      'about': "The scoreboard's record of results (tools/scoreboard.py "
      'writes it with --write; see its docstring).',
      UNKEPT: self.unkept,
      'data_rows': dict(sorted(self.data_rows.items())),
      'cpu': {c: dict(sorted(v.items())) for c, v in sorted(self.cpu.items())},
      'runs': {
        c: dict(sorted(v.items())) for c, v in sorted(self.runs.items())
      },
    }
    # One line per run record, so the file stays small and diffs by run.
    compact = {}
    for records in data['runs'].values():
      for name, record in records.items():
        marker = f'@@{len(compact)}@@'
        compact[marker] = json.dumps(
          record, ensure_ascii=False, separators=(',', ':')
        )
        records[name] = marker
    text = json.dumps(data, indent=1, ensure_ascii=False)
    for marker, line in compact.items():
      text = text.replace(f'"{marker}"', line, 1)
    results.write_atomically(self.path, text + '\n')


class Runs:
  """The runs of each command: run folders under the --runs roots, else
  the ledger's records; and the commands' CPU times."""

  def __init__(self, roots, ledger=None):
    self.roots = roots
    self.ledger = ledger if ledger is not None else Ledger(None)

  def folder(self, name):
    for root in self.roots:
      path = os.path.join(root, name)
      if os.path.isdir(path):
        return path
    return None

  def folder_records(self, command):
    """{name: RunRecord} of the run folders of `command` (with rows)."""
    folder = self.folder(command)
    return (
      {}
      if folder is None
      else {
        os.path.basename(d): RunRecord.from_folder(d)
        for d in sorted(glob.glob(os.path.join(folder, '*')))
        if os.path.isdir(d)
        and (results.has_rows(d) or results.read_json(d, results.SUMMARY_FILE))
      }
    )

  def records(self, command):
    """{name: RunRecord}: the finished runs of the ledger, replaced (or
    joined) by the run folders'."""
    found = {
      name: RunRecord.from_json(name, data)
      for name, data in self.ledger.runs.get(command, {}).items()
    }
    for name, record in self.folder_records(command).items():
      if record.finished or name not in found:
        found[name] = record
    return found

  def runs(self, command, pattern):
    """Finished runs of `command` whose names match the glob `pattern`
    (a run still going, or stopped early, does not count)."""
    return [
      r
      for name, r in sorted(self.records(command).items())
      if r.finished and fnmatch.fnmatchcase(name, pattern)
    ]

  def unfinished(self, command, pattern='*'):
    """'NAME at round r of T' for each run of `command` matching `pattern`
    that has not finished: in a run folder, or stopped among the results
    without run folders (UNKEPT) while no run of that name is recorded."""
    found = []
    records = self.records(command)
    for name, record in sorted(records.items()):
      if not record.finished and fnmatch.fnmatchcase(name, pattern):
        found.append(
          f'{name} at round {record.rows[-1]["round"] if record.rows else 0}'
          f' of {record.config.get("rounds")}'
        )
    for name, where in sorted(
      self.ledger.unkept.get('stopped', {}).get(command, {}).items()
    ):
      if name not in records and fnmatch.fnmatchcase(name, pattern):
        found.append(f'{name} {where} (run folder not kept)')
    return found

  def time_files(self, command):
    """{file name: (hours, note) or None (running)} of `command`'s
    /usr/bin/time files under the roots' ../logs."""
    found = {}
    for root in self.roots:
      for path in sorted(
        glob.glob(os.path.join(root, '..', 'logs', f'{command}.time*'))
      ):
        if not path.endswith(('.out', '.err')):
          found.setdefault(os.path.basename(path), _hours(path))
    return found

  def cpu_hours(self, command):
    """(hours, note) of `command`: those of its runs without run folders
    (UNKEPT), plus each time file read (now or before, from the ledger);
    None when it never ran."""
    parts, notes, running = [], [], False
    unkept = self.ledger.unkept.get('cpu', {}).get(command)
    if unkept:
      parts.append(unkept[0])
      notes.append(
        f'without run folders {unkept[0]:.2f}'
        + (f', {unkept[1]}' if unkept[1] else '')
      )
    files = dict(self.ledger.cpu.get(command, {}))
    for name, took in self.time_files(command).items():
      if took is None:
        running = True
      else:
        files[name] = list(took)
    if files:
      now = sum(h for h, _ in files.values())
      parts.append(now)
      killed = [n for _, n in files.values() if n]
      notes.append(
        f'from time files {now:.2f}' + (f', {killed[0]}' if killed else '')
      )
    if running:
      notes.append('still running')
    if not parts and not running:
      return None
    return sum(parts), '; '.join(notes) if len(notes) > 1 or running or (
      unkept and unkept[1]
    ) else ''

  def record(self):
    """Copies the finished run folders and the time files into the ledger."""
    for command in COMMANDS:
      for name, record in self.folder_records(command).items():
        if record.finished:  # FedAvg's rows read the test accuracy only.
          self.ledger.runs.setdefault(command, {})[name] = record.to_json(
            ('test_accuracy',) if command.startswith('fedavg_') else COLUMNS
          )
      for name, took in self.time_files(command).items():
        if took is not None:
          self.ledger.cpu.setdefault(command, {})[name] = list(took)


def _summarize(record, target=None):
  """The numbers a row reads of one run (as results.summarize does for a
  run folder)."""
  rounds, accuracy = results.series(record.rows, 'test_accuracy')
  last = record.last_round()
  summary = dict(
    rounds=last,
    name=record.name,
    last_half_test_accuracy=results.last_half_mean(rounds, accuracy, last),
    final_test_accuracy=accuracy[-1] if accuracy else None,
  )
  if target is not None:
    summary['rounds_to_target'] = results.rounds_to_target(
      rounds, accuracy, target
    )
  return summary


def _summaries(records, target=None):
  return [_summarize(r, target) for r in records]


def _mean_std(values):
  values = [v for v in values if v is not None]
  if not values:
    return None, None
  return (
    statistics.fmean(values),
    statistics.stdev(values) if len(values) > 1 else 0.0,
  )


def data_seed_values(runs, command, pattern, metric='last_half_test_accuracy'):
  """{'data_seeds': {data seed: metric (%)}} over the finished runs of
  `command` matching `pattern` (named …__data_seed-N), if two or more."""
  found = runs.runs(command, pattern)
  if len(found) < 2:
    return {}
  return {
    'data_seeds': {
      r.name.rsplit('data_seed-', 1)[1]: round(_summarize(r)[metric] * 100, 2)
      for r in found
    }
  }


def accuracy_row(runs, command, pattern, metric, paper):
  """(ours, status, details): a mean test accuracy (%) over the matching
  runs; details: the per-run values."""
  found = runs.runs(command, pattern)
  if not found:
    return None
  values = [s[metric] * 100 for s in _summaries(found)]
  mean, std = _mean_std(values)
  ours = (
    f'{mean:.1f} ± {std:.1f} ({len(found)} seeds)'
    if len(found) > 1
    else f'{mean:.1f}'
  )
  details = dict(
    values=[round(v, 2) for v in values], paper=paper, runs=len(found)
  )
  if abs(mean - paper) <= max(PP, SIGMAS * std):
    return ours, 'matches', details
  return ours, f'differs by {mean - paper:+.1f} pp', details


def _loss_curve(record):
  """The run's training loss (over all clients, or its --eval_clients
  sample) by round."""
  return results.series(
    record.rows,
    columns.training_loss_column(record.rows[0] if record.rows else ()),
  )


def _mean_curve(records):
  curves = [dict(zip(*_loss_curve(r))) for r in records]
  rounds = sorted(set.intersection(*(set(c) for c in curves)))
  return rounds, [statistics.fmean(c[r] for c in curves) for r in rounds]


def rounds_row(runs, command, pattern, target, paper, grid_size=5):
  """(ours, status, details): the best η's rounds to target among the
  matching runs (a grid of `grid_size` client_lr values), with the grid; a
  grid not yet complete is not judged. Where the command `<command>_seeds*`
  re-ran the best η with several seeds (NAME__seed-S), ours adds their mean
  ± std and the status judges that mean. details: rounds to target by η
  (None: not reached), the best η, the seeds' rounds and the judged value."""
  found = runs.runs(command, pattern)
  if not found:
    return None
  if len(found) < grid_size:
    reached = [
      s['rounds_to_target']
      for s in _summaries(found, target)
      if s['rounds_to_target'] is not None
    ]
    return (
      (f'{min(reached):.0f} so far' if reached else 'not reached'),
      f'not finished: {len(found)} of {grid_size} η values run',
    )
  cells = []
  for summary in _summaries(found, target):
    lr = re.search(r'client_lr-([\d.e-]+)', summary['name'])
    cells.append(
      (
        float(lr.group(1)) if lr else None,
        summary['rounds_to_target'],
        summary['rounds'],
        summary['name'],
      )
    )
  cells.sort()
  details = dict(
    grid={
      f'{c[0]:g}': (None if c[1] is None else round(c[1], 1)) for c in cells
    },
    paper=paper,
  )
  reached = [c for c in cells if c[1] is not None]
  grid = ', '.join(f'{cell[0]:g}' for cell in cells)
  if not reached:
    most = max(cell[2] for cell in cells)
    ours = f'not reached in {most} rounds (η ∈ {{{grid}}})'
    return (
      ours,
      (
        'matches' if paper is None else f'differs: not reached in {most} rounds'
      ),
      details,
    )
  lr, best, _, best_run = min(reached, key=lambda c: c[1])
  edge = (
    " (best at the grid's edge)"
    if lr in (cells[0][0], cells[-1][0]) and len(cells) > 1
    else ''
  )
  ours = f'{best:.0f} (η = {lr:g} of {{{grid}}}){edge}'
  judged = best  # Or the seeds' mean at that η.
  details.update(best_lr=lr)
  seeds = [
    d
    for name in COMMANDS
    if name.startswith(f'{command}_seeds')
    for d in runs.runs(name, f'{best_run}__seed-*')
  ]
  if len(seeds) > 1:
    seed_rounds = [
      s['rounds_to_target']
      for s in _summaries(seeds, target)
      if s['rounds_to_target'] is not None
    ]
    if seed_rounds:
      judged, std = _mean_std(seed_rounds)
      details['seeds'] = [round(r, 1) for r in seed_rounds]
      ours += (
        f'; seeds at that η: {judged:.0f} ± {std:.0f} '
        f'({len(seed_rounds)} of {len(seeds)} reached)'
      )
  details['judged'] = round(judged, 1)
  if paper is None:
    return ours, 'differs: the paper did not reach it', details
  if abs(judged - paper) <= ROUNDS_TOLERANCE * paper:
    return ours, 'matches', details
  return ours, f"differs: {judged / paper:.2f}× the paper's rounds", details


def updates_row(runs, command, pattern, target, paper, grid_size=5):
  """(ours, status, details) of a centralized baseline's cell: the best η's
  minibatch updates to `target` (rounds to target × the run's updates per
  round, summary.json's updates_per_round) among the matching runs (a grid
  of `grid_size` client_lr values), judged as rounds_row judges rounds; a
  grid not yet complete is not judged. details: updates by η (None: not
  reached), the best η and the judged value."""
  found = runs.runs(command, pattern)
  if not found:
    return None
  cells = []
  for record in found:
    per_round = float(record.summary['updates_per_round'])
    rounds = _summarize(record, target)['rounds_to_target']
    lr = re.search(r'client_lr-([\d.e-]+)', record.name)
    cells.append(
      (
        float(lr.group(1)) if lr else None,
        None if rounds is None else rounds * per_round,
        record.last_round() * per_round,
      )
    )
  reached = [c for c in cells if c[1] is not None]
  if len(found) < grid_size:
    return (
      (
        f'{min(c[1] for c in reached):,.0f} updates so far'
        if reached
        else 'not reached'
      ),
      f'not finished: {len(found)} of {grid_size} η values run',
    )
  cells.sort()
  details = dict(
    grid={
      f'{c[0]:g}': (None if c[1] is None else round(c[1], 1)) for c in cells
    },
    paper=paper,
  )
  grid = ', '.join(f'{c[0]:g}' for c in cells)
  if not reached:
    most = max(c[2] for c in cells)
    return (
      f'not reached in {most:,.0f} updates (η ∈ {{{grid}}})',
      f'differs: not reached in {most:,.0f} updates',
      details,
    )
  lr, best, _ = min(reached, key=lambda c: c[1])
  edge = (
    " (best at the grid's edge)" if lr in (cells[0][0], cells[-1][0]) else ''
  )
  details.update(best_lr=lr, judged=round(best, 1))
  ours = f'{best:,.0f} updates (η = {lr:g} of {{{grid}}}){edge}'
  if abs(best - paper) <= ROUNDS_TOLERANCE * paper:
    return ours, 'matches', details
  return ours, f"differs: {best / paper:.2f}× the paper's updates", details


def ordering_row(runs, command, patterns, claim_holds, describe):
  """(ours, status) of a figure panel: `patterns` name the curves' runs
  (glob, seeds averaged); `claim_holds(curves)` tests the paper's
  comparison; `describe(curves)` writes ours."""
  curves = {}
  for name, pattern in patterns.items():
    found = runs.runs(command, pattern)
    if not found:
      return None
    curves[name] = found
  ours = describe(curves)
  return ours, 'matches' if claim_holds(curves) else 'differs'


def final_loss(records):
  return statistics.fmean(_loss_curve(r)[1][-1] for r in records)


def mean_loss(records):
  """Mean training loss over rounds 1..T (spikes count), seeds averaged."""
  return statistics.fmean(
    statistics.fmean(_loss_curve(r)[1][1:]) for r in records
  )


def metric_mean(records, metric):
  return statistics.fmean(
    statistics.fmean(results.series(r.rows, metric)[1]) for r in records
  )


# ---------------------------------------------------------------- prices
# A cell not run is priced on its own: expected CPU-h = the paper's rounds
# to target (our round cap where the paper's is "—"), or its plotted
# rounds, × MARGIN × the measured seconds per round × the runs it still
# needs (its η values; a figure's curves × seeds). A rounds-to-target
# cell's command stops its runs at the target or at ⌈MARGIN × the paper's
# rounds⌉ (configs/fedavg/table4_mnist_2nn.flags says why that cap changes
# no status); a figure's runs run the plotted rounds.
MARGIN = 1.5


class Rate(typing.NamedTuple):
  """Measured seconds per round of one configuration: `seconds` at K·E =
  `k_e` (local work), plus `evaluation` seconds per evaluation where the
  measurement gives it apart. A cell with more local work scales
  `seconds` up by its K·E; one with less is bounded by it (start-up and
  evaluation do not shrink with K·E)."""

  seconds: float
  k_e: float
  evaluation: float
  how: str

  def per_round(self, k_e, eval_every=1):
    return (
      self.seconds * max(1.0, k_e / self.k_e) + self.evaluation / eval_every
    )


# Rates measured from our own timed commands: (command, its /usr/bin/time
# file, the glob of the runs that file timed, their K·E): CPU-s per round
# = the file's CPU seconds (start-up and evaluations included) / the rounds
# those runs ran (the committed ledger's records, whatever --ledger says).
MEASURED = {
  '2nn_b10': (
    'fedavg_table1_2nn_b10_iid_crosscheck',
    'fedavg_table1_2nn_b10_iid_crosscheck.time',
    '*',
    10,
  ),
  '2nn_b10_k1': (
    'fedavg_table1_2nn_b10_noniid',
    'fedavg_table1_2nn_b10_noniid.time.c0',
    'C0__*',
    1,
  ),
  '2nn_binf': (
    'fedavg_table1_2nn_binf_noniid',
    'fedavg_table1_2nn_binf_noniid.time.s27c01',
    'C0.1__*',
    10,
  ),
  '2nn_binf_k1': (
    'fedavg_table1_2nn_binf_iid',
    'fedavg_table1_2nn_binf_iid.time.c0',
    'C0__*',
    1,
  ),
  'synthetic': ('fedprox_fig11', 'fedprox_fig11.time', '*', 200),
  # Row 27's five η values (not its edge run, timed on its own), K = 10,
  # E = 5, evaluated every round.
  'cnn': (
    'fedavg_table1_cnn',
    'fedavg_table1_cnn.time.C0.1_iid_b10',
    'C0.1__task-mnist_iid_cnn__batch_size-10__client_lr-0.[0-2]*',
    50,
  ),
}
# Rates of models no command has run here: probes' seconds of wall time,
# priced as CPU seconds.
PROBED = {
  'lstm_fedavg': Rate(
    82, 119, 0, 'probe: 82 s per K = 119, E = 1, B = 10 round'
  ),
  'lstm_fedprox': Rate(
    12.05,
    200,
    0,
    "probe: 12.05 s per K = 10, E = 20 round of FedProx's 100-unit "
    'char-LSTM (3 rounds, beside two other jobs)',
  ),
  'cifar': Rate(
    25.6,
    50,
    29.5,
    'probe: 25.6 s per K = 10, E = 5, B = 50 round, 29.5 s per evaluation',
  ),
  'sent140': Rate(
    8.85,
    200,
    0,
    "fedisgd_table4_sent140's FedProx: 8.85 s per K = 10, E = 20 round",
  ),
}


@functools.cache
def rate(key):
  """The Rate named `key`: PROBED's, or measured (MEASURED)."""
  if key in PROBED:
    return PROBED[key]
  command, time_file, pattern, k_e = MEASURED[key]
  ledger = Ledger()
  hours = ledger.cpu[command][time_file][0]
  rounds = sum(
    int(r['summary']['rounds'])
    for name, r in ledger.runs[command].items()
    if fnmatch.fnmatchcase(name, pattern)
  )
  return Rate(
    hours * 3600 / rounds,
    k_e,
    0,
    f'{command}: {hours:.3f} CPU-h for {rounds:,} rounds',
  )


class Cell(typing.NamedTuple):
  """The runs of one table cell or figure panel (or of a few that read the
  same runs), which `flags` added to its command run on their own: `runs`
  of them (matching `pattern`) of K·E = `k_e` at `rate`'s seconds per
  round, priced at `rounds` (the paper's or plotted) × MARGIN rounds."""

  command: str
  name: str  # Its /usr/bin/time file: logs/COMMAND.time.NAME.
  flags: str
  pattern: str
  runs: int
  rounds: int
  rate: str
  k_e: float
  eval_every: int = 1

  def needed(self, runs):
    """The runs still needed: those not finished (ledger or folders)."""
    return max(0, self.runs - len(runs.runs(self.command, self.pattern)))

  def expected(self, runs, needed=None):
    """Expected CPU-h of the runs still needed (of all, needed=runs)."""
    needed = self.needed(runs) if needed is None else needed
    per_round = rate(self.rate).per_round(self.k_e, self.eval_every)
    return needed * MARGIN * self.rounds * per_round / 3600

  def command_line(self):
    return (
      f'{COMMANDS[self.command]} {self.flags} --output_dir=runs/' + self.command
    )


# ------------------------------------------------------------------ rows
class Row:
  """One table cell or figure panel: `compute(runs)` gives (ours, status)
  or None when its runs are not there (then: not run, priced by the
  `cells` whose runs it reads, else by NOT_RUN). `pattern`: the glob of the command's
  run folders the row reads (a stopped run elsewhere in the command does not
  make this row "not finished")."""

  def __init__(
    self,
    paper,
    item,
    value,
    command,
    compute=None,
    estimate=None,
    reason='',
    pattern='*',
    extra=None,
    cells=(),
  ):
    self.paper, self.item, self.value = paper, item, value
    self.command, self.compute = command, compute
    self.estimate, self.reason = estimate, reason
    self.pattern = pattern
    self.extra = extra  # extra(runs) → more measured details, or {}.
    self.cells = tuple(cells)  # The Cells whose runs it reads.

  @property
  def key(self):
    """The row's name in the ledger and the cross-check results."""
    return f'{self.paper} | {self.item}'


def _or_dash(value):
  return '—' if value is None else f'{value:g}'


# The η a cell's grid was extended by, by the configs' rule (fixed before
# any run): its best η of the five on the grid's edge, the next value at
# 10^(1/3) beyond it. (command, cell name) → that η.
EDGE = {
  ('fedavg_table4_2nn', 'E1_B50_iid'): '1',
  ('fedavg_table1_cnn', 'C0.1_iid_b10'): '0.464',
}


def grid_cells(
  command, name, flags, pattern, paper, cap, rate_key, k_e, eval_every
):
  """The Cells of a rounds-to-target row: its five η values, stopped at
  the target or at ⌈MARGIN × the paper's rounds⌉ (at the command's `cap`
  where the paper's value is None, "—"), and its EDGE extension."""
  if paper is not None:
    flags = f'{flags} --rounds={math.ceil(MARGIN * paper)}'.strip()
  cells = [
    Cell(
      command, name, flags, pattern, 5, paper or cap, rate_key, k_e, eval_every
    )
  ]
  if (command, name) in EDGE:
    lr = EDGE[(command, name)]
    cells.append(
      Cell(
        command,
        f'{name}_edge',
        f'{flags} --sweep=client_lr={lr}',
        pattern.replace('client_lr-*', f'client_lr-{lr}'),
        1,
        paper or cap,
        rate_key,
        k_e,
        eval_every,
      )
    )
  return [add_cell(c) for c in cells]


def figure_cell(command, name, flags, pattern, runs, plotted, rate_key, k_e):
  """The Cell of a figure's curves: `runs` runs of `plotted` rounds."""
  return add_cell(
    Cell(command, name, flags, pattern, runs, plotted, rate_key, k_e)
  )


def add_cell(cell):
  """Registers `cell` in CELLS (by command and name) and returns it."""
  CELLS.setdefault((cell.command, cell.name), cell)
  return CELLS[(cell.command, cell.name)]


def _epochs(variant):
  """E of a Table 2 or 4 variant (FedSGD: 1)."""
  found = re.match(r'E(\d+)_', variant)
  return int(found.group(1)) if found else 1


def _k(variant):
  """K of Table 1's client fraction variant (C0: one client)."""
  return max(1, round(100 * float(variant[1:])))


ROWS = []
CELLS = {}  # (command, name) → Cell.
C_VALUES = (
  ('C0', '0'),
  ('C0.1', '0.1'),
  ('C0.2', '0.2'),
  ('C0.5', '0.5'),
  ('C1', '1.0'),
)
# FedAvg Table 1, (model, split, B) → paper rounds by C.
TABLE1 = {
  ('2nn', 'iid', 'inf'): (1455, 1474, 1658, None, None),
  ('2nn', 'iid', '10'): (316, 87, 77, 75, 70),
  ('2nn', 'noniid', 'inf'): (4278, 1796, 1528, None, None),
  ('2nn', 'noniid', '10'): (3275, 664, 619, 443, 380),
  ('cnn', 'iid', 'inf'): (387, 339, 337, 164, 246),
  ('cnn', 'iid', '10'): (50, 18, 18, 18, 16),
  ('cnn', 'noniid', 'inf'): (1181, 1100, 978, 1067, None),
  ('cnn', 'noniid', '10'): (956, 206, 200, 261, 97),
}
TASK = dict(iid='mnist_iid', noniid='mnist_pathological')
for (model, split, b), values in TABLE1.items():
  target = 0.97 if model == '2nn' else 0.99
  for (variant, c), paper in zip(C_VALUES, values):
    task = f'{TASK[split]}_{model}'
    if model == '2nn':
      command = f'fedavg_table1_2nn_b{b}_{split}'
      pattern = f'{variant}__task-{task}__client_lr-*'
      key = ('2nn_b10' if b == '10' else '2nn_binf') + (
        '_k1' if variant == 'C0' else ''
      )
      cells = grid_cells(
        command,
        variant,
        f'--only={variant}',
        pattern,
        paper,
        4000 if b == '10' else 5000,
        key,
        _k(variant),
        1,
      )
    else:
      command = 'fedavg_table1_cnn'
      batch = '10' if b == '10' else '-1'
      pattern = f'{variant}__task-{task}__batch_size-{batch}__client_lr-*'
      cells = grid_cells(
        command,
        f'{variant}_{split}_b{b}',
        f'--only={variant} --sweep=task={task} --sweep=batch_size={batch}',
        pattern,
        paper,
        1500,
        'cnn',
        5 * _k(variant),
        2,
      )
    ROWS.append(
      Row(
        'FedAvg',
        f'Table 1 {model.upper()}, {split.replace("noniid", "non-IID").replace("iid", "IID")}, B={"∞" if b == "inf" else b}, C={c}: rounds to {target:.0%}',
        _or_dash(paper),
        command,
        lambda r, c=command, p=pattern, t=target, v=paper: rounds_row(
          r, c, p, t, v
        ),
        pattern=pattern,
        cells=cells,
      )
    )

TABLE2_CNN = (
  ('FedSGD', 626, 483),
  ('E5_Binf', 179, 1000),
  ('E1_B50', 65, 600),
  ('E20_Binf', 234, 672),
  ('E1_B10', 34, 350),
  ('E5_B50', 29, 334),
  ('E20_B50', 32, 426),
  ('E5_B10', 20, 229),
  ('E20_B10', 18, 173),
)
for variant, iid, noniid in TABLE2_CNN:
  for split, paper in (('iid', iid), ('noniid', noniid)):
    task = f'{TASK[split]}_cnn'
    pattern = f'{variant}__task-{task}__client_lr-*'
    command = (
      'fedavg_table2_cnn_iid'
      if split == 'iid' and variant in ('FedSGD', 'E5_B10')
      else 'fedavg_table2_cnn'
    )
    cells = grid_cells(
      command,
      f'{variant}_{split}',
      f'--only={variant} --sweep=task={task}',
      pattern,
      paper,
      1500,
      'cnn',
      10 * _epochs(variant),
      2,
    )
    ROWS.append(
      Row(
        'FedAvg',
        f'Table 2 CNN, {variant}, {split}: rounds to 99%',
        str(paper),
        command,
        lambda r, c=command, p=pattern, v=paper: rounds_row(r, c, p, 0.99, v),
        pattern=pattern,
        cells=cells,
      )
    )
TABLE2_LSTM = (
  ('FedSGD', 2488, 3906),
  ('E1_B50', 1635, 549),
  ('E5_Binf', 613, 597),
  ('E1_B10', 460, 164),
  ('E5_B50', 401, 152),
  ('E5_B10', 192, 41),
)
for variant, iid, noniid in TABLE2_LSTM:
  for task, paper in (
    ('shakespeare_roles_iid', iid),
    ('shakespeare_roles', noniid),
  ):
    pattern = f'{variant}__task-{task}__client_lr-*'
    split = 'iid' if task.endswith('iid') else 'role'
    cells = grid_cells(
      'fedavg_table2_shakespeare',
      f'{variant}_{split}',
      f'--only={variant} --sweep=task={task}',
      pattern,
      paper,
      4000,
      'lstm_fedavg',
      119 * _epochs(variant),
      10,
    )
    ROWS.append(
      Row(
        'FedAvg',
        f'Table 2 Shakespeare LSTM, {variant}, '
        f'{"IID" if task.endswith("iid") else "by role"}: rounds to 54%',
        str(paper),
        'fedavg_table2_shakespeare',
        lambda r, p=pattern, v=paper: rounds_row(
          r, 'fedavg_table2_shakespeare', p, 0.54, v
        ),
        pattern=pattern,
        cells=cells,
      )
    )
# A Table 3 algorithm's three targets read the same runs (stopped at 85%):
# one cell, at the rounds of its last target the paper reached.
for algorithm, values in (
  ('FedSGD', (3750, 6600, None)),
  ('FedAvg_E5_B50', (280, 630, 2000)),
):
  cells = grid_cells(
    'fedavg_table3_cifar10',
    algorithm,
    f'--only={algorithm}',
    f'{algorithm}__client_lr-*',
    max(v for v in values if v),
    4000,
    'cifar',
    10 * _epochs(algorithm.replace('FedAvg_', '')),
    10,
  )
  for target, paper in zip((0.80, 0.82, 0.85), values):
    ROWS.append(
      Row(
        'FedAvg',
        f'Table 3 CIFAR-10, {algorithm}: rounds to {target:.0%}',
        _or_dash(paper),
        'fedavg_table3_cifar10',
        lambda r, a=algorithm, t=target, v=paper: rounds_row(
          r, 'fedavg_table3_cifar10', f'{a}__client_lr-*', t, v
        ),
        pattern=f'{algorithm}__client_lr-*',
        cells=cells,
      )
    )
# Centralized SGD: a round is 500 updates; 99,000 updates the last target.
_SGD_CELLS = grid_cells(
  'fedavg_table3_cifar10_sgd',
  'SGD_B100',
  '',
  'SGD_B100__client_lr-*',
  99000 // 500,
  400,
  'cifar_sgd',
  1,
  2,
)
for target, paper in ((0.80, 18000), (0.82, 31000), (0.85, 99000)):
  ROWS.append(
    Row(
      'FedAvg',
      f'Table 3 CIFAR-10, centralized SGD (B=100): minibatch '
      f'updates to {target:.0%}',
      str(paper),
      'fedavg_table3_cifar10_sgd',
      lambda r, t=target, v=paper: updates_row(
        r, 'fedavg_table3_cifar10_sgd', 'SGD_B100__client_lr-*', t, v
      ),
      pattern='SGD_B100__client_lr-*',
      cells=_SGD_CELLS,
    )
  )
TABLE4 = (
  ('FedSGD', 1468, 1817),
  ('E10_Binf', 156, 1100),
  ('E1_B50', 144, 1183),
  ('E20_Binf', 92, 957),
  ('E1_B10', 92, 831),
  ('E10_B50', 45, 881),
  ('E20_B50', 39, 835),
  ('E10_B10', 34, 497),
  ('E20_B10', 32, 738),
)
for variant, iid, noniid in TABLE4:
  for split, paper in (('iid', iid), ('noniid', noniid)):
    pattern = f'{variant}__task-{TASK[split]}_2nn__client_lr-*'
    cells = grid_cells(
      'fedavg_table4_2nn',
      f'{variant}_{split}',
      f'--only={variant} --sweep=task={TASK[split]}_2nn',
      pattern,
      paper,
      3000,
      '2nn_binf'
      if variant == 'FedSGD' or variant.endswith('Binf')
      else '2nn_b10',
      10 * _epochs(variant),
      5,
    )
    ROWS.append(
      Row(
        'FedAvg',
        f'Table 4 (App. A) 2NN, {variant}, {split}: rounds to 97%',
        str(paper),
        'fedavg_table4_2nn',
        lambda r, p=pattern, v=paper: rounds_row(
          r, 'fedavg_table4_2nn', p, 0.97, v
        ),
        pattern=pattern,
        cells=cells,
      )
    )


def faster_row(runs, command, fast, slow, target):
  """(ours, status): the best-η run of `fast` reaches `target` in fewer
  rounds than the best of `slow` (glob patterns)."""
  cells = []
  for pattern in (fast, slow):
    found = runs.runs(command, pattern)
    if not found:
      return None
    reached = [
      s['rounds_to_target']
      for s in _summaries(found, target)
      if s['rounds_to_target'] is not None
    ]
    cells.append(min(reached) if reached else None)
  ours = (
    ' vs '.join('not reached' if c is None else f'{c:.0f}' for c in cells)
    + ' rounds'
  )
  holds = cells[0] is not None and (cells[1] is None or cells[0] < cells[1])
  return ours, 'matches' if holds else 'differs'


for figure, text, command, fast, slow, target in (
  (
    'Figure 2 (a)',
    'MNIST CNN IID: FedAvg reaches 99% long before FedSGD',
    'fedavg_table2_cnn_iid',
    'E5_B10__task-mnist_iid_cnn__*',
    'FedSGD__task-mnist_iid_cnn__*',
    0.99,
  ),
  (
    'Figure 2 (b)',
    'MNIST CNN non-IID: the same',
    'fedavg_table2_cnn',
    'E5_B10__task-mnist_pathological_cnn__*',
    'FedSGD__task-mnist_pathological_cnn__*',
    0.99,
  ),
  (
    'Figure 2 (c)',
    'Shakespeare IID: FedAvg reaches 54% before FedSGD',
    'fedavg_table2_shakespeare',
    'E5_B10__task-shakespeare_roles_iid__*',
    'FedSGD__task-shakespeare_roles_iid__*',
    0.54,
  ),
  (
    'Figure 2 (d)',
    'Shakespeare by role: the same',
    'fedavg_table2_shakespeare',
    'E5_B10__task-shakespeare_roles__*',
    'FedSGD__task-shakespeare_roles__*',
    0.54,
  ),
  (
    'Figure 4',
    'CIFAR-10: FedAvg reaches 80% long before FedSGD',
    'fedavg_table3_cifar10',
    'FedAvg_E5_B50__*',
    'FedSGD__*',
    0.80,
  ),
  (
    'Figure 7 (a)',
    'MNIST 2NN IID: FedAvg (E1 B10) reaches 97% before FedSGD',
    'fedavg_table4_2nn',
    'E1_B10__task-mnist_iid_2nn__*',
    'FedSGD__task-mnist_iid_2nn__*',
    0.97,
  ),
  (
    'Figure 7 (b)',
    'MNIST 2NN non-IID: the same',
    'fedavg_table4_2nn',
    'E1_B10__task-mnist_pathological_2nn__*',
    'FedSGD__task-mnist_pathological_2nn__*',
    0.97,
  ),
):
  ROWS.append(
    Row(
      'FedAvg',
      f'{figure}: {text}',
      'FedAvg < FedSGD (rounds)',
      command,
      lambda r, c=command, a=fast, b=slow, t=target: faster_row(r, c, a, b, t),
      cells=[
        c
        for c in CELLS.values()
        if c.command == command
        and any(fnmatch.fnmatchcase(c.pattern, p) for p in (fast, slow))
      ],
    )
  )


def _fig1_losses(path=FIG1_CSV):
  """{case: {θ: loss}} of `python -m tff_algos.interpolate`'s CSV (cases
  'independent' and 'shared'), or None where it is not there."""
  if not os.path.exists(path):
    return None
  found = {}
  with open(path, encoding='utf-8') as f:
    for line in csv.DictReader(f):
      found.setdefault(line['case'], {})[float(line['theta'])] = float(
        line['loss']
      )
  return found


def interpolation_row(case):
  """compute(runs) of a FedAvg Figure 1 panel: the loss of the average
  (θ = ½) against its parents' (θ = 0, 1); 'independent' (different
  initializations) holds if the average is worse than either parent,
  'shared' if it is better than either."""

  def compute(runs):
    del runs  # The CSV is committed beside the figure.
    curves = _fig1_losses()
    if not curves or case not in curves:
      return None
    loss = curves[case]
    parents, average = (loss[0.0], loss[1.0]), loss[0.5]
    worse = case == 'independent'
    parent = max(parents) if worse else min(parents)
    ours = (
      f'loss at θ = 0 / ½ / 1: {loss[0.0]:.4f} / {average:.4f} / '
      f'{loss[1.0]:.4f}, the average {average / parent:.2f}× the '
      f"{'worse' if worse else 'better'} parent's (seed 0)"
    )
    holds = average > parent if worse else average < parent
    return ours, 'matches' if holds else 'differs'

  return compute


ROWS.append(
  Row(
    'FedAvg',
    'Figure 1 (left): averaging two MNIST 2NN models trained from '
    'different initializations (loss on the full training set along θ)',
    'the average worse than either parent ("exactly this bad behavior")',
    'fedavg_fig1_interpolation',
    interpolation_row('independent'),
  )
)
ROWS.append(
  Row(
    'FedAvg',
    'Figure 1 (right): the same from a shared initialization',
    'the average better than either parent ("much better than the loss of '
    'either parent model")',
    'fedavg_fig1_interpolation',
    interpolation_row('shared'),
  )
)
for figure, text, reason in (
  (
    'Figure 3',
    'Shakespeare LSTM, B=10, C=0.1, η=1.47, E up to 50: '
    'large E plateaus or diverges',
    'the Shakespeare LSTM at large E',
  ),
  ('Figure 5', 'large-scale next-word LSTM', 'its data is not public'),
  (
    'Figure 6',
    'MNIST CNN training loss over many rounds, C=0.1',
    'the Table 2 CNN runs over 1,000+ rounds',
  ),
  (
    'Figure 8',
    'MNIST CNN, large E (training loss)',
    'the CNN at large E over hundreds of rounds',
  ),
):
  ROWS.append(
    Row('FedAvg', f'{figure}: {text}', '(curves)', None, reason=reason)
  )

# FedAvg Figure 9: test accuracy against minibatch gradient computations
# (B = 50), one run per curve, all evaluated every 10,000 computations.
FIG9_MODEST = ('C0.1_E1', 'C0.1_E5')  # "modest values of C and E".
FIG9_SMOOTH = ('C0.1_E1', 'C0.1_E5', 'C0.1_E10', 'C0.1_E20', 'C1_E5')


def _accuracy_by_computations(record):
  """(minibatch gradient computations, test accuracy) at each evaluation
  after round 0: a round is the run's updates per client (summary.json's
  updates_per_round: a centralized run's block, FedAvg's E·n_k/B) times
  its K (1 for the centralized run)."""
  per_round = float(record.summary['updates_per_round']) * int(
    record.config.get('clients_per_round') or 1
  )
  rounds, accuracy = results.series(record.rows, 'test_accuracy')
  return [(r * per_round, a) for r, a in zip(rounds, accuracy) if r > 0]


def _mean_accuracy(records):
  """The curve's mean test accuracy over its evaluations (%)."""
  return 100 * statistics.fmean(
    a for r in records for _, a in _accuracy_by_computations(r)
  )


def _oscillation(records):
  """Mean absolute change of the test accuracy between consecutive
  evaluations over the second half of the computations (pp)."""
  changes = []
  for record in records:
    curve = _accuracy_by_computations(record)
    half = curve[-1][0] / 2
    changes += [
      abs(b - a) for (x, a), (_, b) in zip(curve, curve[1:]) if x >= half
    ]
  return 100 * statistics.fmean(changes)


# Its seven curves of 300,000 minibatch computations: priced per
# computation ('cifar_fig9', with the NOT_RUN bound below).
_FIG9_CELL = figure_cell(
  'fedavg_fig9_cifar10', 'all', '', '*', 7, 300_000, 'cifar_fig9', 1
)
ROWS.append(
  Row(
    'FedAvg',
    'Figure 9 (App. A): CIFAR-10, B=50, accuracy per minibatch '
    'computation: FedAvg with modest C and E (C=0.1, E=1 or 5) about as '
    'good as SGD (mean accuracy over 300,000 computations within 2 pp, or '
    'above)',
    '"a similar amount of progress per minibatch computation"',
    'fedavg_fig9_cifar10',
    lambda r: ordering_row(
      r,
      'fedavg_fig9_cifar10',
      {c: c for c in ('SGD',) + FIG9_MODEST},
      lambda c: (
        min(_mean_accuracy(c[m]) for m in FIG9_MODEST)
        >= _mean_accuracy(c['SGD']) - PP
      ),
      lambda c: (
        'mean test accuracy (%) '
        + ' / '.join(f'{k} {_mean_accuracy(v):.1f}' for k, v in c.items())
      ),
    ),
    cells=[_FIG9_CELL],
  )
)
ROWS.append(
  Row(
    'FedAvg',
    'Figure 9 (App. A): CIFAR-10, B=50: SGD and FedAvg C=0 '
    'oscillate, averaging more clients (C ≥ 0.1) smooths it out (mean '
    'absolute change between evaluations, second half)',
    '"significant oscillations in accuracy" (SGD, C=0)',
    'fedavg_fig9_cifar10',
    lambda r: ordering_row(
      r,
      'fedavg_fig9_cifar10',
      {c: c for c in ('SGD', 'C0_E5') + FIG9_SMOOTH},
      lambda c: (
        min(_oscillation(c['SGD']), _oscillation(c['C0_E5']))
        > max(_oscillation(c[m]) for m in FIG9_SMOOTH)
      ),
      lambda c: (
        'mean absolute change (pp) '
        + ' / '.join(f'{k} {_oscillation(v):.2f}' for k, v in c.items())
      ),
    ),
    cells=[_FIG9_CELL],
  )
)
ROWS.append(
  Row(
    'FedAvg',
    'Figure 10: large-scale word LSTM, E=1 vs 5',
    '(curves)',
    None,
    reason='its data is not public',
  )
)

# --------------------------------------------------------------- FedProx
FIG1 = (
  ('synthetic', 'Synthetic(1,1)', '1', '__seed-*'),
  ('mnist', 'MNIST', '1', ''),
  ('femnist', 'FEMNIST', '1', ''),
  ('shakespeare', 'Shakespeare', '0.001', ''),
  ('sent140', 'Sent140', '0.01', ''),
)


def _describe_losses(curves):
  return ' / '.join(
    f'{name} {mean_loss(dirs):.3g} ({final_loss(dirs):.3g})'
    for name, dirs in curves.items()
  )


def _fig1_claim(fraction):
  def holds(curves):
    avg, mu0, mu = (mean_loss(curves[k]) for k in ('FedAvg', 'μ=0', 'μ>0'))
    if fraction == '0':  # FedAvg is FedProx μ=0; μ > 0 no worse.
      return abs(avg - mu0) < 1e-6 and mu <= mu0 * 1.02
    return avg > mu0 and mu <= mu0 * 1.02

  return holds


# The Figure 1 panels not run: their plotted rounds (the configs') and rates.
FIG1_ROUNDS = dict(shakespeare=40, sent140=800)
FIG1_RATES = dict(shakespeare='lstm_fedprox', sent140='sent140')
for name, label, mu, seeds in FIG1:
  for fraction in ('0', '0.5', '0.9'):
    command = f'fedprox_fig1_{name}'
    patterns = {
      'FedAvg': f'FedAvg__straggler_fraction-{fraction}{seeds}',
      'μ=0': f'FedProx_mu0__straggler_fraction-{fraction}{seeds}',
      'μ>0': f'FedProx_mu{mu}__straggler_fraction-{fraction}{seeds}',
    }
    claim = (
      'FedAvg = FedProx μ=0; μ>0 converges at least as well'
      if fraction == '0'
      else 'FedAvg (dropping stragglers) worse than '
      'FedProx μ=0 (partial work); μ>0 the most stable'
    )
    cells = (
      [
        figure_cell(
          command,
          f's{fraction}',
          f'--sweep=straggler_fraction={fraction}',
          f'*__straggler_fraction-{fraction}',
          3,
          FIG1_ROUNDS[name],
          FIG1_RATES[name],
          200,
        )
      ]
      if name in FIG1_RATES
      else []
    )
    ROWS.append(
      Row(
        'FedProx',
        f'Figure 1, {label}, {float(fraction):.0%} stragglers: training loss',
        claim,
        command,
        lambda r, c=command, p=patterns, f=fraction: ordering_row(
          r, c, p, _fig1_claim(f), _describe_losses
        ),
        cells=cells,
      )
    )


FIG7_KEY = (
  'FedProx | Figure 7 (App. C.3.2): test accuracy of FedProx '
  '(best μ) over FedAvg at 90% stragglers, final round'
)


def _fedprox_fig7(runs):
  """Test accuracy gain of FedProx (best μ) over FedAvg at 90% stragglers,
  averaged over the datasets run: a dataset's gain from its runs, else the
  one recorded without run folders (UNKEPT: its details, marked †)."""
  unkept = (
    runs.ledger.unkept.get('rows', {})
    .get(FIG7_KEY, {})
    .get('details', {})
    .get('gains', {})
  )
  gains, shown, fresh = {}, [], False
  for name, _, mu, seeds in FIG1:
    command = f'fedprox_fig1_{name}'
    avg = runs.runs(command, f'FedAvg__straggler_fraction-0.9{seeds}')
    prox = runs.runs(command, f'FedProx_mu{mu}__straggler_fraction-0.9{seeds}')
    if avg and prox:
      gains[name] = 100 * (
        statistics.fmean(s['final_test_accuracy'] for s in _summaries(prox))
        - statistics.fmean(s['final_test_accuracy'] for s in _summaries(avg))
      )
      shown.append(f'{gains[name]:+.1f}')
      fresh = True
    elif name in unkept:
      gains[name] = unkept[name]
      shown.append(f'{gains[name]:+.1f}†')
  if not fresh:
    return None  # No run recorded: the row as UNKEPT states it.
  mean = statistics.fmean(gains.values())
  return (
    f'{mean:+.1f} pp on average over {len(gains)} datasets '
    f'({", ".join(shown)})',
    'matches' if abs(mean - 22) <= PP else 'differs',
    dict(gains={k: round(v, 2) for k, v in gains.items()}),
  )


ROWS.append(
  Row(
    'FedProx',
    'Figure 7 (App. C.3.2): test accuracy of FedProx '
    '(best μ) over FedAvg at 90% stragglers, final round',
    '+22 pp on average over the 5 datasets',
    'fedprox_fig1_*',
    _fedprox_fig7,
  )
)


def _describe_variance(curves):
  """Mean gradient variance per curve, with its seeds' min–max."""
  shown = []
  for name, records in curves.items():
    means = [metric_mean([r], 'grad_variance') for r in records]
    shown.append(
      f'{name} {statistics.fmean(means):.3g}'
      + (f' ({min(means):.3g}–{max(means):.3g})' if len(means) > 1 else '')
    )
  return 'mean variance ' + ' / '.join(shown)


def _fig2_variance(runs, patterns, task):
  """(ours, status) of a Figure 2 bottom panel; for Synthetic-IID also the
  same on the generated datasets of data seeds 1 and 2, where run."""
  found = ordering_row(
    runs,
    'fedprox_fig2',
    patterns,
    lambda c: (
      metric_mean(c['μ=1'], 'grad_variance')
      < metric_mean(c['μ=0'], 'grad_variance')
    ),
    _describe_variance,
  )
  if found is None or task != 'synthetic_iid':
    return found
  draws = []
  for seed in ('1', '2'):
    means = [
      runs.runs(
        'fedprox_fig2_iid_data_seeds',
        f'FedProx_mu{mu}__task-synthetic_iid__seed-0__data_seed-{seed}',
      )
      for mu in ('0', '1')
    ]
    if all(means):
      draws.append(
        f'data seed {seed}: μ=0 '
        + ' / μ=1 '.join(
          f'{metric_mean(m, "grad_variance"):.3g}' for m in means
        )
      )
  return ((found[0] + '; ' + ', '.join(draws) if draws else found[0]), found[1])


FIG2 = (
  ('synthetic_iid', 'Synthetic-IID'),
  ('synthetic_0_0', 'Synthetic(0,0)'),
  ('synthetic_0.5_0.5', 'Synthetic(0.5,0.5)'),
  ('synthetic_1_1', 'Synthetic(1,1)'),
)
for task, label in FIG2:
  patterns = {
    'μ=0': f'FedProx_mu0__task-{task}__seed-*',
    'μ=1': f'FedProx_mu1__task-{task}__seed-*',
  }
  iid = task == 'synthetic_iid'
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 2 (top), {label}: training loss, μ=0 vs μ=1',
      'μ>0 slows IID data'
      if iid
      else 'μ=1 converges better than μ=0 (more so as heterogeneity grows)',
      'fedprox_fig2',
      lambda r, p=patterns, iid=iid: ordering_row(
        r,
        'fedprox_fig2',
        p,
        (lambda c: final_loss(c['μ=1']) > final_loss(c['μ=0']))
        if iid
        else (lambda c: final_loss(c['μ=1']) <= final_loss(c['μ=0'])),
        lambda c: (
          'final loss '
          + ' / '.join(f'{k} {final_loss(v):.3g}' for k, v in c.items())
        ),
      ),
    )
  )
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 2 (bottom), {label}: gradient variance, μ=0 vs μ=1',
      'larger μ, smaller dissimilarity; it tracks the loss',
      'fedprox_fig2',
      lambda r, p=patterns, t=task: _fig2_variance(r, p, t),
    )
  )
for label, prefix, start, other in (
  ('Synthetic-IID, μ from 1', 'iid', 'adaptive_from1', ('mu1', 'mu0')),
  ('Synthetic(1,1), μ from 0', 'niid', 'adaptive_from0', ('mu0', 'mu1')),
):
  patterns = {
    'adaptive': f'{prefix}_{start}__seed-*',
    'fixed start': f'{prefix}_{other[0]}__seed-*',
    'fixed other': f'{prefix}_{other[1]}__seed-*',
  }
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 3, {label}: adaptive μ (±0.1)',
      'adaptive μ beats the (unfavourable) starting μ held fixed',
      'fedprox_fig3',
      lambda r, p=patterns: ordering_row(
        r,
        'fedprox_fig3',
        p,
        lambda c: final_loss(c['adaptive']) < final_loss(c['fixed start']),
        lambda c: (
          'final loss '
          + ' / '.join(f'{k} {final_loss(v):.3g}' for k, v in c.items())
        ),
      ),
    )
  )
# App. C's figures. A "little difference" between two curves (Figure 5):
# mean training loss within 10% of each other (our tolerance, fixed before
# any run).
LITTLE = 0.10
for fraction in ('0', '0.5', '0.9'):
  patterns = {
    name: f'{prefix}__straggler_fraction-{fraction}__seed-*'
    for name, prefix in (
      ('FedAvg', 'FedAvg'),
      ('μ=0', 'FedProx_mu0'),
      ('μ=1', 'FedProx_mu1'),
    )
  }
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 5 (App. C.3.1), Synthetic-IID, '
      f'{float(fraction):.0%} stragglers: training loss',
      'FedAvg robust: '
      'keeping the stragglers\' partial work "对收敛性影响不大" (FedAvg\'s mean '
      "loss within 10% of FedProx μ=0's)",
      'fedprox_fig5',
      lambda r, p=patterns: ordering_row(
        r,
        'fedprox_fig5',
        p,
        lambda c: (
          abs(mean_loss(c['FedAvg']) - mean_loss(c['μ=0']))
          <= LITTLE * mean_loss(c['μ=0'])
        ),
        _describe_losses,
      ),
      cells=[
        figure_cell(
          'fedprox_fig5',
          f's{fraction}',
          f'--sweep=straggler_fraction={fraction}',
          f'*__straggler_fraction-{fraction}__seed-*',
          9,
          200,
          'synthetic',
          200,
        )
      ],
    )
  )


def _loss_where(records, metric):
  """Mean training loss over the rounds where `metric` was measured."""
  means = []
  for record in records:
    rounds = set(results.series(record.rows, metric)[0])
    means.append(
      statistics.fmean(v for r, v in zip(*_loss_curve(record)) if r in rounds)
    )
  return statistics.fmean(means)


def _fig8_holds(curves):
  """The curve with the lower loss (over the measured rounds) has the
  lower mean dissimilarity."""
  (_, a), (_, b) = curves.items()
  variance = metric_mean(b, 'grad_variance') - metric_mean(a, 'grad_variance')
  loss = _loss_where(b, 'grad_variance') - _loss_where(a, 'grad_variance')
  return variance * loss > 0


for name, label, mu, seeds in FIG1[:3]:
  command = f'fedprox_fig8_{name}'
  patterns = {
    f'μ={m}': f'FedProx_mu{m}__straggler_fraction-0{seeds}' for m in ('0', mu)
  }
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 8 (App. C.3.2), {label}, no stragglers: '
      f'dissimilarity, μ=0 vs μ={mu}',
      'the dissimilarity agrees with the '
      'loss ("不相似性特征与实际性能（损失）一致"): the lower-loss curve has the '
      'lower mean variance',
      command,
      lambda r, c=command, p=patterns: ordering_row(
        r,
        c,
        p,
        _fig8_holds,
        lambda x: (
          _describe_variance(x) + '; mean '
          'loss at those rounds '
          + ' / '.join(
            f'{k} {_loss_where(v, "grad_variance"):.3g}' for k, v in x.items()
          )
        ),
      ),
    )
  )
ROWS.append(
  Row(
    'FedProx',
    'Figure 8 (App. C.3.2), Shakespeare and Sent140: dissimilarity',
    '(curves)',
    None,
    reason='not configured: their Figure 1 runs did not fit here '
    '(≤ 6 and ≤ 18 CPU-h), and the dissimilarity adds to them',
  )
)


def seed_differences(runs, command, patterns, curves, value, label):
  """{'seed_differences': (label, [value(a) − value(b) per seed])} of
  the curves (a, b) = `curves`, paired by seed (names …__seed-S), where
  two or more seeds have both; the claim holds where it is > 0."""
  by_seed = {}
  for curve in curves:
    for record in runs.runs(command, patterns[curve]):
      seed = record.name.rsplit('__seed-', 1)[-1]
      by_seed.setdefault(seed, {})[curve] = value([record])
  found = [
    v[curves[0]] - v[curves[1]]
    for _, v in sorted(by_seed.items())
    if len(v) == 2
  ]
  return (
    {'seed_differences': (label, [round(d, 3) for d in found])}
    if (len(found) > 1)
    else {}
  )


def _final_accuracy(records):
  return 100 * statistics.fmean(
    _summarize(r)['final_test_accuracy'] for r in records
  )


for name, label, _, seeds in FIG1[:3]:
  command = f'fedprox_fig9_{name}'
  for fraction in ('0.5', '0.9'):
    patterns = {
      name_: f'{prefix}__straggler_fraction-{fraction}{seeds}'
      for name_, prefix in (
        ('FedAvg', 'FedAvg'),
        ('μ=0', 'FedProx_mu0'),
        ('μ>0', 'FedProx_mu1'),
      )
    }
    where = f'{label}, E = 1, {float(fraction):.0%} stragglers'
    cells = (
      [
        figure_cell(
          command,
          f's{fraction}',
          f'--sweep=straggler_fraction={fraction}',
          f'*__straggler_fraction-{fraction}__seed-*',
          9,
          200,
          'synthetic',
          10,
        )
      ]
      if name == 'synthetic'
      else []
    )
    ROWS.append(
      Row(
        'FedProx',
        f'Figure 9 (App. C.3.2), {where}: training loss',
        'partial work (FedProx μ=0) beats dropping stragglers (FedAvg): '
        '"仍优于抛弃落后的节点" (mean loss)',
        command,
        lambda r, c=command, p=patterns: ordering_row(
          r,
          c,
          p,
          lambda x: mean_loss(x['FedAvg']) > mean_loss(x['μ=0']),
          _describe_losses,
        ),
        cells=cells,
        extra=lambda r, c=command, p=patterns: seed_differences(
          r,
          c,
          p,
          ('FedAvg', 'μ=0'),
          mean_loss,
          "FedAvg's mean loss − FedProx μ=0's",
        ),
      )
    )
    ROWS.append(
      Row(
        'FedProx',
        f'Figure 10 (App. C.3.2), {where}: test accuracy',
        'the same in test accuracy (final round)',
        command,
        lambda r, c=command, p=patterns: ordering_row(
          r,
          c,
          p,
          lambda x: _final_accuracy(x['μ=0']) > _final_accuracy(x['FedAvg']),
          lambda x: (
            'final test accuracy (%) '
            + ' / '.join(f'{k} {_final_accuracy(v):.1f}' for k, v in x.items())
          ),
        ),
        cells=cells,
        extra=lambda r, c=command, p=patterns: seed_differences(
          r,
          c,
          p,
          ('μ=0', 'FedAvg'),
          _final_accuracy,
          "FedProx μ=0's final test accuracy − FedAvg's (pp)",
        ),
      )
    )
ROWS.append(
  Row(
    'FedProx',
    'Figures 9-10 (App. C.3.2), Shakespeare and Sent140 at E = 1',
    '(curves)',
    None,
    reason='not configured: their Figure 1 runs (E = 20) did not '
    'fit here (≤ 6 and ≤ 18 CPU-h)',
  )
)

for task, label in FIG2[1:3]:
  patterns = {
    'adaptive': f'adaptive_from0__task-{task}__seed-*',
    'fixed start': f'mu0__task-{task}__seed-*',
    'fixed other': f'mu1__task-{task}__seed-*',
  }
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 11 (App. C.3.3), {label}, μ from 0: adaptive μ '
      "(±0.1); its IID and (1,1) panels are Figure 3's rows",
      '"这一启发式方法能够保证性能竞争性": adaptive μ beats the (unfavourable) '
      'starting μ held fixed',
      'fedprox_fig11',
      lambda r, p=patterns: ordering_row(
        r,
        'fedprox_fig11',
        p,
        lambda c: final_loss(c['adaptive']) < final_loss(c['fixed start']),
        lambda c: (
          'final loss '
          + ' / '.join(f'{k} {final_loss(v):.3g}' for k, v in c.items())
        ),
      ),
    )
  )


def loss_rises(records):
  """How unstable a loss curve is: the sum of its rises between
  consecutive rounds, seeds averaged."""
  return statistics.fmean(
    sum(max(0.0, b - a) for a, b in zip(losses, losses[1:]))
    for losses in (_loss_curve(r)[1] for r in records)
  )


FIG12 = tuple(
  f'{scheme}_mu{mu}'
  for scheme in ('uniform', 'proportional')
  for mu in ('0', '1')
)
for task, label in FIG2:
  patterns = {name: f'{name}__task-{task}__seed-*' for name in FIG12}
  cells = [
    figure_cell(
      'fedprox_fig12',
      task,
      f'--sweep=task={task}',
      f'*__task-{task}__seed-*',
      12,
      200,
      'synthetic',
      200,
    )
  ]
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 12 (App. C.3.4), {label}: sampling ∝ n_k with a '
      'simple mean vs uniform sampling with the n_k-weighted mean',
      '∝ n_k with a simple mean "略优于" (slightly better): lower mean '
      'training loss at μ=0 and at μ=1',
      'fedprox_fig12',
      lambda r, p=patterns: ordering_row(
        r,
        'fedprox_fig12',
        p,
        lambda c: all(
          mean_loss(c[f'proportional_mu{m}']) < mean_loss(c[f'uniform_mu{m}'])
          for m in '01'
        ),
        lambda c: 'mean (final) loss ' + _describe_losses(c),
      ),
      cells=cells,
    )
  )
  ROWS.append(
    Row(
      'FedProx',
      f'Figure 12 (App. C.3.4), {label}: μ=1 vs μ=0 under either scheme',
      'μ=1 "更稳定" (more stable) than μ=0 under both schemes: '
      'smaller loss rises between rounds',
      'fedprox_fig12',
      lambda r, p=patterns: ordering_row(
        r,
        'fedprox_fig12',
        p,
        lambda c: all(
          loss_rises(c[f'{s}_mu1']) < loss_rises(c[f'{s}_mu0'])
          for s in ('uniform', 'proportional')
        ),
        lambda c: (
          'sum of loss rises '
          + ' / '.join(f'{k} {loss_rises(v):.3g}' for k, v in c.items())
        ),
      ),
      cells=cells,
    )
  )

# ---------------------------------------------------------------- FedISGD
TABLE3 = (
  ('synthetic_0_0', 'Synthetic_0_0', (79.6, 83.6, 85.0)),
  ('synthetic_0.5_0.5', 'Synthetic_0.5_0.5', (79.3, 81.7, 84.5)),
  ('synthetic_1_1', 'Synthetic_1_1', (69.7, 75.6, 76.3)),
)
ALGOS = ('FedAvg', 'FedProx', 'FedISGD')
for task, label, values in TABLE3:
  for algo, paper in zip(ALGOS, values):
    ROWS.append(
      Row(
        'FedISGD',
        f'Table 3, {label}, {algo}: mean test accuracy over the '
        'last half of the rounds (%)',
        f'{paper}',
        'fedisgd_table3',
        lambda r, a=algo, t=task, v=paper: accuracy_row(
          r,
          'fedisgd_table3',
          f'{a}__task-{t}__seed-*',
          'last_half_test_accuracy',
          v,
        ),
        extra=lambda r, a=algo, t=task: data_seed_values(
          r, 'fedisgd_table3_data_seeds', f'{a}__task-{t}__seed-0__data_seed-*'
        ),
      )
    )
TABLE4 = (
  (
    'synthetic',
    'Synthetic_1_1 (5 classes per device)',
    (72.3, 76.1, 77.4),
    '__seed-*',
  ),
  ('mnist', 'MNIST', (76.7, 81.4, 86.4), '__seed-*'),
  ('emnist', 'EMNIST', (50.4, 68.1, 68.3), ''),
  ('sent140', 'Sent140', (57.0, 69.4, 69.5), ''),
)
for name, label, values, seeds in TABLE4:
  for algo, paper in zip(ALGOS, values):
    command = f'fedisgd_table4_{name}'
    ROWS.append(
      Row(
        'FedISGD',
        f'Table 4, {label}, {algo}, 90% stragglers: mean test '
        'accuracy over the last half (%)',
        f'{paper}',
        command,
        lambda r, c=command, a=algo, s=seeds, v=paper: accuracy_row(
          r, c, f'{a}{s}', 'last_half_test_accuracy', v
        ),
        extra=lambda r, c=command, a=algo: data_seed_values(
          r, f'{c}_data_seeds', f'{a}__seed-0__data_seed-*'
        ),
      )
    )


def _catch_up(curves):
  """Rounds at which FedISGD's mean loss first reaches FedAvg's and
  FedProx's final losses (the paper: about 30 and 40)."""
  rounds, isgd = _mean_curve(curves['FedISGD'])
  caught = []
  for other in ('FedAvg', 'FedProx'):
    final = _mean_curve(curves[other])[1][-1]
    caught.append(next((r for r, v in zip(rounds, isgd) if v <= final), None))
  return caught


for task, label, _ in TABLE3:
  patterns = {a: f'{a}__task-{task}__seed-*' for a in ALGOS}
  ROWS.append(
    Row(
      'FedISGD',
      f'Figure 2 (loss), {label}',
      "FedISGD reaches FedAvg's final loss at ~30 rounds, FedProx's at ~40",
      'fedisgd_table3',
      lambda r, p=patterns: ordering_row(
        r,
        'fedisgd_table3',
        p,
        lambda c: None not in _catch_up(c),
        lambda c: "FedAvg's at {}, FedProx's at {}".format(
          *('never' if x is None else f'round {x}' for x in _catch_up(c))
        ),
      ),
    )
  )
  ROWS.append(
    Row(
      'FedISGD',
      f'Figure 2 (VLG), {label}',
      "FedISGD's VLG the lowest (the most stable)",
      'fedisgd_table3',
      lambda r, p=patterns: ordering_row(
        r,
        'fedisgd_table3',
        p,
        lambda c: (
          metric_mean(c['FedISGD'], 'vlg')
          < min(
            metric_mean(c[a], 'update_spread') for a in ('FedAvg', 'FedProx')
          )
        ),
        lambda c: (
          'mean VLG '
          + ' / '.join(
            f'{a} {metric_mean(c[a], "vlg" if a == "FedISGD" else "update_spread"):.3g}'
            for a in ALGOS
          )
          + ' (λ = 1)'
        ),
      ),
    )
  )
for name, label, _, seeds in TABLE4:
  for fraction in ('0', '0.5', '0.9'):
    if fraction == '0.9':
      command, suffix = f'fedisgd_table4_{name}', seeds
    else:
      command = f'fedisgd_fig3_{name}'
      suffix = f'{seeds}__straggler_fraction-{fraction}'
    patterns = {a: f'{a}{suffix}' for a in ALGOS}
    cells = (
      [
        figure_cell(
          command,
          f's{fraction}',
          f'--sweep=straggler_fraction={fraction}',
          f'*{suffix}',
          3,
          800,
          'sent140',
          200,
        )
      ]
      if (name == 'sent140' and fraction != '0.9')
      else []
    )
    ROWS.append(
      Row(
        'FedISGD',
        f'Figure 3, {label}, {float(fraction):.0%} stragglers: training loss',
        'FedISGD converges clearly faster than FedAvg and FedProx',
        command,
        lambda r, c=command, p=patterns: ordering_row(
          r,
          c,
          p,
          lambda x: (
            mean_loss(x['FedISGD'])
            < min(mean_loss(x['FedAvg']), mean_loss(x['FedProx']))
          ),
          lambda x: 'mean (final) loss ' + _describe_losses(x),
        ),
        cells=cells,
      )
    )

# ------------------------------------------------------ dataset statistics


def dataset_row(task, paper_devices, paper_samples, data_dir, options):
  """(ours, status): devices and samples of one of our tasks, loaded with
  the task options its configs use."""
  import tasks
  from tff_algos import runtime

  runtime.install()
  try:
    task = tasks.load_task(
      task,
      data_dir=data_dir,
      train_fraction=0.8
      if task in ('mnist_powerlaw', 'femnist_fedprox', 'sent140')
      else None,
      **options,
    )
  except tasks.DataError:
    return None
  sizes = [
    len(a['y'])
    for split in (task.train, task.test)
    for a in tasks.client_arrays(split)
  ]
  devices, samples = len(task.client_ids), sum(sizes)
  ours = f'{devices} devices, {samples:,} samples'
  same = (
    devices == paper_devices
    and abs(samples - paper_samples) <= 0.02 * paper_samples
  )
  return ours, 'matches' if same else 'differs: our copy of the data'


for paper, table, task, label, devices, samples, options in (
  ('FedProx', 'Table 1', 'mnist_powerlaw', 'MNIST', 1000, 69035, {}),
  ('FedProx', 'Table 1', 'femnist_fedprox', 'FEMNIST', 200, 18345, {}),
  (
    'FedProx',
    'Table 1',
    'shakespeare_roles',
    'Shakespeare',
    143,
    517106,
    dict(num_clients=143),
  ),  # As configs/fedprox/fig1_shakespeare.flags.
  ('FedProx', 'Table 1', 'sent140', 'Sent140', 772, 40783, {}),
  ('FedISGD', 'Table 2', 'sent140', 'Sent140', 772, 40783, {}),
  ('FedISGD', 'Table 2', 'mnist_powerlaw', 'MNIST', 1000, 69035, {}),
  ('FedISGD', 'Table 2', 'femnist_fedprox', 'EMNIST', 200, 18345, {}),
):
  ROWS.append(
    Row(
      paper,
      f'{table}: {label} data (devices, samples)',
      f'{devices} devices, {samples:,} samples',
      f'task {task}' + ''.join(f' --{k}={v}' for k, v in options.items()),
      lambda r, t=task, d=devices, s=samples, o=options: dataset_row(
        t, d, s, r.data_dir, o
      ),
    )
  )

# Not run here: an upper bound on the CPU hours the command would take on
# this 2-core machine, every run going to its round cap (with
# --stop_at_target most stop far sooner). Measured 2026-11-23 with
# probes: the command's own sweep cut to one run of 3 rounds
# (`--only=VARIANT --sweep=FLAG=VALUE --rounds=3`), its median seconds per
# round and per evaluation scaled to every run of the command's plan by
# K·E (local work) and by rounds / eval_every, times the probe's CPU / wall
# ratio; the machine was shared with two other runs, so the seconds per
# round are high. Sent140 from its measured Table 4 runs. Command id →
# (CPU hours, how).
_2NN = (
  '25 runs to 4,000 rounds; probe 1.18 s/round at K = 10, E = 1, '
  'B = 10, 1.15 s per evaluation'
)
NOT_RUN = {
  'fedavg_table1_2nn_b10_iid': (65, _2NN),
  'fedavg_table1_2nn_b10_noniid': (65, _2NN),
  'fedavg_table1_2nn_binf_iid': (
    67,
    '25 runs to 5,000 rounds; probe 1.02 s/round at K = 10, B = ∞',
  ),
  'fedavg_table1_2nn_binf_noniid': (
    67,
    '25 runs to 5,000 rounds; probe 1.02 s/round at K = 10, B = ∞',
  ),
  'fedavg_table1_cnn': (
    6091,
    '100 runs to 1,500 rounds, K from 1 to 100; '
    'the CNN probe of fedavg_table2_cnn, 50.5 s/round '
    'at K = 10, E = 5',
  ),
  'fedavg_table2_cnn_iid': (
    101,
    '10 runs to 1,500 rounds; probe 50.5 s/round at K = 10, E = 5, B = 10',
  ),
  'fedavg_table2_cnn': (
    2638,
    '90 runs to 1,500 rounds; probe 50.5 s/round at K = 10, E = 5, B = 10',
  ),
  'fedavg_table2_shakespeare': (
    12038,
    '60 runs to 4,000 rounds; probe 82 s/round at K = 119, E = 1, B = 10',
  ),
  'fedavg_table3_cifar10': (
    177,
    '10 runs to 4,000 rounds; probe 25.6 '
    's/round at K = 10, E = 5, B = 50, 29.5 s per '
    'evaluation',
  ),
  'fedavg_table4_2nn': (
    483,
    '90 runs to 3,000 rounds, E up to 20; the 2NN probe, 1.18 s/round at E = 1',
  ),
  'fedprox_fig1_shakespeare': (
    2,
    '9 runs of 40 rounds; probe 12.05 s/round at K = 10, E = 20',
  ),
  'fedprox_fig1_sent140': (
    18,
    '9 runs of 800 rounds at the 8.85 s/round '
    'FedProx took in fedisgd_table4_sent140',
  ),
  'fedisgd_fig3_sent140': (12, '6 runs of 800 rounds at 8.85 s/round'),
}


# Measured 2026-11-26 (the machine shared with other runs): one 3-round run
# of the command's own flags (`--only=VARIANT --rounds=3`, the
# dissimilarity every round, the loss and accuracy every round), its median
# seconds per round after round 0 (summary.json) times the probe's CPU /
# wall ratio (/usr/bin/time: user + sys, its TFF worker included), for
# every run at its round cap, plus the probe's CPU once (start-up).
def _from_probe(runs, rounds, seconds, cpu, wall, probe):
  return (
    (runs * rounds * seconds * cpu / wall + cpu) / 3600,
    f'{runs} runs of {rounds:,} rounds; probe {seconds:.2f} s/round '
    f'({probe}), {cpu:.1f} CPU-s / {wall:.1f} s wall for 3 rounds',
  )


# fedprox_fig12's probe (`--only=proportional_mu1 --sweep=task=synthetic_1_1
# --sweep=seed=0`), the costliest of the synthetic E = 20 runs; it bounds
# the other synthetic commands (at E = 1 too).
_SYNTHETIC = (
  0.4755,
  8.05,
  8.85,
  'fedprox_fig12 on Synthetic(1,1), '
  'K = 10, E = 20, the dissimilarity every round',
)
# fedprox_fig8_*'s (`--only=FedProx_mu1`): E = 20; they bound E = 1 too.
_MNIST = (
  0.6485,
  10.68,
  12.24,
  'fedprox_fig8_mnist, K = 10, E = 20, the '
  'dissimilarity over 1,000 devices every round',
)
_FEMNIST = (
  0.3396,
  8.85,
  9.89,
  'fedprox_fig8_femnist, K = 10, E = 20, the dissimilarity every round',
)
NOT_RUN.update(
  {
    'fedprox_fig5': _from_probe(27, 200, *_SYNTHETIC),
    'fedprox_fig8_synthetic': _from_probe(6, 200, *_SYNTHETIC),
    'fedprox_fig8_mnist': _from_probe(2, 100, *_MNIST),
    'fedprox_fig8_femnist': _from_probe(2, 200, *_FEMNIST),
    'fedprox_fig9_synthetic': _from_probe(27, 200, *_SYNTHETIC),
    'fedprox_fig9_mnist': _from_probe(9, 100, *_MNIST),
    'fedprox_fig9_femnist': _from_probe(9, 200, *_FEMNIST),
    'fedprox_fig11': _from_probe(18, 200, *_SYNTHETIC),
    'fedprox_fig12': _from_probe(48, 200, *_SYNTHETIC),
  }
)
# CIFAR-10: a 3-round probe of Figure 9's C = 0, E = 5 curve (its flags
# with --rounds=3 --eval_every=3: 2,500 examples a round, B = 50) took
# 74.5 CPU-s / 86.7 s wall; its median round 4.76 s, the evaluation (50,000
# training and 10,000 test images) 31.0 s (the rounds' 45.2 s less three
# medians): 1.64 CPU-ms per training example and 26.6 CPU-s per evaluation
# at its 0.86 CPU / wall. Centralized SGD on CIFAR-10 (a block is sent only
# the examples it reads: the pooled 50,000 images are over TFF's 100 MB
# limit on a dataset sent to the worker), probed with --algo=centralized
# --batch_size=100 --hparam=updates_per_round=50 --client_lr=0.1
# --rounds=3 --eval_every=3: 88.8 CPU-s / 92.9 s wall for 15,000 examples
# and two evaluations, within the same arithmetic (B = 100 costs at most
# B = 50's per example).
_CIFAR_EXAMPLE_MS, _CIFAR_EVALUATION_S = 4.76 * 0.86 / 2.5, 26.6
PROBED['cifar_fig9'] = Rate(
  50 * _CIFAR_EXAMPLE_MS / 1000 + 31 * _CIFAR_EVALUATION_S / 300_000,
  1,
  0,
  'the probe above: a minibatch of B = 50 at 1.64 CPU-ms per example, '
  "and a curve's 31 evaluations of 26.6 CPU-s spread over its 300,000 "
  'minibatches',
)
PROBED['cifar_sgd'] = Rate(
  500 * 100 * _CIFAR_EXAMPLE_MS / 1000,
  1,
  _CIFAR_EVALUATION_S,
  'the probe above: 1.64 CPU-ms per example (a round: 500 updates of '
  'B = 100), 26.6 CPU-s per evaluation',
)
# From a run of the same cost: fedisgd_table4_synthetic's 9 runs (the same
# flags on data seed 0) took 0.08 CPU-h.
NOT_RUN['fedisgd_table4_synthetic_data_seeds'] = (
  0.08,
  '9 runs of 200 rounds, as the 9 of fedisgd_table4_synthetic, '
  'which took 0.08 CPU-h',
)
NOT_RUN.update(
  {
    'fedavg_table3_cifar10_sgd': (
      (
        5 * 400 * 50_000 * _CIFAR_EXAMPLE_MS / 1000
        + 5 * 201 * _CIFAR_EVALUATION_S
        + 74.5
      )
      / 3600,
      '5 runs to 400 rounds of 500 updates of B = 100 (10^8 examples), '
      '201 evaluations each; probe 1.64 CPU-ms per example and 26.6 CPU-s '
      "per evaluation (Figure 9's C = 0 curve)",
    ),
    'fedavg_fig9_cifar10': (
      (
        7 * 300_000 * 50 * _CIFAR_EXAMPLE_MS / 1000
        + 7 * 31 * _CIFAR_EVALUATION_S
        + 74.5
      )
      / 3600,
      '7 curves of 300,000 minibatches of B = 50 (1.05 × 10^8 examples), 31 '
      'evaluations each; probe 1.64 CPU-ms per example and 26.6 CPU-s per '
      'evaluation (its C = 0 curve)',
    ),
  }
)


# What a command not run would take elsewhere: command → (examples through
# the model, forward and backward, with every run at its round cap: Σ
# rounds × K × E × n_k, n_k = 600 (MNIST) or 500 (CIFAR-10); the CPU cost
# per example measured here, ms; where that was measured). For the text
# tasks: rounds at the caps × the measured seconds per round instead.
_2NN_EXAMPLE = (
  0.094,
  'a B = 10 round of 20 clients × 600 examples: '
  'median 1.13 s, TFF overhead included (probe 2026-11-24)',
)
_CNN_EXAMPLE = (1.1, '11.0–11.2 CPU-ms per B = 10 step (docs/PERFORMANCE.md)')
ELSEWHERE = {
  'fedavg_table1_2nn_b10_noniid': (2.17e9, *_2NN_EXAMPLE),
  'fedavg_table1_2nn_binf_iid': (2.72e9, *_2NN_EXAMPLE),
  'fedavg_table1_2nn_binf_noniid': (2.72e9, *_2NN_EXAMPLE),
  'fedavg_table1_cnn': (1.63e10, *_CNN_EXAMPLE),
  'fedavg_table2_cnn_iid': (2.7e8, *_CNN_EXAMPLE),
  'fedavg_table2_cnn': (7.02e9, *_CNN_EXAMPLE),
  'fedavg_table3_cifar10': (
    6e8,
    1.0,
    '25.6 s per K = 10, E = 5, B = 50 round of 25,000 examples (earlier probe)',
  ),
  'fedavg_table4_2nn': (1.67e10, *_2NN_EXAMPLE),
  'fedavg_table2_shakespeare': (
    None,
    None,
    '240,000 rounds at the caps × '
    '82 s per K = 119 round (probe); a B = 10 '
    'step of the char-LSTM 140–170 CPU-ms '
    '(docs/PERFORMANCE.md)',
  ),
  'fedprox_fig1_shakespeare': (
    None,
    None,
    '360 rounds × 12.05 s per K = 10, E = 20 round (probe)',
  ),
  'fedprox_fig1_sent140': (None, None, '7,200 rounds × 8.85 s per round'),
  'fedisgd_fig3_sent140': (None, None, '4,800 rounds × 8.85 s per round'),
  'fedavg_table3_cifar10_sgd': (
    1e8,
    1.64,
    'a K = 1, E = 5, B = 50 round '
    'of 2,500 examples: median 4.76 s × 0.86 '
    'CPU / wall (probe 2026-11-26)',
  ),
  'fedavg_fig9_cifar10': (
    1.05e8,
    1.64,
    'a K = 1, E = 5, B = 50 round of '
    '2,500 examples: median 4.76 s × 0.86 CPU / wall '
    '(probe 2026-11-26)',
  ),
}


def hours_text(hours):
  """A bound's CPU hours as the tables show them: whole hours from 10 on,
  else two significant digits (1.2, 0.15: not 1 or 0)."""
  return f'{hours:,.0f}' if hours >= 10 else f'{hours:.2g}'


def elsewhere(name):
  """The commands table's 'what it would take elsewhere' of a command."""
  if name not in ELSEWHERE:
    return ''
  examples, ms, how = ELSEWHERE[name]
  if examples is None:
    return how
  return (
    f'{examples:.3g} examples at the caps × {ms:g} CPU-ms each here '
    f'({how}) = {examples * ms / 3.6e6:,.0f} CPU-h of model '
    'arithmetic; GPU: not measured'
  )


# ---------------------------------------------------------------- reasons
# Why a row differs: one or more of these, each with its evidence (a number
# we measured, or a quoted fact of a paper or of our data); a "differs"
# row with none is "unexplained" (tests/commands/test_scoreboard.py checks
# every "differs" row carries reasons from this list).
REASONS = (
  'η grid',
  'partial data',
  'paper setting unstated',
  'seed spread',
  'cross-checked',
  'unexplained',
)

_FEMNIST = (
  'partial FEMNIST: 200 devices, 2,834 samples of a–j against the '
  'paper\'s 18,345 (../shared/data/README.md: "Partial sample, not '
  'full FEMNIST")'
)
_SENT140 = (
  'partial Sent140: 906 users, 2,512 tweets (one LEAF test-split '
  "sample) against the paper's 772 devices, 40,783 samples"
)
_FEDISGD_SETTINGS = (
  'the paper gives no λ ("约束项统一设置成相同的值", §3.3) and no period for '
  'η_g\'s decay ("按固定轮数衰减", eq. 6); ours λ = 1, η_g halved after T/2, '
  'marked as ours in configs/fedisgd/*.flags'
)
# Reasons resting on a quoted fact: row key → [(reason, evidence)].
QUOTED = {}
for _algo in ('FedAvg', 'FedProx', 'FedISGD'):
  QUOTED[
    f'FedISGD | Table 4, EMNIST, {_algo}, 90% stragglers: mean test '
    'accuracy over the last half (%)'
  ] = [('partial data', _FEMNIST)]
  QUOTED[
    f'FedISGD | Table 4, Sent140, {_algo}, 90% stragglers: mean test '
    'accuracy over the last half (%)'
  ] = [('partial data', _SENT140)]
for _fraction in ('0%', '50%', '90%'):
  QUOTED[
    f'FedISGD | Figure 3, EMNIST, {_fraction} stragglers: training loss'
  ] = [('partial data', _FEMNIST)]
  QUOTED[
    f'FedISGD | Figure 3, Synthetic_1_1 (5 classes per device), '
    f'{_fraction} stragglers: training loss'
  ] = [('paper setting unstated', _FEDISGD_SETTINGS)]
QUOTED['FedISGD | Figure 3, MNIST, 90% stragglers: training loss'] = [
  ('paper setting unstated', _FEDISGD_SETTINGS)
]
for _task in ('Synthetic_0_0', 'Synthetic_0.5_0.5', 'Synthetic_1_1'):
  QUOTED[f'FedISGD | Figure 2 (loss), {_task}'] = [
    ('paper setting unstated', _FEDISGD_SETTINGS)
  ]
  QUOTED[
    f'FedISGD | Table 3, {_task}, FedISGD: mean test accuracy over the '
    'last half of the rounds (%)'
  ] = [('paper setting unstated', _FEDISGD_SETTINGS)]
for _table, _label, _evidence in (
  ('FedProx | Table 1', 'FEMNIST', _FEMNIST),
  ('FedISGD | Table 2', 'EMNIST', _FEMNIST),
  ('FedProx | Table 1', 'Sent140', _SENT140),
  ('FedISGD | Table 2', 'Sent140', _SENT140),
  (
    'FedProx | Table 1',
    'Shakespeare',
    'a seeded 143 of our 1,191 roles '
    '(--num_clients=143, configs/fedprox/fig1_shakespeare.flags): 5,076 '
    "samples against the paper's 517,106",
  ),
):
  QUOTED[f'{_table}: {_label} data (devices, samples)'] = [
    ('partial data', _evidence)
  ]
QUOTED[
  'FedProx | Figure 7 (App. C.3.2): test accuracy of FedProx (best μ) '
  'over FedAvg at 90% stragglers, final round'
] = [
  (
    'partial data',
    "our average is over 4 of the paper's 5 "
    'datasets (Sent140 not run); ' + _FEMNIST,
  )
]

# FedProx Figure 12 names no dataset: "在使用两种不同设备采样方案的合成数据集上"
# (App. C.3.4); configs/fedprox/fig12_sampling.flags reads it as Figure 2's
# four, Synthetic-IID among them. Measured on Synthetic-IID (seeds 0-2):
_FIG12_DATASETS = (
  'the paper names no dataset for Figure 12 ("合成数据集", App. C.3.4, '
  "in our Chinese translation); decided: Figure 2's four, because App. "
  'C.3 uses the words for exactly those four around it (Figure 6: '
  '"图2所示的实验相关的四个合成数据集", Figure 11: "四个合成数据集上") and '
  'Figure 12 plots what Figure 2 plots (loss, accuracy, dissimilarity); '
  'all four run (configs/fedprox/fig12_sampling.flags), and the claim '
  'holds on the three heterogeneous ones (rows 164-169), not on '
  'Synthetic-IID'
)
QUOTED[
  'FedProx | Figure 12 (App. C.3.4), Synthetic-IID: sampling ∝ n_k with '
  'a simple mean vs uniform sampling with the n_k-weighted mean'
] = [
  (
    'paper setting unstated',
    _FIG12_DATASETS + '; measured there: '
    'the averaged model holds fewer local steps under sampling ∝ n_k '
    'with the simple mean: tools/fig12_local_steps.py (which redraws '
    "each round's clients and reproduces the logged local steps in "
    '200 of 200 rounds of every run) gives 568, 566, 576 local steps '
    'behind the averaged model per round in seeds 0-2 against 706, '
    '688, 666 with uniform sampling and the n_k-weighted mean '
    '(0.80-0.86×: drawn without replacement, the two largest clients, '
    '16.6% and 14.7% of the examples, weigh at most 1/K = 10% each); '
    "on IID data every client's steps head for the same optimum, and "
    "the proportional scheme's mean loss is higher by 0.042, 0.045, "
    '0.005 at μ = 0 and by 0.006, 0.007, 0.001 at μ = 1, whose '
    'proximal term holds the local models near the global one',
  )
]
QUOTED[
  'FedProx | Figure 12 (App. C.3.4), Synthetic-IID: μ=1 vs μ=0 under '
  'either scheme'
] = [
  (
    'paper setting unstated',
    _FIG12_DATASETS + '; on Synthetic-IID '
    'no curve ever rises (the sum of rises is 0 in all 12 runs, the '
    "row's numbers): there is no instability for μ = 1 to reduce, and "
    '0 < 0 fails',
  )
]

# What was checked of a row that stays "unexplained" (its reason's text):
# row key → the checks and what they measured.
CHECKED = {
  'FedProx | Figure 2 (bottom), Synthetic-IID: gradient variance, μ=0 vs μ=1': (
    'checked, and none explains it: the seeds (3: μ=1 < μ=0 in 0 of 40 '
    'measured rounds in every seed) and the data draw (two more '
    'generated datasets, command fedprox_fig2_iid_data_seeds: the same '
    'ordering, in ours), so neither the seed spread nor the draw; the '
    "authors' own definition (litian96/FedProx "
    'flearn/trainers/fedprox.py: ‖∇f − ∇F_k‖² averaged unweighted over '
    'all 30 devices, every round) gives the same ordering at our '
    'round-200 models (μ=0 0.012 / μ=1 0.022). On IID data the variance '
    'follows the loss: r(variance, train_loss) 0.994–0.996 per run, and '
    "at equal loss μ=1's variance is 0.98–1.00× μ=0's, while μ=1's "
    'loss is higher in all 200 rounds (the row above, "μ>0 slows IID '
    'data", matches). So ours agrees with the paper\'s "差异度量与训练损失一'
    '致" (§5.3.3) and the authors\' "large gradient variance tends to '
    'correspond to worse convergence" (litian96/FedProx#12), and '
    'contradicts only the general "增加μ会导致…差异减小", which on IID data '
    'cannot hold alongside both'
  ),
}


def crosscheck_results(path=CROSSCHECK):
  """The numpy reference's results (tools/crosscheck/results.json)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return json.load(f)


def _accuracy_of(details, ours):
  """(mean, std) of an accuracy row: its per-seed values, else the
  'M ± S (N seeds)' a row recorded without run folders states; None
  otherwise."""
  values = details.get('values')
  if values:
    return _mean_std(values)
  stated = re.match(r'([\d.]+) ± ([\d.]+) \(\d+ seeds\)', ours or '')
  return (float(stated.group(1)), float(stated.group(2))) if stated else None


def reasons(row, status, details, crosscheck=(), frozen_ours=None):
  """[(reason, evidence)] of a "differs" row (see REASONS); frozen_ours:
  the row's value as stated, for a row whose runs are not recorded."""
  if not status.startswith('differs'):
    return []
  details = details or {}
  found = []
  paper = details.get('paper')
  if 'grid' in details and paper is not None:
    judged, lr = details.get('judged'), details.get('best_lr')
    ref = [
      r
      for r in crosscheck
      if r.get('cell') == row.key
      and lr is not None
      and abs(r['lr'] - lr) < 1e-9
    ]
    reached = [
      r['rounds_to_target'] for r in ref if r['rounds_to_target'] is not None
    ]
    if judged and ref and len(reached) == len(ref):
      mean, std = _mean_std(reached)
      agrees = abs(mean - judged) <= ROUNDS_TOLERANCE * judged
      evidence = (
        f'the numpy reference (tools/crosscheck), {len(ref)} seeds '
        f'of its own at η = {lr:g}: {mean:.1f} ± {std:.1f} rounds '
        f'({", ".join(f"{r:.1f}" for r in reached)}); ours '
        f'{judged:.1f}, the paper {paper:g}'
      )
      if agrees and abs(mean - paper) > ROUNDS_TOLERANCE * paper:
        found.append(('cross-checked', evidence))
    near = [
      (float(k), v)
      for k, v in details['grid'].items()
      if v is not None and abs(v - paper) <= ROUNDS_TOLERANCE * paper
    ]
    if near:
      found.append(
        (
          'η grid',
          "within ±30% of the paper's " + f'{paper:g} '
          'at another η of our grid: '
          + ', '.join(f'η = {k:g}: {v:.1f}' for k, v in near)
          + '; the paper does not give its η (§3: the best of '
          '11–13 values at 10^(1/3) or 10^(1/6))',
        )
      )
    seeds = details.get('seeds')
    if seeds and min(seeds) <= paper <= max(seeds):
      found.append(
        (
          'seed spread',
          f"the paper's {paper:g} lies within our "
          f"seeds' {min(seeds):.1f}–{max(seeds):.1f}",
        )
      )
  mine = _accuracy_of(details, frozen_ours)
  ref = [
    r['last_half_test_accuracy'] * 100
    for r in crosscheck
    if r.get('cell') == row.key and r.get('last_half_test_accuracy') is not None
  ]
  if mine is not None and len(ref) > 1 and paper is not None:
    ref_mean, ref_std = _mean_std(ref)
    ours_mean, ours_std = mine
    agrees = abs(ref_mean - ours_mean) <= max(PP, SIGMAS * ours_std)
    if agrees and abs(ref_mean - paper) > max(PP, SIGMAS * ref_std):
      found.append(
        (
          'cross-checked',
          (
            f'the numpy reference (tools/crosscheck), {len(ref)} seeds of its '
            f'own: {ref_mean:.1f} ± {ref_std:.1f} ('
            f'{", ".join(f"{v:.1f}" for v in ref)}); ours {ours_mean:.1f} ± '
            f'{ours_std:.1f}, the paper {paper:g}'
          ),
        )
      )
  values = details.get('values')
  if (
    values
    and len(values) > 1
    and paper is not None
    and (min(values) <= paper <= max(values))
  ):
    found.append(
      (
        'seed spread',
        f"the paper's {paper:g} lies within our "
        f"seeds' {min(values):.1f}–{max(values):.1f}",
      )
    )
  flips = details.get('seed_differences')
  if flips and min(flips[1]) < 0 < max(flips[1]):
    found.append(
      (
        'seed spread',
        f'{flips[0]} per seed: '
        + ', '.join(f'{d:+.3g}' for d in flips[1])
        + ': the ordering differs between '
        'our seeds',
      )
    )
  draws = details.get('data_seeds')
  if draws and paper is not None:
    spread = (
      f'across three generated datasets (data seeds '
      f'{", ".join(sorted(draws))}; training seed 0) ours is '
      + ', '.join(f'{draws[k]:.1f}' for k in sorted(draws))
    )
    if min(draws.values()) <= paper <= max(draws.values()):
      found.append(
        (
          'seed spread',
          spread + f": the paper's {paper:g} "
          'lies within (its draw is not published)',
        )
      )
    elif not found and row.key not in QUOTED:
      return [
        ('unexplained', spread + f", all away from the paper's {paper:g}")
      ]
  found += QUOTED.get(row.key, [])
  return found or [('unexplained', CHECKED.get(row.key, ''))]


# ------------------------------------------------------------------ judge
def _whole_cells(row, runs, computed):
  """`computed`, unless its row's cells still need runs: then 'not
  finished: N of M runs' (a figure's curves are judged on all their
  seeds, a grid on all its η values)."""
  if (
    computed is None or not row.cells or computed[1].startswith('not finished')
  ):
    return computed
  total = sum(c.runs for c in row.cells)
  needed = sum(c.needed(runs) for c in row.cells)
  return (
    computed
    if not needed
    else ('—', f'not finished: {total - needed} of {total} runs', {})
  )


def _stopped(row, runs):
  """Whether a run the row reads has stopped before its last round (its
  cells' runs; without cells, its pattern's)."""
  where = [(c.command, c.pattern) for c in row.cells] or [
    (row.command, row.pattern)
  ]
  return any(
    command and runs.unfinished(command, pattern) for command, pattern in where
  )


def judge(row, runs, with_details=False):
  """(ours, status) of one row (with_details: (ours, status, details,
  source), source 'runs' or UNKEPT): computed from the recorded runs,
  else the value recorded without run folders, else not finished / not
  run."""
  computed = row.compute(runs) if row.compute else None
  if computed is not None and len(computed) == 2:
    computed = (*computed, {})
  if (row.command or '').startswith('task '):  # A dataset statistics row.
    if computed is not None:
      runs.ledger.data_rows[row.key] = dict(
        ours=computed[0], status=computed[1]
      )
    elif row.key in runs.ledger.data_rows:
      kept = runs.ledger.data_rows[row.key]
      computed = (kept['ours'], kept['status'], {})
  computed = _whole_cells(row, runs, computed)
  frozen = runs.ledger.unkept.get('rows', {}).get(row.key)
  fewer = re.search(r'\((\d+) seeds\)', frozen['ours']) if frozen else None
  if (
    fewer
    and computed is not None
    and computed[2].get('runs', 99) < int(fewer.group(1))
  ):  # Fewer seeds recorded than the row without run folders had.
    computed = None if computed[1] != 'matches' else computed
  if computed is not None and not computed[1].startswith('not finished'):
    result = (*computed, 'runs')
  elif frozen is not None:
    result = (
      frozen['ours'],
      frozen['status'],
      frozen.get('details', {}),
      UNKEPT,
    )
  elif computed is not None:
    result = (*computed, 'runs')
  elif _stopped(row, runs):
    result = (
      '—',
      'not finished: stopped before its last round (commands table)',
      {},
      None,
    )
  elif row.cells:
    status = (
      f'not run (expected '
      f'{hours_text(sum(c.expected(runs) for c in row.cells))} CPU-h)'
    )
    result = ('—', status, {}, None)
  else:
    estimate = NOT_RUN.get(row.command)
    status = 'not run' + (
      f' (≤ {hours_text(estimate[0])} CPU-h)' if estimate else ''
    )
    result = ('—', status + (f': {row.reason}' if row.reason else ''), {}, None)
  if with_details and row.extra is not None:
    result = (result[0], result[1], {**result[2], **row.extra(runs)}, result[3])
  if with_details and 'paper' not in result[2]:
    try:
      result = (
        *result[:2],
        {**result[2], 'paper': float(row.value)},
        result[3],
      )
    except ValueError:
      pass
  return result if with_details else result[:2]


def command_line(name):
  """The command `name` as run: a run_experiment.py command writes
  runs/<name>; another command writes where its own flags say."""
  command = COMMANDS[name]
  return (
    f'{command} --output_dir=runs/{name}' if command.startswith(PY) else command
  )


def cell_hours(runs, cell):
  """CPU-h of `cell`'s own command (its /usr/bin/time file, read now or
  kept in the ledger), or None; plus the part of an earlier try that was
  killed before /usr/bin/time wrote (logs/COMMAND.time.NAME.killed, its
  wall time), whose finished runs the command then kept."""
  name = f'{cell.command}.time.{cell.name}'
  files = runs.time_files(cell.command)
  took = [
    files.get(n) or runs.ledger.cpu.get(cell.command, {}).get(n)
    for n in (name, f'{name}.killed')
  ]
  return took[0][0] + (took[1][0] if took[1] else 0.0) if took[0] else None


def _priced(runs, served):
  """[(expected CPU-h, cell, its rows' numbers, runs priced, actual CPU-h)]
  of the cells with a row not run or a CPU time of their own, cheapest
  first; a cell run on its own is priced for all its runs."""
  priced = []
  for cell, (numbers, not_run) in served.items():
    actual = cell_hours(runs, cell)
    if not_run or actual is not None:
      needed = cell.runs if actual is not None else cell.needed(runs)
      priced.append(
        (cell.expected(runs, needed), cell, numbers, needed, actual)
      )
  return sorted(priced, key=lambda p: (p[0], p[1].command, p[1].name))


def cells_table(runs, served):
  """The cells table (markdown lines): `served` maps each Cell to its
  rows' numbers and whether one of them is not run."""
  lines = [
    'Cells priced on their own (tools/scoreboard.py, "prices": the '
    "paper's or plotted rounds × 1.5 × the measured seconds per "
    'round × the runs needed; `--cell=ID` prints its command, whose '
    '/usr/bin/time file is logs/COMMAND.time.NAME), cheapest first:',
    '',
    '| cell | rows | runs | rounds priced | s per round | '
    'expected CPU-h | actual CPU-h | its runs on their own |',
    '|---|---|---:|---:|---:|---:|---:|---|',
  ]
  for expected, cell, numbers, needed, actual in _priced(runs, served):
    per_round = rate(cell.rate).per_round(cell.k_e, cell.eval_every)
    lines.append(
      f'| {cell.command}.{cell.name} | {", ".join(map(str, numbers))} | '
      f'{needed} | {cell.rounds:,} × {MARGIN:g} | {per_round:.3g} '
      f'({cell.rate}) | {hours_text(expected)} | '
      f'{"—" if actual is None else f"{actual:.2f}"} | '
      f'`{cell.command_line()}` |'
    )
  return lines + [
    '',
    'The seconds per round: '
    + '; '.join(f'{key}: {rate(key).how}' for key in (*MEASURED, *PROBED))
    + '. A '
    "cell scales its rate by its K·E over the measured one's "
    '(a smaller K·E keeps the measured rate).',
  ]


def _kind(status):
  return (
    'matches'
    if status == 'matches'
    else 'not_run'
    if status.startswith('not')
    else 'differs'
  )


def render(runs, crosscheck=()):
  """The scoreboard block (markdown lines) and the status counts."""
  counts = dict(matches=0, explained=0, unexplained=0, not_run=0)
  lines = [
    "| # | paper | item | paper's value | ours | status | why it "
    'differs | command |',
    '|---:|---|---|---|---|---|---|---|',
  ]
  served = {}  # Cell → (its rows' numbers, whether one is not run).
  for number, row in enumerate(ROWS, 1):
    ours, status, details, source = judge(row, runs, with_details=True)
    why = reasons(row, status, details, crosscheck, ours)
    kind = _kind(status)
    for cell in row.cells:
      numbers, not_run = served.get(cell, ([], False))
      served[cell] = (
        numbers + [number],
        not_run or status.startswith('not run'),
      )
    if kind == 'differs':
      kind = (
        'unexplained' if [r for r, _ in why] == ['unexplained'] else 'explained'
      )
    counts[kind] += 1
    mark = ' †' if source == UNKEPT else ''
    why_text = '; '.join(f'**{r}**' + (f': {e}' if e else '') for r, e in why)
    lines.append(
      f'| {number} | {row.paper} | {row.item} | {row.value} | '
      f'{ours}{mark} | {status} | {why_text} | '
      f'{row.command or "—"} |'
    )
  lines += [
    '',
    '† (and "without run folders" in the commands table): the results '
    'of commits fde88f1, 83f512b and 239ead1, whose run folders were not '
    'kept; the value, status and CPU hours are those their scoreboard '
    f'stated, kept in docs/scoreboard_ledger.json ("{UNKEPT}").',
    '',
    QUOTES,
  ]
  lines += [
    '',
    '| command | run with | CPU time | what a command not '
    'finished here would take elsewhere |',
    '|---|---|---:|---|',
  ]
  spent = unkept_spent = 0.0
  for name in COMMANDS:
    took = runs.cpu_hours(name)
    spent += took[0] if took else 0.0
    unkept = runs.ledger.unkept.get('cpu', {}).get(name)
    unkept_spent += unkept[0] if unkept else 0.0
    took = (
      f'{took[0]:.2f} CPU-h' + (f' ({took[1]})' if took[1] else '')
      if took is not None
      else (
        f'not run: ≤ {hours_text(NOT_RUN[name][0])} CPU-h ({NOT_RUN[name][1]})'
        if name in NOT_RUN
        else 'not run'
      )
    )
    stopped = runs.unfinished(name)
    if stopped:
      took += '; not finished: ' + ', '.join(stopped)
    lines.append(
      f'| {name} | `{command_line(name)}` | {took} | {elsewhere(name)} |'
    )
  lines += [''] + cells_table(runs, served)
  lines += [
    '',
    "On a GPU machine: TFF 0.87's worker_binary runs the client "
    'work on the CPU only (docs/GPU.md), so there these commands take '
    'about the CPU time above; with a GPU-enabled runtime the model '
    "arithmetic would cost the examples above × a GPU's time per "
    'example, which no machine here could measure.',
  ]
  lines += [
    '',
    f'CPU time of the commands run: {spent:.1f} CPU-h '
    f'(without run folders {unkept_spent:.1f}, from time files '
    f'{spent - unkept_spent:.1f}).',
  ]
  return lines, counts


def headline(counts):
  total = sum(counts.values())
  differs = counts['explained'] + counts['unexplained']
  return (
    f'{total} table cells and figure panels: **{counts["matches"]} '
    f'match, {differs} differ ({counts["explained"]} explained, '
    f'{counts["unexplained"]} unexplained), {counts["not_run"]} not '
    'run** (tolerances in tools/scoreboard.py and below; the reasons '
    'in its REASONS).'
  )


# ------------------------------------------------------------ cross-check
CROSS_BEGIN, CROSS_END = '<!-- crosscheck begin -->', '<!-- crosscheck end -->'


def _per_seed(values, digits=1):
  shown = ', '.join(
    'not reached' if v is None else f'{v:.{digits}f}' for v in values
  )
  reached = [v for v in values if v is not None]
  if len(reached) > 1:
    mean, std = _mean_std(reached)
    shown += f' (mean {mean:.{digits}f} ± {std:.{digits}f})'
  return shown


def _our_seed_runs(runs, row, lr):
  """Our runs of `row`'s cell at η = lr with several seeds (any command
  named after the row's), else its η-grid run: {name: RunRecord}."""
  variant_task = row.pattern.rsplit('__client_lr-', 1)[0]
  found = {}
  for name in COMMANDS:
    if name.startswith(row.command):
      for record in runs.runs(
        name, f'{variant_task}__client_lr-{lr:g}__seed-*'
      ):
        found.setdefault(record.name, record)
  if not found:
    for record in runs.runs(row.command, f'{variant_task}__client_lr-{lr:g}'):
      found[record.name] = record
  return found


def crosscheck_table(runs, crosscheck):
  """The markdown table of the numpy reference's results beside ours and
  the paper's (REPRODUCTION.md, between CROSS_BEGIN and CROSS_END)."""
  rows = {row.key: row for row in ROWS}
  lines = [
    '| cell | η | the numpy reference, per seed (its own draws) | '
    'ours, per seed | paper |',
    '|---|---:|---|---|---:|',
  ]
  groups = []
  for result in crosscheck:
    group = (
      result['cell'],
      result['lr'],
      result['mu'],
      result['keep_stragglers'],
      result['straggler_fraction'],
    )
    if group not in groups:
      groups.append(group)
  for cell, lr, mu, keep, fraction in groups:
    ref = sorted(
      (
        r
        for r in crosscheck
        if (
          r['cell'],
          r['lr'],
          r['mu'],
          r['keep_stragglers'],
          r['straggler_fraction'],
        )
        == (cell, lr, mu, keep, fraction)
      ),
      key=lambda r: r['seed'],
    )
    row = rows.get(cell)
    if row is None:
      continue
    if 'mean test accuracy' in row.item:  # A last-half accuracy (%).
      ours, _, details, source = judge(row, runs, with_details=True)
      mine = (
        _per_seed(details['values']) if details.get('values') else ours
      ) + (' †' if source == UNKEPT else '')
      lines.append(
        f'| {row.paper} {row.item.split(": ")[0]} | {lr:g} | '
        f'{_per_seed([r["last_half_test_accuracy"] * 100 for r in ref])}'
        f' | {mine} | {row.value} |'
      )
    elif ref[0]['target'] is not None:  # Rounds to target.
      target = ref[0]['target']
      ours = _our_seed_runs(runs, row, lr)
      if ours:
        mine = _per_seed(
          [
            _summarize(r, target)['rounds_to_target']
            for _, r in sorted(ours.items())
          ]
        )
      else:  # The values recorded without run folders, where stated.
        details = judge(row, runs, with_details=True)[2]
        seeds = details.get('seeds') if details.get('best_lr') == lr else None
        grid = details.get('grid', {}).get(f'{lr:g}')
        mine = (
          _per_seed(seeds) + ' rounds †'
          if seeds
          else f'{grid:.1f} rounds (seed 0) †'
          if grid is not None
          else '—'
        )
      if ours:
        mine += ' rounds'
      lines.append(
        f'| {row.item} | {lr:g} | '
        f'{_per_seed([r["rounds_to_target"] for r in ref])} '
        f'rounds | {mine} | {row.value} |'
      )
    else:  # A FedProx Figure 1 panel: one line per curve.
      name = 'FedAvg' if not keep else f'FedProx_mu{mu:g}'
      label = 'FedAvg (drops stragglers)' if not keep else f'FedProx μ = {mu:g}'
      ours = runs.runs(
        row.command, f'{name}__straggler_fraction-{fraction:g}__seed-*'
      )

      def describe(finals, means, accuracies):
        return (
          f'final loss {_per_seed(finals, 3)}; mean loss '
          f'{statistics.fmean(means):.3f}; final test accuracy '
          f'{statistics.fmean(accuracies) * 100:.1f}%'
        )

      mine = (
        describe(
          [final_loss([r]) for r in ours],
          [mean_loss([r]) for r in ours],
          [_summarize(r)['final_test_accuracy'] for r in ours],
        )
        if ours
        else '—'
      )
      lines.append(
        f'| {row.item.split(": ")[0]}, {label} | {lr:g} | '
        + describe(
          [r['final_train_loss'] for r in ref],
          [r['mean_train_loss'] for r in ref],
          [r['final_test_accuracy'] for r in ref],
        )
        + f' | {mine} | (curves) |'
      )
  return lines


def _swept_value(text):
  """A swept value as the run's name spells it (`0.9`): the number."""
  try:
    return float(text)
  except ValueError:
    return text


def _panel_title(swept):
  """`straggler_fraction-0.9` → the settings' plot labels (90% stragglers)."""
  parts = [part.split('-', 1) for part in swept.split('__') if '-' in part]
  return ', '.join(plot.setting_text(k, _swept_value(v)) for k, v in parts)


def figure_series(runs, command, metric):
  """{panel: {legend: (rounds, values)}} of `command`'s finished runs:
  a panel per swept value (the run's name after its variant,
  `FedAvg__straggler_fraction-0.9`), a line per variant, from the run
  folders or else the ledger, which keeps their values to 6 significant
  digits: a figure whose run folders are gone is drawn alike."""
  panels = {}
  for name, record in sorted(runs.records(command).items()):
    if not record.finished:
      continue
    variant, _, swept = name.partition('__')
    rows = [r for r in record.rows if r.get(metric)]
    panels.setdefault(_panel_title(swept), {})[
      record.summary.get('legend', variant)
    ] = ([int(r['round']) for r in rows], [float(r[metric]) for r in rows])
  return panels


def draw_figure(runs, command, metric, out, title=''):
  """`figure_series` side by side on one y axis, into the file `out`."""
  panels = figure_series(runs, command, metric)
  if not panels:
    raise ValueError(
      f'{command}: no finished runs in the run folders or ledger'
    )
  if not any(r for lines in panels.values() for r, _ in lines.values()):
    raise ValueError(
      f'{command}: its runs have no {metric} values (the ledger keeps '
      'only the columns its rows read: COLUMNS, test_accuracy for FedAvg)'
    )
  pyplot = plot._pyplot()
  figure, axes_row = pyplot.subplots(
    1, len(panels), figsize=(3.6 * len(panels), 3.4), sharey=True, squeeze=False
  )
  for axes, (panel, lines) in zip(axes_row[0], panels.items()):
    for legend, (rounds, values) in lines.items():
      axes.plot(rounds, values, label=legend)
    axes.set_title(panel, fontsize=9)
    axes.set_xlabel('# rounds')
  axes_row[0][0].set_ylabel(metric, fontsize=9)
  axes_row[0][0].legend(fontsize=7, frameon=False)
  figure.suptitle(title, fontsize=10)
  figure.savefig(out, dpi=120, bbox_inches='tight')
  pyplot.close(figure)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    '--runs',
    action='append',
    default=[],
    help="a folder holding the commands' output folders",
  )
  parser.add_argument(
    '--data_dir',
    default=os.path.join(
      os.path.dirname(__file__), '..', '..', 'shared', 'data'
    ),
  )
  parser.add_argument(
    '--write', action='store_true', help=f'replace the block in {DOC}'
  )
  parser.add_argument(
    '--ledger', default=LEDGER, help='the committed record of results'
  )
  parser.add_argument(
    '--cell',
    help='print the command of this cell '
    "(COMMAND.NAME, the cells table's) and exit",
  )
  parser.add_argument(
    '--figure',
    help="draw this command's runs (from the run folders, else the "
    'ledger) into --out and exit: a panel per swept value, a line per '
    'variant',
  )
  parser.add_argument('--metric', default='train_loss_sampled')
  parser.add_argument('--out', help="--figure's image file")
  parser.add_argument('--title', default='', help="--figure's title")
  args = parser.parse_args(argv)
  if args.figure:
    if not args.out:
      parser.error('--figure needs --out')
    runs = Runs(args.runs or ['runs'], Ledger(args.ledger))
    try:
      draw_figure(runs, args.figure, args.metric, args.out, args.title)
    except ValueError as e:
      parser.error(str(e))
    except OSError as e:  # The image file cannot be written there.
      parser.error(f'--out={args.out}: {e.strerror or e}')
    return
  if args.cell:
    command, _, name = args.cell.partition('.')
    if (command, name) not in CELLS:
      parser.error(
        f'--cell={args.cell}: no such cell (the cells table lists them)'
      )
    print(CELLS[(command, name)].command_line())
    return
  runs = Runs(args.runs or ['runs'], Ledger(args.ledger))
  runs.data_dir = args.data_dir
  runs.record()  # Finished run folders and time files join the ledger.
  lines, counts = render(runs, crosscheck_results())
  block = [BEGIN, headline(counts), ''] + lines + [END]
  text = '\n'.join(block)
  if args.write:
    runs.ledger.save()
    doc = open(DOC).read()
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    doc = doc[:start] + text + doc[end:]
    if CROSS_BEGIN in doc:
      start = doc.index(CROSS_BEGIN)
      end = doc.index(CROSS_END) + len(CROSS_END)
      doc = (
        doc[:start]
        + '\n'.join(
          [CROSS_BEGIN]
          + crosscheck_table(runs, crosscheck_results())
          + [CROSS_END]
        )
        + doc[end:]
      )
    results.write_atomically(DOC, doc)
  else:
    print(text)
    print('\n'.join(crosscheck_table(runs, crosscheck_results())))
  print(counts, file=sys.stderr)


if __name__ == '__main__':
  main()
