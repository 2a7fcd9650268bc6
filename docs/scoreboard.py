"""The scoreboard at the top of docs/REPRODUCTION.md, from run folders.

  .venv/bin/python docs/scoreboard.py --runs=runs [--runs=OTHER] [--write]

One row per table cell or figure panel of the three papers: the paper's
value, ours (mean ± std over seeds where run with seeds), a status, and the
command (by id: the commands table follows the rows, with the CPU time
each took). `--runs` are folders holding the commands' output folders
(`--output_dir=runs/NAME` → ROOT/NAME); CPU times come from ROOT/../logs/
NAME.time (/usr/bin/time: user + sys of the whole command, its runs and
their TFF workers). Without --write it prints the block; with it, it
replaces the block between the markers in REPRODUCTION.md.

Statuses, with the tolerances we use:
- matches: an accuracy within 2 percentage points of the paper's, or
  within 2 standard deviations of our seeds; rounds to a target within
  ±30%; a figure's stated comparison (quoted) holds in our runs;
- differs: otherwise, with what we measured;
- not run: with the CPU hours it would take here, measured from a
  shortened run (NOT_RUN below) or from a run of the same cost.
Reads run folders only (analysis: no TensorFlow), except the dataset
statistics rows, which load the tasks.
"""

import argparse
import csv
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from tff_algos.simulation import results  # pylint: disable=g-import-not-at-top

DOC = os.path.join(os.path.dirname(__file__), 'REPRODUCTION.md')
BEGIN, END = '<!-- scoreboard begin -->', '<!-- scoreboard end -->'
DATA = '--data_dir=../shared/data'
PY = '.venv/bin/python run_experiment.py'

# id → the command (its output folder is runs/<id>).
COMMANDS = {
    'fedprox_fig1_synthetic':
        f'{PY} --flagfile=configs/fedprox/fig1_synthetic_1_1.flags',
    'fedprox_fig1_mnist':
        f'{PY} --flagfile=configs/fedprox/fig1_mnist.flags {DATA}',
    'fedprox_fig1_femnist':
        f'{PY} --flagfile=configs/fedprox/fig1_femnist.flags {DATA}',
    'fedprox_fig1_sent140':
        f'{PY} --flagfile=configs/fedprox/fig1_sent140.flags {DATA}',
    'fedprox_fig1_shakespeare':
        f'{PY} --flagfile=configs/fedprox/fig1_shakespeare.flags {DATA}',
    'fedprox_fig2': f'{PY} --flagfile=configs/fedprox/fig2_heterogeneity.flags',
    'fedprox_fig3': f'{PY} --flagfile=configs/fedprox/fig3_adaptive_mu.flags',
    'fedisgd_table3': f'{PY} --flagfile=configs/fedisgd/table3_synthetic.flags',
    'fedisgd_table4_synthetic':
        f'{PY} --flagfile=configs/fedisgd/table4_synthetic.flags',
    'fedisgd_table4_mnist':
        f'{PY} --flagfile=configs/fedisgd/table4_mnist.flags {DATA}',
    'fedisgd_table4_emnist':
        f'{PY} --flagfile=configs/fedisgd/table4_emnist.flags {DATA}',
    'fedisgd_table4_sent140':
        f'{PY} --flagfile=configs/fedisgd/table4_sent140.flags {DATA}',
    'fedisgd_fig3_synthetic':
        f'{PY} --flagfile=configs/fedisgd/table4_synthetic.flags '
        '--sweep=straggler_fraction=0,0.5',
    'fedisgd_fig3_mnist':
        f'{PY} --flagfile=configs/fedisgd/table4_mnist.flags {DATA} '
        '--sweep=straggler_fraction=0,0.5',
    'fedisgd_fig3_emnist':
        f'{PY} --flagfile=configs/fedisgd/table4_emnist.flags {DATA} '
        '--sweep=straggler_fraction=0,0.5',
    'fedisgd_fig3_sent140':
        f'{PY} --flagfile=configs/fedisgd/table4_sent140.flags {DATA} '
        '--sweep=straggler_fraction=0,0.5',
    'fedavg_table1_2nn_b10_iid':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
        '--sweep=task=mnist_iid_2nn',
    # Seeds 0-2 at each C's best η of fedavg_table1_2nn_b10_iid (its grid
    # is seed 0).
    'fedavg_table1_2nn_b10_iid_seeds_c0':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
        '--sweep=task=mnist_iid_2nn --only=C0 --sweep=client_lr=0.1 '
        '--sweep=seed=0,1,2',
    'fedavg_table1_2nn_b10_iid_seeds':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
        '--sweep=task=mnist_iid_2nn --only=C0.1,C0.2,C0.5,C1 '
        '--sweep=client_lr=0.215 --sweep=seed=0,1,2',
    'fedavg_table1_2nn_b10_noniid':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_b10.flags {DATA} '
        '--sweep=task=mnist_pathological_2nn',
    'fedavg_table1_2nn_binf_iid':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_binf.flags {DATA} '
        '--sweep=task=mnist_iid_2nn',
    'fedavg_table1_2nn_binf_noniid':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_2nn_binf.flags {DATA} '
        '--sweep=task=mnist_pathological_2nn',
    'fedavg_table1_cnn':
        f'{PY} --flagfile=configs/fedavg/table1_mnist_cnn.flags {DATA}',
    'fedavg_table2_cnn_iid':
        f'{PY} --flagfile=configs/fedavg/table2_mnist_cnn.flags {DATA} '
        '--sweep=task=mnist_iid_cnn --only=E5_B10,FedSGD',
    'fedavg_table2_cnn':
        f'{PY} --flagfile=configs/fedavg/table2_mnist_cnn.flags {DATA}',
    'fedavg_table2_shakespeare':
        f'{PY} --flagfile=configs/fedavg/table2_shakespeare_lstm.flags {DATA}',
    'fedavg_table3_cifar10':
        f'{PY} --flagfile=configs/fedavg/table3_cifar10.flags {DATA}',
    'fedavg_table4_2nn':
        f'{PY} --flagfile=configs/fedavg/table4_mnist_2nn.flags {DATA}',
}

