"""tools/scoreboard.py: every command it lists is a valid run_experiment.py
command line (flags parsed and every run of a sweep validated, as a dry run
does before it loads data), and every row names one of those commands."""

import fnmatch
import importlib.util
import json
import math
import os
import shlex

import pytest

from conftest import REPO


def _scoreboard():
  spec = importlib.util.spec_from_file_location(
    'scoreboard', REPO / 'tools' / 'scoreboard.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


SCOREBOARD = _scoreboard()


def _check_interpolate(args, data_dir):
  """FedAvg Figure 1's command: its flags are valid (as the program checks
  them before it loads anything), and the CSV it writes is the one the
  Figure 1 rows read."""
  from tff_algos import interpolate

  # The data folder need not be there for the command line to be valid.
  args = [
    a
    if not a.startswith('--data_dir=') or os.path.isdir(a.split('=', 1)[1])
    else f'--data_dir={data_dir}'
    for a in args
  ]
  holder = interpolate._arguments(['interpolate', *args])
  assert os.path.abspath(holder.csv) == os.path.abspath(SCOREBOARD.FIG1_CSV)


@pytest.mark.parametrize('name', sorted(SCOREBOARD.COMMANDS))
def test_every_scoreboard_command_is_valid(name, monkeypatch, tmp_path):
  from tff_algos import run

  monkeypatch.chdir(REPO)  # Its --flagfile paths are relative to the repo.
  words = shlex.split(SCOREBOARD.COMMANDS[name])
  if words[:3] == ['.venv/bin/python', '-m', 'tff_algos.interpolate']:
    _check_interpolate(words[3:], tmp_path)
    return
  assert words[:2] == ['.venv/bin/python', 'run_experiment.py']
  command = run.parse_command([*words[2:], f'--output_dir=runs/{name}'])
  if command.runs:
    assert len(command.run_plans) == len(command.runs) >= 1
  else:
    assert command.plan.config.rounds >= 1


@pytest.mark.parametrize(
  'key', sorted(SCOREBOARD.CELLS), ids=lambda key: '.'.join(key)
)
def test_every_cell_command_runs_exactly_the_runs_its_rows_read(
  key, monkeypatch
):
  """A cell's command (its command's line and the cell's flags) is valid
  and plans exactly its runs: as many as it is priced for, each one a run
  its rows read (the cell's pattern), stopped at the rounds it says."""
  from tff_algos import run

  monkeypatch.chdir(REPO)
  cell = SCOREBOARD.CELLS[key]
  words = shlex.split(cell.command_line())
  assert words[:2] == ['.venv/bin/python', 'run_experiment.py']
  command = run.parse_command(words[2:])
  names = [r.name for r in command.runs]
  assert len(names) == cell.runs, names
  assert all(fnmatch.fnmatchcase(n, cell.pattern) for n in names), names
  if '--rounds=' in cell.flags:
    cap = int(cell.flags.split('--rounds=')[1].split()[0])
    assert cap == math.ceil(SCOREBOARD.MARGIN * cell.rounds)
    assert {p.config.rounds for p in command.run_plans} == {cap}


@pytest.mark.fast
def test_a_cell_is_priced_by_the_runs_it_still_needs(tmp_path):
  """Expected CPU-h = runs needed × 1.5 × the paper's rounds × the measured
  seconds per round (scaled up by K·E); a finished run is not needed."""
  cell = SCOREBOARD.CELLS[('fedavg_table4_2nn', 'E10_B10_iid')]
  runs = SCOREBOARD.Runs([str(tmp_path)], SCOREBOARD.Ledger(None))
  measured = SCOREBOARD.rate('2nn_b10')
  assert measured.how.startswith('fedavg_table1_2nn_b10_iid_crosscheck')
  per_round = measured.seconds * 10  # E = 10: K·E 100 against 10.
  assert cell.expected(runs) == pytest.approx(5 * 1.5 * 34 * per_round / 3600)
  _run(
    tmp_path
    / 'fedavg_table4_2nn'
    / 'E10_B10__task-mnist_iid_2nn__client_lr-0.1',
    [0.5, 0.98],
  )
  assert cell.needed(runs) == 4
  assert cell.expected(runs) == pytest.approx(4 * 1.5 * 34 * per_round / 3600)
  # A cell of less local work keeps the measured rate.
  small = SCOREBOARD.CELLS[('fedavg_table4_2nn', 'E1_B50_iid')]
  assert small.expected(runs) == pytest.approx(
    5 * 1.5 * 144 * measured.seconds / 3600
  )


def test_a_cells_own_time_file_is_its_actual_cpu_time(tmp_path):
  """The cells table shows a cell run on its own with its expected and
  actual CPU hours (logs/COMMAND.time.NAME)."""
  (tmp_path / 'logs').mkdir()
  (tmp_path / 'runs').mkdir()
  (tmp_path / 'logs' / 'fedprox_fig5.time.s0.5').write_text(
    '700.0 s user 20.0 s sys 800 s wall\n'
  )
  runs = SCOREBOARD.Runs([str(tmp_path / 'runs')], SCOREBOARD.Ledger(None))
  cell = SCOREBOARD.CELLS[('fedprox_fig5', 's0.5')]
  assert SCOREBOARD.cell_hours(runs, cell) == pytest.approx(0.2)
  lines = SCOREBOARD.cells_table(runs, {cell: ([141], False)})
  (line,) = [row for row in lines if row.startswith('| fedprox_fig5.s0.5 |')]
  assert '| 0.20 |' in line and cell.command_line() in line
  # An earlier try killed before /usr/bin/time wrote counts by its wall time.
  (tmp_path / 'logs' / 'fedprox_fig5.time.s0.5.killed').write_text(
    '360 s wall (killed)\n'
  )
  assert SCOREBOARD.cell_hours(runs, cell) == pytest.approx(0.3)


@pytest.mark.fast
def test_a_figure_row_is_judged_on_all_its_seeds_only(tmp_path):
  """Figure 5's 50% panel reads 3 curves × 3 seeds: with seed 0 alone it
  is "not finished", with all nine it is judged."""
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.item.startswith('Figure 5 (App. C.3.1), Synthetic-IID, 50%')
  )
  runs = SCOREBOARD.Runs([str(tmp_path)], SCOREBOARD.Ledger(None))
  for seed in '012':
    for curve in ('FedAvg', 'FedProx_mu0', 'FedProx_mu1'):
      _run(
        tmp_path
        / 'fedprox_fig5'
        / f'{curve}__straggler_fraction-0.5__seed-{seed}',
        [0.5, 0.6],
      )
    status = SCOREBOARD.judge(row, runs)[1]
    assert status == (
      'matches'
      if seed == '2'
      else f'not finished: {3 * (int(seed) + 1)} of 9 runs'
    )


