"""docs/scoreboard.py: every command it lists is a valid run_experiment.py
command line (flags parsed and every run of a sweep validated, as a dry run
does before it loads data), and every row names one of those commands."""

import importlib.util
import shlex

import pytest

from conftest import REPO


def _scoreboard():
  spec = importlib.util.spec_from_file_location(
      'scoreboard', REPO / 'docs' / 'scoreboard.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


SCOREBOARD = _scoreboard()


@pytest.mark.parametrize('name', sorted(SCOREBOARD.COMMANDS))
def test_every_scoreboard_command_is_valid(name, monkeypatch):
  from tff_algos import run  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)  # Its --flagfile paths are relative to the repo.
  words = shlex.split(SCOREBOARD.COMMANDS[name])
  assert words[:2] == ['.venv/bin/python', 'run_experiment.py']
  command = run.parse_command([*words[2:], f'--output_dir=runs/{name}'])
  if command.runs:
    assert len(command.run_plans) == len(command.runs) >= 1
  else:
    assert command.plan.config.rounds >= 1


def test_every_row_names_a_listed_command():
  for row in SCOREBOARD.ROWS:
    if row.command is None:
      assert row.reason, row.item  # Not run: it says why.
    elif not row.command.startswith(('task ', 'fedprox_fig1_*')):
      assert row.command in SCOREBOARD.COMMANDS, row.item


def _run(folder, accuracies, finished=True):
  folder.mkdir(parents=True)
  (folder / 'metrics.csv').write_text(
      'round,train_loss,test_accuracy\n' +
      ''.join(f'{r * 5},{1 - a},{a}\n' for r, a in enumerate(accuracies)))
  (folder / 'config.json').write_text(
      '{"epochs": 1, "batch_size": 10, "rounds": 4000}')
  if finished:
    (folder / 'summary.json').write_text('{"examples_per_client": 600}')


def test_a_cell_is_judged_on_its_full_eta_grid_only(tmp_path):
  """Table 1's C = 0.1 cell: the best η of a finished grid of five, inside
  it; C = 0.2, with a run stopped half-way, is "not finished" (and only
  it); C = 0.5 has no run."""
  command = tmp_path / 'fedavg_table1_2nn_b10_iid'
  grid = (0.0215, 0.0464, 0.1, 0.215, 0.464)
  # Evaluated every 5 rounds; the best: η = 0.1, at 97% by round 4.375.
  curves = ([0.5, 0.9, 0.96], [0.5, 0.96, 0.98], [0.9, 0.98],
            [0.5, 0.9, 0.95, 0.99], [0.5, 0.6])
  for lr, accuracies in zip(grid, curves):
    _run(command / f'C0.1__task-mnist_iid_2nn__client_lr-{lr}', accuracies)
  _run(command / 'C0.2__task-mnist_iid_2nn__client_lr-0.0215', [0.5],
       finished=False)
  runs = SCOREBOARD.Runs([str(tmp_path)])
  rows = {row.item.split('C=')[1].split(':')[0]: row for row in SCOREBOARD.ROWS
          if row.command == 'fedavg_table1_2nn_b10_iid'}
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert ours.startswith('4 (η = 0.1 of {0.0215, 0.0464, 0.1, 0.215, 0.464})')
  assert 'edge' not in ours and status == 'differs: 0.05× the paper\'s rounds'
  # Seeds re-run at the best η: their mean is what the status judges.
  for seed, accuracies in ((0, [0.9, 0.98]), (1, [0.5, 0.9, 0.95, 0.96] +
                                               [0.96] * 12 + [0.98])):
    _run(tmp_path / 'fedavg_table1_2nn_b10_iid_seeds' /
         f'C0.1__task-mnist_iid_2nn__client_lr-0.1__seed-{seed}', accuracies)
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert ours.endswith('; seeds at that η: 41 ± 52 (2 of 2 reached)')
  assert status == 'differs: 0.47× the paper\'s rounds'  # (4.375 + 77.5) / 2.
  assert SCOREBOARD.judge(rows['0.2'], runs)[1].startswith('not finished')
  assert SCOREBOARD.judge(rows['0.5'], runs)[1].startswith('not run (≤')
  # A grid still missing values is reported, not judged.
  (command / 'C0.1__task-mnist_iid_2nn__client_lr-0.464' / 'summary.json'
   ).unlink()
  ours, status = SCOREBOARD.judge(rows['0.1'], runs)
  assert (ours, status) == ('4 so far', 'not finished: 4 of 5 η values run')