PP = 2.0          # Accuracies: within 2 percentage points ...
SIGMAS = 2.0      # ... or 2 standard deviations of our seeds.
ROUNDS_TOLERANCE = 0.3  # Rounds to target within ±30%.


class Runs:
  """Run folders found under the --runs roots, and their CPU times."""

  def __init__(self, roots):
    self.roots = roots

  def folder(self, name):
    for root in self.roots:
      path = os.path.join(root, name)
      if os.path.isdir(path):
        return path
    return None

  def runs(self, command, pattern):
    """Finished run folders of `command` whose names match the glob
    `pattern` (a run still going, or stopped early, does not count)."""
    folder = self.folder(command)
    if folder is None:
      return []
    return sorted(d for d in glob.glob(os.path.join(folder, pattern))
                  if results.read_json(d, results.SUMMARY_FILE))

  def unfinished(self, command, pattern='*'):
    """'NAME at round r of T' for each run of `command` whose name matches
    the glob `pattern`, with rows, that has not finished."""
    folder = self.folder(command)
    if folder is None:
      return []
    found = []
    for d in sorted(glob.glob(os.path.join(folder, pattern))):
      if results.has_rows(d) and not results.read_json(
          d, results.SUMMARY_FILE):
        total = (results.read_json(d, results.CONFIG_FILE) or {}).get('rounds')
        found.append(f'{os.path.basename(d)} at round '
                     f'{results.read_rows(d)[-1]["round"]} of {total}')
    return found

  def cpu_hours(self, command):
    """(hours, note) of `command` from its /usr/bin/time files
    (`NAME.time`, and `NAME.time.1`... for the parts of a command that was
    stopped and resumed: a part killed before /usr/bin/time wrote holds only
    its wall time, which we count), or None when it never ran."""
    for root in self.roots:
      paths = sorted(glob.glob(os.path.join(root, '..', 'logs',
                                            f'{command}.time*')))
      if not paths:
        continue
      hours, notes = 0.0, []
      for path in paths:
        text = open(path).read()
        cpu = re.findall(r'([\d.]+) s (?:user|sys)', text)
        wall = re.findall(r'([\d.]+) s wall', text)
        if cpu:
          hours += sum(float(n) for n in cpu) / 3600
        elif wall:
          hours += float(wall[0]) / 3600
          notes.append('a killed part counted by its wall time')
        else:
          notes.append('still running')
      return hours, '; '.join(notes)
    return None


def _summaries(run_dirs, target=None):
  return [results.summarize(d, target) for d in run_dirs]


def _mean_std(values):
  values = [v for v in values if v is not None]
  if not values:
    return None, None
  return (statistics.fmean(values),
          statistics.stdev(values) if len(values) > 1 else 0.0)


def accuracy_row(runs, command, pattern, metric, paper):
  """(ours, status): a mean test accuracy (%) over the matching runs."""
  found = runs.runs(command, pattern)
  if not found:
    return None
  mean, std = _mean_std([s[metric] * 100 for s in _summaries(found)])
  ours = (f'{mean:.1f} ± {std:.1f} ({len(found)} seeds)' if len(found) > 1
          else f'{mean:.1f}')
  if abs(mean - paper) <= max(PP, SIGMAS * std):
    return ours, 'matches'
  return ours, f'differs by {mean - paper:+.1f} pp'


def _loss_curve(run_dir):
  return results.series(results.read_rows(run_dir), 'train_loss')


def _mean_curve(run_dirs, metric='train_loss'):
  curves = [dict(zip(*results.series(results.read_rows(d), metric)))
            for d in run_dirs]
  rounds = sorted(set.intersection(*(set(c) for c in curves)))
  return rounds, [statistics.fmean(c[r] for c in curves) for r in rounds]