def test_an_ordering_that_flips_between_seeds_is_seed_spread(tmp_path):
  """Figure 10's claim (FedProx μ=0's final accuracy above FedAvg's) fails
  on the mean while it holds in one seed of three: seed spread, with the
  per-seed differences as evidence."""
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.item.startswith('Figure 10 (App. C.3.2), Synthetic(1,1), E = 1, 50%')
  )
  finals = {
    'FedAvg': (0.88, 0.87, 0.86),
    'FedProx_mu0': (0.86, 0.89, 0.85),
    'FedProx_mu1': (0.86, 0.89, 0.85),
  }
  for curve, values in finals.items():
    for seed, final in enumerate(values):
      _run(
        tmp_path
        / 'fedprox_fig9_synthetic'
        / f'{curve}__straggler_fraction-0.5__seed-{seed}',
        [0.5, final],
      )
  runs = SCOREBOARD.Runs([str(tmp_path)], SCOREBOARD.Ledger(None))
  _, status, details, _ = SCOREBOARD.judge(row, runs, with_details=True)
  assert status == 'differs'
  ((reason, evidence),) = SCOREBOARD.reasons(row, status, details)
  assert reason == 'seed spread' and '-2, +2, -1' in evidence


def test_the_cell_option_prints_the_cells_command(capsys):
  SCOREBOARD.main(['--cell=fedprox_fig12.synthetic_iid'])
  assert (
    capsys.readouterr().out.strip()
    == SCOREBOARD.CELLS[('fedprox_fig12', 'synthetic_iid')].command_line()
  )
  with pytest.raises(SystemExit):
    SCOREBOARD.main(['--cell=fedprox_fig12.nothing'])