def rounds_row(runs, command, pattern, target, paper, grid_size=5):
  """(ours, status): the best η's rounds to target among the matching
  runs (a grid of `grid_size` client_lr values), with the grid; a grid not
  yet complete is not judged. Where the command `<command>_seeds*` re-ran
  the best η with several seeds (NAME__seed-S), ours adds their mean ± std
  and the status judges that mean."""
  found = runs.runs(command, pattern)
  if not found:
    return None
  if len(found) < grid_size:
    reached = [s['rounds_to_target'] for s in _summaries(found, target)
               if s['rounds_to_target'] is not None]
    return ((f'{min(reached):.0f} so far' if reached else 'not reached'),
            f'not finished: {len(found)} of {grid_size} η values run')
  cells = []
  for run_dir, summary in zip(found, _summaries(found, target)):
    lr = re.search(r'client_lr-([\d.e-]+)', run_dir)
    cells.append((float(lr.group(1)) if lr else None,
                  summary['rounds_to_target'], summary['rounds'],
                  os.path.basename(run_dir)))
  cells.sort()
  reached = [c for c in cells if c[1] is not None]
  grid = ', '.join(f'{cell[0]:g}' for cell in cells)
  if not reached:
    most = max(cell[2] for cell in cells)
    ours = f'not reached in {most} rounds (η ∈ {{{grid}}})'
    return ours, ('matches' if paper is None else
                  f'differs: not reached in {most} rounds')
  lr, best, _, best_run = min(reached, key=lambda c: c[1])
  edge = ' (best at the grid\'s edge)' if lr in (cells[0][0], cells[-1][0]) \
      and len(cells) > 1 else ''
  ours = f'{best:.0f} (η = {lr:g} of {{{grid}}}){edge}'
  judged = best  # Or the seeds' mean at that η.
  seeds = [d for name in COMMANDS if name.startswith(f'{command}_seeds')
           for d in runs.runs(name, f'{best_run}__seed-*')]
  if len(seeds) > 1:
    seed_rounds = [s['rounds_to_target'] for s in _summaries(seeds, target)
                   if s['rounds_to_target'] is not None]
    if seed_rounds:
      judged, std = _mean_std(seed_rounds)
      ours += (f'; seeds at that η: {judged:.0f} ± {std:.0f} '
               f'({len(seed_rounds)} of {len(seeds)} reached)')
  if paper is None:
    return ours, 'differs: the paper did not reach it'
  if abs(judged - paper) <= ROUNDS_TOLERANCE * paper:
    return ours, 'matches'
  return ours, f'differs: {judged / paper:.2f}× the paper\'s rounds'


def ordering_row(runs, command, patterns, claim_holds, describe):
  """(ours, status) of a figure panel: `patterns` name the curves' run
  folders (glob, seeds averaged); `claim_holds(curves)` tests the paper's
  comparison; `describe(curves)` writes ours."""
  curves = {}
  for name, pattern in patterns.items():
    found = runs.runs(command, pattern)
    if not found:
      return None
    curves[name] = found
  ours = describe(curves)
  return ours, 'matches' if claim_holds(curves) else 'differs'


def final_loss(run_dirs):
  return statistics.fmean(_loss_curve(d)[1][-1] for d in run_dirs)


def mean_loss(run_dirs):
  """Mean training loss over rounds 1..T (spikes count), seeds averaged."""
  return statistics.fmean(statistics.fmean(_loss_curve(d)[1][1:])
                          for d in run_dirs)


def metric_mean(run_dirs, metric):
  return statistics.fmean(
      statistics.fmean(results.series(results.read_rows(d), metric)[1])
      for d in run_dirs)


# ------------------------------------------------------------------ rows
class Row:
  """One table cell or figure panel: `compute(runs)` gives (ours, status)
  or None when its runs are not there (then: not run, `estimate` CPU
  hours, measured as NOT_RUN says). `pattern`: the glob of the command's
  run folders the row reads (a stopped run elsewhere in the command does not
  make this row "not finished")."""

  def __init__(self, paper, item, value, command, compute=None,
               estimate=None, reason='', pattern='*'):
    self.paper, self.item, self.value = paper, item, value
    self.command, self.compute = command, compute
    self.estimate, self.reason = estimate, reason
    self.pattern = pattern


def _or_dash(value):
  return '—' if value is None else f'{value:g}'


ROWS = []
C_VALUES = (('C0', '0'), ('C0.1', '0.1'), ('C0.2', '0.2'), ('C0.5', '0.5'),
            ('C1', '1.0'))
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
    else:
      command = 'fedavg_table1_cnn'
      pattern = (f'{variant}__task-{task}__batch_size-'
                 f'{"10" if b == "10" else "-1"}__client_lr-*')
    ROWS.append(Row(
        'FedAvg', f'Table 1 {model.upper()}, {split.replace("noniid", "non-IID").replace("iid", "IID")}, B={"∞" if b == "inf" else b}, C={c}: rounds to {target:.0%}',
        _or_dash(paper), command,
        lambda r, c=command, p=pattern, t=target, v=paper: rounds_row(
            r, c, p, t, v), pattern=pattern))

TABLE2_CNN = (('FedSGD', 626, 483), ('E5_Binf', 179, 1000),
              ('E1_B50', 65, 600), ('E20_Binf', 234, 672),
              ('E1_B10', 34, 350), ('E5_B50', 29, 334), ('E20_B50', 32, 426),
              ('E5_B10', 20, 229), ('E20_B10', 18, 173))