def test_every_row_names_a_listed_command():
  for row in SCOREBOARD.ROWS:
    if row.command is None:
      assert row.reason, row.item  # Not run: it says why.
    elif not row.command.startswith(('task ', 'fedprox_fig1_*')):
      assert row.command in SCOREBOARD.COMMANDS, row.item


def _run(folder, accuracies, finished=True):
  folder.mkdir(parents=True)
  (folder / 'metrics.csv').write_text(
    'round,train_loss,test_accuracy\n'
    + ''.join(f'{r * 5},{1 - a},{a}\n' for r, a in enumerate(accuracies))
  )
  (folder / 'config.json').write_text(
    '{"epochs": 1, "batch_size": 10, "rounds": 4000}'
  )
  if finished:
    (folder / 'summary.json').write_text('{"examples_per_client": 600}')


def test_a_cell_is_judged_on_its_full_eta_grid_only(tmp_path):
  """Table 1's C = 0.1 cell: the best η of a finished grid of five, inside
  it; C = 0.2, with a run stopped half-way, is "not finished" (and only
  it); C = 0.5 has no run."""
  command = tmp_path / 'fedavg_table1_2nn_b10_iid'
  grid = (0.0215, 0.0464, 0.1, 0.215, 0.464)
  # Evaluated every 5 rounds; the best: η = 0.1, at 97% by round 4.375.
  curves = (
    [0.5, 0.9, 0.96],
    [0.5, 0.96, 0.98],
    [0.9, 0.98],
    [0.5, 0.9, 0.95, 0.99],
    [0.5, 0.6],
  )
  for lr, accuracies in zip(grid, curves):
    _run(command / f'C0.1__task-mnist_iid_2nn__client_lr-{lr}', accuracies)
  _run(
    command / 'C0.2__task-mnist_iid_2nn__client_lr-0.0215',
    [0.5],
    finished=False,
  )
  runs = SCOREBOARD.Runs([str(tmp_path)])
  rows = {
    row.item.split('C=')[1].split(':')[0]: row
    for row in SCOREBOARD.ROWS
    if row.command == 'fedavg_table1_2nn_b10_iid'
  }
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert ours.startswith('4 (η = 0.1 of {0.0215, 0.0464, 0.1, 0.215, 0.464})')
  assert 'edge' not in ours and status == "differs: 0.05× the paper's rounds"
  # Seeds re-run at the best η: their mean is what the status judges.
  for seed, accuracies in (
    (0, [0.9, 0.98]),
    (1, [0.5, 0.9, 0.95, 0.96] + [0.96] * 12 + [0.98]),
  ):
    _run(
      tmp_path
      / 'fedavg_table1_2nn_b10_iid_seeds'
      / f'C0.1__task-mnist_iid_2nn__client_lr-0.1__seed-{seed}',
      accuracies,
    )
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert ours.endswith('; seeds at that η: 41 ± 52 (2 of 2 reached)')
  assert status == "differs: 0.47× the paper's rounds"  # (4.375 + 77.5) / 2.
  assert SCOREBOARD.judge(rows['0.2'], runs)[1].startswith('not finished')
  assert SCOREBOARD.judge(rows['0.5'], runs)[1].startswith('not run (expected')
  # A grid still missing values is reported, not judged.
  (
    command / 'C0.1__task-mnist_iid_2nn__client_lr-0.464' / 'summary.json'
  ).unlink()
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert (ours, status) == ('4 so far', 'not finished: 4 of 5 η values run')


@pytest.mark.fast
def test_rows_have_distinct_keys():
  keys = [row.key for row in SCOREBOARD.ROWS]
  assert len(keys) == len(set(keys))