for variant, iid, noniid in TABLE2_CNN:
  for split, paper in (('iid', iid), ('noniid', noniid)):
    task = f'{TASK[split]}_cnn'
    pattern = f'{variant}__task-{task}__client_lr-*'
    command = ('fedavg_table2_cnn_iid' if split == 'iid' and variant in (
        'FedSGD', 'E5_B10') else 'fedavg_table2_cnn')
    ROWS.append(Row(
        'FedAvg', f'Table 2 CNN, {variant}, {split}: rounds to 99%',
        str(paper), command,
        lambda r, c=command, p=pattern, v=paper: rounds_row(r, c, p, 0.99, v),
        pattern=pattern))
TABLE2_LSTM = (('FedSGD', 2488, 3906), ('E1_B50', 1635, 549),
               ('E5_Binf', 613, 597), ('E1_B10', 460, 164),
               ('E5_B50', 401, 152), ('E5_B10', 192, 41))
for variant, iid, noniid in TABLE2_LSTM:
  for task, paper in (('shakespeare_roles_iid', iid),
                      ('shakespeare_roles', noniid)):
    pattern = f'{variant}__task-{task}__client_lr-*'
    ROWS.append(Row(
        'FedAvg', f'Table 2 Shakespeare LSTM, {variant}, '
        f'{"IID" if task.endswith("iid") else "by role"}: rounds to 54%',
        str(paper), 'fedavg_table2_shakespeare',
        lambda r, p=pattern, v=paper: rounds_row(
            r, 'fedavg_table2_shakespeare', p, 0.54, v), pattern=pattern))
for algorithm, values in (('FedSGD', (3750, 6600, None)),
                          ('FedAvg_E5_B50', (280, 630, 2000))):
  for target, paper in zip((0.80, 0.82, 0.85), values):
    ROWS.append(Row(
        'FedAvg', f'Table 3 CIFAR-10, {algorithm}: rounds to {target:.0%}',
        _or_dash(paper), 'fedavg_table3_cifar10',
        lambda r, a=algorithm, t=target, v=paper: rounds_row(
            r, 'fedavg_table3_cifar10', f'{a}__client_lr-*', t, v),
        pattern=f'{algorithm}__client_lr-*'))
ROWS.append(Row('FedAvg', 'Table 3 CIFAR-10, centralized SGD (B=100): '
                'updates to 80/82/85%', '18000 / 31000 / 99000', None,
                reason='a non-federated baseline this code does not have'))
TABLE4 = (('FedSGD', 1468, 1817), ('E10_Binf', 156, 1100),
          ('E1_B50', 144, 1183), ('E20_Binf', 92, 957), ('E1_B10', 92, 831),
          ('E10_B50', 45, 881), ('E20_B50', 39, 835), ('E10_B10', 34, 497),
          ('E20_B10', 32, 738))
for variant, iid, noniid in TABLE4:
  for split, paper in (('iid', iid), ('noniid', noniid)):
    pattern = f'{variant}__task-{TASK[split]}_2nn__client_lr-*'
    ROWS.append(Row(
        'FedAvg', f'Table 4 (App. A) 2NN, {variant}, {split}: rounds to 97%',
        str(paper), 'fedavg_table4_2nn',
        lambda r, p=pattern, v=paper: rounds_row(
            r, 'fedavg_table4_2nn', p, 0.97, v)))


def faster_row(runs, command, fast, slow, target):
  """(ours, status): the best-η run of `fast` reaches `target` in fewer
  rounds than the best of `slow` (glob patterns)."""
  cells = []
  for pattern in (fast, slow):
    found = runs.runs(command, pattern)
    if not found:
      return None
    reached = [s['rounds_to_target'] for s in _summaries(found, target)
               if s['rounds_to_target'] is not None]
    cells.append(min(reached) if reached else None)
  ours = ' vs '.join('not reached' if c is None else f'{c:.0f}'
                     for c in cells) + ' rounds'
  holds = cells[0] is not None and (cells[1] is None or cells[0] < cells[1])
  return ours, 'matches' if holds else 'differs'


for figure, text, command, fast, slow, target in (
    ('Figure 2 (a)', 'MNIST CNN IID: FedAvg reaches 99% long before FedSGD',
     'fedavg_table2_cnn_iid', 'E5_B10__task-mnist_iid_cnn__*',
     'FedSGD__task-mnist_iid_cnn__*', 0.99),
    ('Figure 2 (b)', 'MNIST CNN non-IID: the same',
     'fedavg_table2_cnn', 'E5_B10__task-mnist_pathological_cnn__*',
     'FedSGD__task-mnist_pathological_cnn__*', 0.99),
    ('Figure 2 (c)', 'Shakespeare IID: FedAvg reaches 54% before FedSGD',
     'fedavg_table2_shakespeare', 'E5_B10__task-shakespeare_roles_iid__*',
     'FedSGD__task-shakespeare_roles_iid__*', 0.54),
    ('Figure 2 (d)', 'Shakespeare by role: the same',
     'fedavg_table2_shakespeare', 'E5_B10__task-shakespeare_roles__*',
     'FedSGD__task-shakespeare_roles__*', 0.54),
    ('Figure 4', 'CIFAR-10: FedAvg reaches 80% long before FedSGD',
     'fedavg_table3_cifar10', 'FedAvg_E5_B50__*', 'FedSGD__*', 0.80),
    ('Figure 7 (a)', 'MNIST 2NN IID: FedAvg (E1 B10) reaches 97% before '
     'FedSGD', 'fedavg_table4_2nn', 'E1_B10__task-mnist_iid_2nn__*',
     'FedSGD__task-mnist_iid_2nn__*', 0.97),
    ('Figure 7 (b)', 'MNIST 2NN non-IID: the same', 'fedavg_table4_2nn',
     'E1_B10__task-mnist_pathological_2nn__*',
     'FedSGD__task-mnist_pathological_2nn__*', 0.97)):
  ROWS.append(Row('FedAvg', f'{figure}: {text}', 'FedAvg < FedSGD '
                  '(rounds)', command,
                  lambda r, c=command, a=fast, b=slow, t=target: faster_row(
                      r, c, a, b, t)))