def _ledger_only():
  """The scoreboard of a clone without run folders or data: the ledger's."""
  runs = SCOREBOARD.Runs(['/nonexistent/runs'], SCOREBOARD.Ledger())
  runs.data_dir = '/nonexistent/data'
  return runs


def test_every_differs_row_has_reasons_from_the_list_with_evidence():
  runs = _ledger_only()
  crosscheck = SCOREBOARD.crosscheck_results()
  differs = 0
  for row in SCOREBOARD.ROWS:
    ours, status, details, _ = SCOREBOARD.judge(row, runs, with_details=True)
    why = SCOREBOARD.reasons(row, status, details, crosscheck)
    if not status.startswith('differs'):
      assert not why, row.item
      continue
    differs += 1
    assert why, row.item
    for reason, evidence in why:
      assert reason in SCOREBOARD.REASONS, (row.item, reason)
      # A reason other than "unexplained" states its evidence.
      assert reason == 'unexplained' or evidence, (row.item, reason)
    if 'unexplained' in [r for r, _ in why]:
      assert len(why) == 1, row.item
  assert differs >= 39  # The "differs" rows without run folders, at least.


@pytest.mark.fast
def test_without_run_folders_the_ledger_gives_the_unkept_scoreboard():
  """A fresh clone (no runs/, no data) of the ledger as bootstrapped (the
  results without run folders only): every row they judged keeps its
  value and status, marked as theirs."""
  runs = _ledger_only()
  runs.ledger.runs, runs.ledger.cpu, runs.ledger.data_rows = {}, {}, {}
  unkept = runs.ledger.unkept['rows']
  assert len(unkept) >= 71  # 32 match + 39 differ when it was written.
  for row in SCOREBOARD.ROWS:
    if row.key in unkept:
      ours, status, _, source = SCOREBOARD.judge(row, runs, with_details=True)
      assert (ours, status) == (
        unkept[row.key]['ours'],
        unkept[row.key]['status'],
      )
      assert source == SCOREBOARD.UNKEPT
  lines, counts = SCOREBOARD.render(runs)
  assert counts['matches'] + counts['explained'] + counts['unexplained'] >= 71
  assert any('†' in line for line in lines)
  # Its CPU time is kept too.
  assert runs.cpu_hours('fedavg_table1_2nn_b10_iid')[0] == pytest.approx(1.35)


def test_the_committed_ledger_alone_gives_the_committed_scoreboard():
  """docs/REPRODUCTION.md's block is what the ledger gives without run
  folders (apart from runs that were still going when it was written)."""
  runs = _ledger_only()
  lines, counts = SCOREBOARD.render(runs, SCOREBOARD.crosscheck_results())
  doc = open(SCOREBOARD.DOC, encoding='utf-8').read()
  block = doc[doc.index(SCOREBOARD.BEGIN) : doc.index(SCOREBOARD.END)]
  assert SCOREBOARD.headline(counts).split(' (')[0] in block or (
    'not finished' in block
  )
  going = ('not finished', 'still running')  # Runs going at the time.
  doc_lines = {
    line.split(' | ')[0]: line
    for line in block.splitlines()
    if line.startswith('| ')
  }
  running = any(g in block for g in going)
  for line in lines:
    if line.startswith('| '):
      written = doc_lines.get(line.split(' | ')[0])
      if written is None:  # A cell whose rows were running is not priced.
        assert running, line
      elif not any(g in written for g in going):
        assert line == written