for figure, text, reason in (
    ('Figure 1', 'averaging two MNIST 2NN models trained from the same or '
     'different initializations (loss along the mixing weight)',
     'an analysis of two centrally trained models, not a federated run: '
     'not implemented'),
    ('Figure 3', 'Shakespeare LSTM, B=10, C=0.1, η=1.47, E up to 50: '
     'large E plateaus or diverges', 'the Shakespeare LSTM at large E'),
    ('Figure 5', 'large-scale next-word LSTM', 'its data is not public'),
    ('Figure 6', 'MNIST CNN training loss over many rounds, C=0.1',
     'the Table 2 CNN runs over 1,000+ rounds'),
    ('Figure 8', 'MNIST CNN, large E (training loss)',
     'the CNN at large E over hundreds of rounds'),
    ('Figure 9', 'CIFAR-10 accuracy per minibatch computation, against '
     'centralized SGD', 'centralized SGD is not implemented'),
    ('Figure 10', 'large-scale word LSTM, E=1 vs 5',
     'its data is not public')):
  ROWS.append(Row('FedAvg', f'{figure}: {text}', '(curves)', None,
                  reason=reason))

# --------------------------------------------------------------- FedProx
FIG1 = (('synthetic', 'Synthetic(1,1)', '1', '__seed-*'),
        ('mnist', 'MNIST', '1', ''), ('femnist', 'FEMNIST', '1', ''),
        ('shakespeare', 'Shakespeare', '0.001', ''),
        ('sent140', 'Sent140', '0.01', ''))


def _describe_losses(curves):
  return ' / '.join(f'{name} {mean_loss(dirs):.3g} ({final_loss(dirs):.3g})'
                    for name, dirs in curves.items())


def _fig1_claim(fraction):
  def holds(curves):
    avg, mu0, mu = (mean_loss(curves[k]) for k in ('FedAvg', 'μ=0', 'μ>0'))
    if fraction == '0':  # FedAvg is FedProx μ=0; μ > 0 no worse.
      return abs(avg - mu0) < 1e-6 and mu <= mu0 * 1.02
    return avg > mu0 and mu <= mu0 * 1.02
  return holds


for name, label, mu, seeds in FIG1:
  for fraction in ('0', '0.5', '0.9'):
    command = f'fedprox_fig1_{name}'
    patterns = {'FedAvg': f'FedAvg__straggler_fraction-{fraction}{seeds}',
                'μ=0': f'FedProx_mu0__straggler_fraction-{fraction}{seeds}',
                'μ>0': f'FedProx_mu{mu}__straggler_fraction-{fraction}{seeds}'}
    claim = ('FedAvg = FedProx μ=0; μ>0 converges at least as well' if
             fraction == '0' else 'FedAvg (dropping stragglers) worse than '
             'FedProx μ=0 (partial work); μ>0 the most stable')
    ROWS.append(Row(
        'FedProx', f'Figure 1, {label}, {float(fraction):.0%} stragglers: '
        'training loss', claim, command,
        lambda r, c=command, p=patterns, f=fraction: ordering_row(
            r, c, p, _fig1_claim(f), _describe_losses)))


def _fedprox_fig7(runs):
  """Test accuracy gain of FedProx (best μ) over FedAvg at 90% stragglers,
  averaged over the datasets run."""
  gains = []
  for name, _, mu, seeds in FIG1:
    command = f'fedprox_fig1_{name}'
    avg = runs.runs(command, f'FedAvg__straggler_fraction-0.9{seeds}')
    prox = runs.runs(command, f'FedProx_mu{mu}__straggler_fraction-0.9{seeds}')
    if avg and prox:
      gains.append(100 * (statistics.fmean(
          s['final_test_accuracy'] for s in _summaries(prox)) -
                          statistics.fmean(s['final_test_accuracy']
                                           for s in _summaries(avg))))
  if not gains:
    return None
  mean = statistics.fmean(gains)
  return (f'{mean:+.1f} pp on average over {len(gains)} datasets '
          f'({", ".join(f"{g:+.1f}" for g in gains)})',
          'matches' if abs(mean - 22) <= PP else 'differs')