def test_a_run_folder_updates_its_row_and_joins_the_ledger(tmp_path):
  """A finished grid of fake runs replaces the value without run folders
  of its row; written to the ledger, it gives the same row without the run
  folders; an unfinished run is never recorded."""
  ledger_path = tmp_path / 'ledger.json'
  ledger_path.write_text(
    open(SCOREBOARD.LEDGER, encoding='utf-8').read(), encoding='utf-8'
  )
  root = tmp_path / 'runs'
  command = root / 'fedavg_table1_2nn_b10_iid'
  for lr in (0.0215, 0.0464, 0.1, 0.215, 0.464):
    _run(
      command / f'C0.5__task-mnist_iid_2nn__client_lr-{lr}',
      [0.5, 0.9, 0.98] if lr == 0.1 else [0.5, 0.6],
    )
  _run(command / 'C1__task-mnist_iid_2nn__client_lr-0.1', [0.5], finished=False)
  (tmp_path / 'logs').mkdir()
  (tmp_path / 'logs' / 'fedavg_table1_2nn_b10_iid.time.c05').write_text(
    '720.0 s user 0 s sys 800 s wall\n'
  )
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.key == 'FedAvg | Table 1 2NN, IID, B=10, C=0.5: rounds to 97%'
  )
  before = SCOREBOARD.judge(
    row,
    SCOREBOARD.Runs([], SCOREBOARD.Ledger(str(ledger_path))),
    with_details=True,
  )
  assert before[3] == SCOREBOARD.UNKEPT

  runs = SCOREBOARD.Runs([str(root)], SCOREBOARD.Ledger(str(ledger_path)))
  ours, status, details, source = SCOREBOARD.judge(row, runs, with_details=True)
  assert source == 'runs' and ours.startswith('9 (η = 0.1 of')
  assert details['grid']['0.1'] == 9.4  # 9.375, to one decimal.
  assert runs.cpu_hours('fedavg_table1_2nn_b10_iid')[0] == pytest.approx(
    1.35 + 0.2
  )
  runs.record()
  runs.ledger.save()

  clone = SCOREBOARD.Runs(
    [str(tmp_path / 'gone')], SCOREBOARD.Ledger(str(ledger_path))
  )
  assert SCOREBOARD.judge(row, clone, with_details=True) == (
    ours,
    status,
    details,
    'runs',
  )
  assert clone.cpu_hours('fedavg_table1_2nn_b10_iid')[0] == pytest.approx(
    1.35 + 0.2
  )
  recorded = clone.ledger.runs['fedavg_table1_2nn_b10_iid']
  assert 'C1__task-mnist_iid_2nn__client_lr-0.1' not in recorded
  assert len(recorded) == 5


def test_a_ledger_under_the_old_key_loads_and_saves_under_the_new(tmp_path):
  """A ledger naming the results without run folders by the old key
  (OLD_UNKEPT) gives the same results, and is saved under UNKEPT."""
  data = json.loads(open(SCOREBOARD.LEDGER, encoding='utf-8').read())
  data[SCOREBOARD.OLD_UNKEPT] = data.pop(SCOREBOARD.UNKEPT)
  path = tmp_path / 'ledger.json'
  path.write_text(json.dumps(data), encoding='utf-8')
  ledger = SCOREBOARD.Ledger(str(path))
  assert ledger.unkept == SCOREBOARD.Ledger().unkept
  assert ledger.unkept['rows']
  ledger.save()
  saved = json.loads(path.read_text(encoding='utf-8'))
  assert SCOREBOARD.OLD_UNKEPT not in saved
  assert saved[SCOREBOARD.UNKEPT] == ledger.unkept


def test_reasons_from_measured_numbers():
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.key == 'FedAvg | Table 1 2NN, IID, B=10, C=0.1: rounds to 97%'
  )
  details = dict(
    grid={'0.0464': 88.9, '0.215': 33.0},
    best_lr=0.215,
    judged=33.5,
    paper=87,
    seeds=[33.0, 35.7, 31.7],
  )
  reference = [
    dict(cell=row.key, lr=0.215, rounds_to_target=r) for r in (30.0, 36.0, 34.0)
  ]
  why = dict(SCOREBOARD.reasons(row, 'differs: 0.38×', details, reference))
  assert set(why) == {'cross-checked', 'η grid'}
  assert '88.9' in why['η grid'] and '33.3 ± 3.1' in why['cross-checked']
  # A reference that disagrees with ours is no cross-check; nor is one
  # that did not reach the target.
  far = [dict(r, rounds_to_target=80.0) for r in reference]
  assert 'cross-checked' not in dict(
    SCOREBOARD.reasons(row, 'differs', details, far)
  )
  short = reference[:2] + [dict(reference[2], rounds_to_target=None)]
  assert 'cross-checked' not in dict(
    SCOREBOARD.reasons(row, 'differs', details, short)
  )
  # Nothing measured or quoted: unexplained.
  assert SCOREBOARD.reasons(
    row, 'differs', dict(grid={'0.215': 33.0}, paper=87)
  ) == [('unexplained', '')]
  assert SCOREBOARD.reasons(row, 'matches', details) == []


def test_a_paper_value_inside_our_generated_datasets_spread_is_seed_spread():
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.key.startswith('FedISGD | Table 3, Synthetic_1_1, FedAvg')
  )
  inside = dict(paper=69.7, data_seeds={'0': 82.0, '1': 66.0, '2': 75.0})
  assert [r for r, _ in SCOREBOARD.reasons(row, 'differs', inside)] == [
    'seed spread'
  ]
  outside = dict(paper=69.7, data_seeds={'0': 82.0, '1': 80.0, '2': 85.0})
  ((reason, evidence),) = SCOREBOARD.reasons(row, 'differs', outside)
  assert reason == 'unexplained' and '80.0' in evidence


def test_an_accuracy_row_is_cross_checked_by_the_reference_agreeing():
  row = next(
    r
    for r in SCOREBOARD.ROWS
    if r.key.startswith('FedISGD | Table 4, MNIST, FedAvg')
  )
  reference = [
    dict(cell=row.key, last_half_test_accuracy=a) for a in (0.72, 0.66, 0.70)
  ]
  # Ours as the results without run folders state it, or per seed.
  why = dict(
    SCOREBOARD.reasons(
      row,
      'differs by -7.4 pp',
      {'paper': 76.7},
      reference,
      '69.3 ± 2.1 (3 seeds)',
    )
  )
  assert list(why) == ['cross-checked'] and '69.3 ± 2.1' in why['cross-checked']
  assert 'cross-checked' in dict(
    SCOREBOARD.reasons(
      row, 'differs', dict(paper=76.7, values=[67.0, 70.0, 71.0]), reference
    )
  )
  # A reference that agrees with the paper instead is no cross-check.
  near_paper = [dict(r, last_half_test_accuracy=0.765) for r in reference]
  assert 'cross-checked' not in dict(
    SCOREBOARD.reasons(
      row, 'differs', {'paper': 76.7}, near_paper, '69.3 ± 2.1 (3 seeds)'
    )
  )


def test_a_centralized_cell_is_judged_in_updates(tmp_path):
  """Table 3's SGD cells: rounds to target × the run's updates per round,
  the best of the η grid, judged within ±30% of the paper's updates."""
  command = tmp_path / 'fedavg_table3_cifar10_sgd'
  # Evaluated every 2 rounds of 500 updates; η = 0.1 reaches 80% at round
  # 36 (18,000 updates), 82% never.
  for lr in (0.0215, 0.0464, 0.1, 0.215, 0.464):
    folder = command / f'SGD_B100__client_lr-{lr}'
    folder.mkdir(parents=True)
    accuracies = [0.5, 0.79, 0.8, 0.81] if lr == 0.1 else [0.5, 0.6]
    (folder / 'metrics.csv').write_text(
      'round,train_loss,test_accuracy\n'
      + ''.join(
        f'{r * 2 + 32 * (r > 0)},{1 - a},{a}\n'
        for r, a in enumerate(accuracies)
      )
    )
    (folder / 'config.json').write_text(
      json.dumps(dict(algo='centralized', batch_size=100, rounds=400))
    )
    (folder / 'summary.json').write_text(
      json.dumps(dict(updates_per_round=500.0, examples_per_client=50000.0))
    )
  rows = [
    r for r in SCOREBOARD.ROWS if r.command == 'fedavg_table3_cifar10_sgd'
  ]
  assert [r.value for r in rows] == ['18000', '31000', '99000']
  runs = SCOREBOARD.Runs([str(tmp_path)])
  ours, status = SCOREBOARD.judge(rows[0], runs)
  assert (
    ours == '18,000 updates (η = 0.1 of {0.0215, 0.0464, 0.1, 0.215, 0.464})'
    and status == 'matches'
  )
  ours, status = SCOREBOARD.judge(rows[1], runs)
  assert status == 'differs: not reached in 19,000 updates'