ROWS.append(Row('FedProx', 'Figure 7 (App. C.3.2): test accuracy of FedProx '
                '(best μ) over FedAvg at 90% stragglers, final round',
                '+22 pp on average over the 5 datasets', 'fedprox_fig1_*',
                _fedprox_fig7))

FIG2 = (('synthetic_iid', 'Synthetic-IID'), ('synthetic_0_0', 'Synthetic(0,0)'),
        ('synthetic_0.5_0.5', 'Synthetic(0.5,0.5)'),
        ('synthetic_1_1', 'Synthetic(1,1)'))
for task, label in FIG2:
  patterns = {'μ=0': f'FedProx_mu0__task-{task}__seed-*',
              'μ=1': f'FedProx_mu1__task-{task}__seed-*'}
  iid = task == 'synthetic_iid'
  ROWS.append(Row(
      'FedProx', f'Figure 2 (top), {label}: training loss, μ=0 vs μ=1',
      'μ>0 slows IID data' if iid else 'μ=1 converges better than μ=0 '
      '(more so as heterogeneity grows)', 'fedprox_fig2',
      lambda r, p=patterns, iid=iid: ordering_row(
          r, 'fedprox_fig2', p,
          (lambda c: final_loss(c['μ=1']) > final_loss(c['μ=0'])) if iid else
          (lambda c: final_loss(c['μ=1']) <= final_loss(c['μ=0'])),
          lambda c: 'final loss ' + ' / '.join(
              f'{k} {final_loss(v):.3g}' for k, v in c.items()))))
  ROWS.append(Row(
      'FedProx', f'Figure 2 (bottom), {label}: gradient variance, μ=0 vs μ=1',
      'larger μ, smaller dissimilarity; it tracks the loss', 'fedprox_fig2',
      lambda r, p=patterns: ordering_row(
          r, 'fedprox_fig2', p,
          lambda c: metric_mean(c['μ=1'], 'grad_variance') <
          metric_mean(c['μ=0'], 'grad_variance'),
          lambda c: 'mean variance ' + ' / '.join(
              f'{k} {metric_mean(v, "grad_variance"):.3g}'
              for k, v in c.items()))))
for label, prefix, start, other in (
    ('Synthetic-IID, μ from 1', 'iid', 'adaptive_from1', ('mu1', 'mu0')),
    ('Synthetic(1,1), μ from 0', 'niid', 'adaptive_from0', ('mu0', 'mu1'))):
  patterns = {'adaptive': f'{prefix}_{start}__seed-*',
              'fixed start': f'{prefix}_{other[0]}__seed-*',
              'fixed other': f'{prefix}_{other[1]}__seed-*'}
  ROWS.append(Row(
      'FedProx', f'Figure 3, {label}: adaptive μ (±0.1)',
      'adaptive μ beats the (unfavourable) starting μ held fixed',
      'fedprox_fig3',
      lambda r, p=patterns: ordering_row(
          r, 'fedprox_fig3', p,
          lambda c: final_loss(c['adaptive']) < final_loss(c['fixed start']),
          lambda c: 'final loss ' + ' / '.join(
              f'{k} {final_loss(v):.3g}' for k, v in c.items()))))
for figure, text, reason in (
    ('Figure 5 (App. C.3.1)', 'Synthetic-IID with 0/50/90% stragglers: '
     'FedAvg robust', 'not configured'),
    ('Figure 8 (App. C.3.2)', 'dissimilarity on the five Figure 1 datasets',
     'the dissimilarity on the real datasets'),
    ('Figures 9-10 (App. C.3.2)', 'E = 1 with stragglers',
     'the Figure 1 datasets at E = 1'),
    ('Figure 11 (App. C.3.3)', 'adaptive μ on Synthetic(0,0) and '
     '(0.5,0.5)', 'not configured (Figure 3 covers IID and (1,1))'),
    ('Figure 12 (App. C.3.4)', 'sampling ∝ n_k with a uniform mean',
     'this code samples uniformly and weights by n_k, as the paper\'s main '
     'experiments')):
  ROWS.append(Row('FedProx', f'{figure}: {text}', '(curves)', None,
                  reason=reason))

# ---------------------------------------------------------------- FedISGD
TABLE3 = (('synthetic_0_0', 'Synthetic_0_0', (79.6, 83.6, 85.0)),
          ('synthetic_0.5_0.5', 'Synthetic_0.5_0.5', (79.3, 81.7, 84.5)),
          ('synthetic_1_1', 'Synthetic_1_1', (69.7, 75.6, 76.3)))
ALGOS = ('FedAvg', 'FedProx', 'FedISGD')
for task, label, values in TABLE3:
  for algo, paper in zip(ALGOS, values):
    ROWS.append(Row(
        'FedISGD', f'Table 3, {label}, {algo}: mean test accuracy over the '
        'last half of the rounds (%)', f'{paper}', 'fedisgd_table3',
        lambda r, a=algo, t=task, v=paper: accuracy_row(
            r, 'fedisgd_table3', f'{a}__task-{t}__seed-*',
            'last_half_test_accuracy', v)))
TABLE4 = (('synthetic', 'Synthetic_1_1 (5 classes per device)',
           (72.3, 76.1, 77.4), '__seed-*'),
          ('mnist', 'MNIST', (76.7, 81.4, 86.4), '__seed-*'),
          ('emnist', 'EMNIST', (50.4, 68.1, 68.3), ''),
          ('sent140', 'Sent140', (57.0, 69.4, 69.5), ''))
for name, label, values, seeds in TABLE4:
  for algo, paper in zip(ALGOS, values):
    command = f'fedisgd_table4_{name}'
    ROWS.append(Row(
        'FedISGD', f'Table 4, {label}, {algo}, 90% stragglers: mean test '
        'accuracy over the last half (%)', f'{paper}', command,
        lambda r, c=command, a=algo, s=seeds, v=paper: accuracy_row(
            r, c, f'{a}{s}', 'last_half_test_accuracy', v)))


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
  ROWS.append(Row(
      'FedISGD', f'Figure 2 (loss), {label}',
      'FedISGD reaches FedAvg\'s final loss at ~30 rounds, FedProx\'s at ~40',
      'fedisgd_table3',
      lambda r, p=patterns: ordering_row(
          r, 'fedisgd_table3', p,
          lambda c: None not in _catch_up(c),
          lambda c: 'FedAvg\'s at {}, FedProx\'s at {}'.format(
              *('never' if x is None else f'round {x}'
                for x in _catch_up(c))))))
  ROWS.append(Row(
      'FedISGD', f'Figure 2 (VLG), {label}',
      'FedISGD\'s VLG the lowest (the most stable)', 'fedisgd_table3',
      lambda r, p=patterns: ordering_row(
          r, 'fedisgd_table3', p,
          lambda c: metric_mean(c['FedISGD'], 'vlg') < min(
              metric_mean(c[a], 'update_spread') for a in ('FedAvg',
                                                          'FedProx')),
          lambda c: 'mean VLG ' + ' / '.join(
              f'{a} {metric_mean(c[a], "vlg" if a == "FedISGD" else "update_spread"):.3g}'
              for a in ALGOS) + ' (λ = 1)')))
for name, label, _, seeds in TABLE4:
  for fraction in ('0', '0.5', '0.9'):
    if fraction == '0.9':
      command, suffix = f'fedisgd_table4_{name}', seeds
    else:
      command = f'fedisgd_fig3_{name}'
      suffix = f'{seeds}__straggler_fraction-{fraction}'
    patterns = {a: f'{a}{suffix}' for a in ALGOS}
    ROWS.append(Row(
        'FedISGD', f'Figure 3, {label}, {float(fraction):.0%} stragglers: '
        'training loss', 'FedISGD converges clearly faster than FedAvg and '
        'FedProx', command,
        lambda r, c=command, p=patterns: ordering_row(
            r, c, p, lambda x: mean_loss(x['FedISGD']) < min(
                mean_loss(x['FedAvg']), mean_loss(x['FedProx'])),
            lambda x: 'mean (final) loss ' + _describe_losses(x))))

# ------------------------------------------------------ dataset statistics


def dataset_row(task, paper_devices, paper_samples, data_dir, options):
  """(ours, status): devices and samples of one of our tasks, loaded with
  the task options its configs use."""
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()
  try:
    task = tasks.load_task(task, data_dir=data_dir, train_fraction=0.8
                           if task in ('mnist_powerlaw', 'femnist_fedprox',
                                       'sent140') else None, **options)
  except tasks.DataError:
    return None
  sizes = [len(a['y']) for split in (task.train, task.test)
           for a in tasks.client_arrays(split)]
  devices, samples = len(task.client_ids), sum(sizes)
  ours = f'{devices} devices, {samples:,} samples'
  same = (devices == paper_devices and
          abs(samples - paper_samples) <= 0.02 * paper_samples)
  return ours, 'matches' if same else 'differs: our copy of the data'


for paper, table, task, label, devices, samples, options in (
    ('FedProx', 'Table 1', 'mnist_powerlaw', 'MNIST', 1000, 69035, {}),
    ('FedProx', 'Table 1', 'femnist_fedprox', 'FEMNIST', 200, 18345, {}),
    ('FedProx', 'Table 1', 'shakespeare_roles', 'Shakespeare', 143, 517106,
     dict(num_clients=143)),  # As configs/fedprox/fig1_shakespeare.flags.
    ('FedProx', 'Table 1', 'sent140', 'Sent140', 772, 40783, {}),
    ('FedISGD', 'Table 2', 'sent140', 'Sent140', 772, 40783, {}),
    ('FedISGD', 'Table 2', 'mnist_powerlaw', 'MNIST', 1000, 69035, {}),
    ('FedISGD', 'Table 2', 'femnist_fedprox', 'EMNIST', 200, 18345, {})):
  ROWS.append(Row(
      paper, f'{table}: {label} data (devices, samples)',
      f'{devices} devices, {samples:,} samples', f'task {task}' + ''.join(
          f' --{k}={v}' for k, v in options.items()),
      lambda r, t=task, d=devices, s=samples, o=options: dataset_row(
          t, d, s, r.data_dir, o)))

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
_2NN = ('25 runs to 4,000 rounds; probe 1.18 s/round at K = 10, E = 1, '
        'B = 10, 1.15 s per evaluation')