def test_the_figure_1_rows_read_the_interpolation_csv():
  rows = [
    r for r in SCOREBOARD.ROWS if r.command == 'fedavg_fig1_interpolation'
  ]
  runs = _ledger_only()
  (left, left_status), (right, right_status) = (
    SCOREBOARD.judge(r, runs) for r in rows
  )
  assert '0.4419 / 1.1056 / 0.4619' in left and left_status == 'matches'
  assert '0.4304 / 0.3914 / 0.4619' in right and right_status == 'matches'


def test_a_figure_drawn_from_the_ledger_is_the_one_from_its_run_folders(
  tmp_path,
):
  """--figure draws a panel per swept value and a line per variant; once
  the run folders are recorded and gone, the ledger gives the same series
  (to the 6 significant digits the ledger keeps) and draws the figure;
  an unfinished run is left out."""
  ledger_path = tmp_path / 'ledger.json'
  root = tmp_path / 'runs'
  command = root / 'fedprox_fig1_shakespeare'
  for variant, legend in (('FedAvg', 'FedAvg'), ('FedProx_mu0', 'FedProx μ=0')):
    for fraction in (0, 0.9):
      folder = command / f'{variant}__straggler_fraction-{fraction}'
      folder.mkdir(parents=True)
      (folder / 'metrics.csv').write_text(
        'round,train_loss_sampled,test_accuracy\n0,4.123456789,0.1\n1,,\n'
        f'5,{2 + fraction / 3},0.3\n'
      )
      (folder / 'config.json').write_text('{"rounds": 5}')
      (folder / 'summary.json').write_text(json.dumps({'legend': legend}))
  (command / 'FedAvg__straggler_fraction-0.5').mkdir()  # Not finished.
  runs = SCOREBOARD.Runs([str(root)], SCOREBOARD.Ledger(str(ledger_path)))
  drawn = SCOREBOARD.figure_series(runs, command.name, 'train_loss_sampled')
  assert list(drawn) == ['0% stragglers', '90% stragglers']
  assert drawn['90% stragglers']['FedProx μ=0'] == ([0, 5], [4.12346, 2.3])
  runs.record()
  runs.ledger.save()
  clone = SCOREBOARD.Runs(
    [str(tmp_path / 'gone')], SCOREBOARD.Ledger(str(ledger_path))
  )
  again = SCOREBOARD.figure_series(clone, command.name, 'train_loss_sampled')
  assert again == drawn
  out = tmp_path / 'figure.png'
  SCOREBOARD.main(
    [
      f'--runs={tmp_path / "gone"}',
      f'--ledger={ledger_path}',
      f'--figure={command.name}',
      f'--out={out}',
    ]
  )
  assert out.stat().st_size > 0


@pytest.mark.parametrize(
  'flags, says',
  [
    (['--figure=fedprox_fig1_shakespeare'], '--figure needs --out'),
    (['--figure=no_such_command', '--out=OUT'], 'no finished runs'),
    (['--figure=fedprox_fig1_shakespeare', '--metric=x', '--out=OUT'], 'no x'),
    (['--figure=fedprox_fig1_shakespeare', '--out=GONE/f.png'], 'No such file'),
  ],
)
def test_a_figure_that_cannot_be_drawn_is_one_error(
  flags, says, tmp_path, capsys
):
  """--figure's bad input is a usage error (exit 2) naming the cause,
  and writes nothing."""
  flags = [
    f.replace('OUT', str(tmp_path / 'f.png')).replace(
      'GONE', str(tmp_path / 'x')
    )
    for f in flags
  ]
  with pytest.raises(SystemExit) as exited:
    SCOREBOARD.main(['--runs=' + str(tmp_path / 'none'), *flags])
  assert exited.value.code == 2
  assert says in capsys.readouterr().err.splitlines()[-1]
  assert not list(tmp_path.iterdir())