NOT_RUN = {
    'fedavg_table1_2nn_b10_iid': (65, _2NN),
    'fedavg_table1_2nn_b10_noniid': (65, _2NN),
    'fedavg_table1_2nn_binf_iid': (67, '25 runs to 5,000 rounds; probe 1.02 '
                                   's/round at K = 10, B = ∞'),
    'fedavg_table1_2nn_binf_noniid': (67, '25 runs to 5,000 rounds; probe '
                                      '1.02 s/round at K = 10, B = ∞'),
    'fedavg_table1_cnn': (6091, '100 runs to 1,500 rounds, K from 1 to 100; '
                          'the CNN probe of fedavg_table2_cnn, 50.5 s/round '
                          'at K = 10, E = 5'),
    'fedavg_table2_cnn_iid': (101, '10 runs to 1,500 rounds; probe 50.5 '
                              's/round at K = 10, E = 5, B = 10'),
    'fedavg_table2_cnn': (2638, '90 runs to 1,500 rounds; probe 50.5 s/round '
                          'at K = 10, E = 5, B = 10'),
    'fedavg_table2_shakespeare': (12038, '60 runs to 4,000 rounds; probe '
                                  '82 s/round at K = 119, E = 1, B = 10'),
    'fedavg_table3_cifar10': (177, '10 runs to 4,000 rounds; probe 25.6 '
                              's/round at K = 10, E = 5, B = 50, 29.5 s per '
                              'evaluation'),
    'fedavg_table4_2nn': (483, '90 runs to 3,000 rounds, E up to 20; the 2NN '
                          'probe, 1.18 s/round at E = 1'),
    'fedprox_fig1_shakespeare': (6, '9 runs of 40 rounds; probe 49 s/round '
                                 'at K = 10, E = 20'),
    'fedprox_fig1_sent140': (18, '9 runs of 800 rounds at the 8.85 s/round '
                             'FedProx took in fedisgd_table4_sent140'),
    'fedisgd_fig3_sent140': (12, '6 runs of 800 rounds at 8.85 s/round'),
}


def judge(row, runs):
  """(ours, status) of one row."""
  computed = row.compute(runs) if row.compute else None
  if computed is not None:
    return computed
  if row.command and runs.unfinished(row.command, row.pattern):
    return '—', 'not finished: stopped before its last round (commands table)'
  estimate = NOT_RUN.get(row.command)
  status = 'not run' + (f' (≤ {estimate[0]:,.0f} CPU-h)' if estimate else '')
  return '—', status + (f': {row.reason}' if row.reason else '')


def render(runs):
  """The scoreboard block (markdown lines) and the status counts."""
  counts = dict(matches=0, differs=0, not_run=0)
  lines = ['| # | paper | item | paper\'s value | ours | status | command |',
           '|---:|---|---|---|---|---|---|']
  for number, row in enumerate(ROWS, 1):
    ours, status = judge(row, runs)
    counts['matches' if status == 'matches' else 'not_run'
           if status.startswith('not') else 'differs'] += 1
    lines.append(f'| {number} | {row.paper} | {row.item} | {row.value} | '
                 f'{ours} | {status} | {row.command or "—"} |')
  lines += ['', '| command | run with | CPU time |', '|---|---|---:|']
  spent = 0.0
  for name, command in COMMANDS.items():
    took = runs.cpu_hours(name)
    spent += took[0] if took else 0.0
    took = (f'{took[0]:.2f} CPU-h' + (f' ({took[1]})' if took[1] else '')
            if took is not None else
            (f'not run: ≤ {NOT_RUN[name][0]:,.0f} CPU-h ({NOT_RUN[name][1]})'
             if name in NOT_RUN else 'not run'))
    stopped = runs.unfinished(name)
    if stopped:
      took += '; not finished: ' + ', '.join(stopped)
    lines.append(f'| {name} | `{command} --output_dir=runs/{name}` | '
                 f'{took} |')
  lines += ['', f'CPU time of the commands run: {spent:.1f} CPU-h.']
  return lines, counts


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', action='append', default=[],
                      help='a folder holding the commands\' output folders')
  parser.add_argument('--data_dir', default=os.path.join(
      os.path.dirname(__file__), '..', '..', 'shared', 'data'))
  parser.add_argument('--write', action='store_true',
                      help=f'replace the block in {DOC}')
  args = parser.parse_args(argv)
  runs = Runs(args.runs or ['runs'])
  runs.data_dir = args.data_dir
  lines, counts = render(runs)
  total = sum(counts.values())
  block = [BEGIN, f'{total} table cells and figure panels: '
           f'**{counts["matches"]} match, {counts["differs"]} differ, '
           f'{counts["not_run"]} not run** (tolerances in docs/scoreboard.py '
           'and below).', ''] + lines + [END]
  text = '\n'.join(block)
  if args.write:
    doc = open(DOC).read()
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    results.write_atomically(DOC, doc[:start] + text + doc[end:])
  else:
    print(text)
  print(counts, file=sys.stderr)


if __name__ == '__main__':
  main()
