"""Run folders' results, sweep expansion and tables (no TensorFlow)."""

import csv
import json
import os

import pytest

from tff_algos.analysis import sweep
from tff_algos.simulation import results

pytestmark = pytest.mark.fast  # Few tests, each cheap: all in the fast set.


def test_rounds_to_target_is_monotone_and_interpolated():
  # Best so far: 0.5, 0.7, 0.7, 0.9 -> 0.8 is crossed half-way through 2..3.
  assert results.rounds_to_target(
    [0, 1, 2, 3], [0.5, 0.7, 0.6, 0.9], 0.8
  ) == pytest.approx(2.5)
  # Evaluated every 5 rounds: 0.2 -> 0.6 from round 5 to 10.
  assert results.rounds_to_target(
    [0, 5, 10], [0.1, 0.2, 0.6], 0.3
  ) == pytest.approx(6.25)
  assert results.rounds_to_target([0, 1], [0.5, 0.7], 0.5) == 0
  assert results.rounds_to_target([0, 1, 2], [0.5, 0.9, 0.6], 0.95) is None


def test_last_half_mean_and_updates_per_round():
  assert results.last_half_mean([0, 1, 2, 3, 4], [9, 9, 9, 1, 3], 4) == 2
  assert results.updates_per_round(5, 10, 600) == 300  # FedAvg Table 2.
  assert results.updates_per_round(1, -1, 600) == 1  # FedSGD: B = ∞.


def _fake_run(run_dir, accuracies, epochs=1, batch_size=10):
  run_dir.mkdir(parents=True)
  with open(run_dir / 'metrics.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'train_loss', 'test_accuracy'])
    for round_num, accuracy in enumerate(accuracies):
      writer.writerow([round_num, 1 - accuracy, accuracy])
  (run_dir / 'config.json').write_text(
    json.dumps(dict(epochs=epochs, batch_size=batch_size))
  )
  (run_dir / 'summary.json').write_text(
    json.dumps(dict(examples_per_client=600))
  )


def test_sweep_expands_overrides_and_tables_speedups(tmp_path):
  runs = sweep.expand(
    ['slow: --algo=fedsgd', 'fast: --epochs=5', 'slow: --algo=fedavg'],
    ['seed=0,1', 'task=a', 'task=b'],
  )
  assert [r.name for r in runs] == [
    'slow__seed-0__task-b',
    'fast__seed-0__task-b',
    'slow__seed-1__task-b',
    'fast__seed-1__task-b',
  ]
  assert runs[0].args == ('--algo=fedavg', '--seed=0', '--task=b')
  assert [
    r.name for r in sweep.expand(['a: --x=1', 'b: --x=2'], [], only=['b'])
  ] == ['b']
  for text in ('no colon', 'name: not-a-flag'):
    with pytest.raises(ValueError):
      sweep.expand([text], [])
  with pytest.raises(ValueError, match='no variant c'):
    sweep.expand(['a: --x=1'], [], only=['c'])

  for run, accuracies in zip(
    runs, ([0.1, 0.5, 0.7, 0.9], [0.1, 0.9], [0.1, 0.2, 0.3, 0.4], [0.1, 0.95])
  ):
    _fake_run(
      tmp_path / run.name, accuracies, epochs=5 if run.variant == 'fast' else 1
    )
  rows = sweep.table(runs, str(tmp_path), target_accuracy=0.8)
  assert [r['rounds_to_target'] for r in rows] == [
    pytest.approx(2.5),
    pytest.approx(0.875),
    None,
    pytest.approx(0.7 / 0.85),
  ]
  assert rows[1]['speedup'] == pytest.approx(2.5 / 0.875)
  assert rows[3]['speedup'] is None  # Its baseline never reached 80%.
  assert rows[1]['updates_per_round'] == 300
  assert rows[0]['updates_per_round'] == 60
  (tmp_path / 'summary_seeds.csv').write_text("an older sweep's\n")
  _, paths = sweep.write_summary(rows, str(tmp_path), 0.8)
  # One seed: no summary_seeds.csv written, so none reported written.
  assert paths == [str(tmp_path / 'summary.csv'), str(tmp_path / 'summary.md')]
  with open(tmp_path / 'summary.csv', newline='') as f:
    assert [r['run'] for r in csv.DictReader(f)] == [r.name for r in runs]
  assert (
    '| slow__seed-0__task-b | slow | 0 | b |'
    in (tmp_path / 'summary.md').read_text()
  )
  # A summary never shrinks: fewer rows with results leave it as it was.
  written = (tmp_path / 'summary.csv').read_text()
  assert sweep.write_summary(rows[:1], str(tmp_path), 0.8) is None
  assert (tmp_path / 'summary.csv').read_text() == written


def test_plot_draws_seeds_of_one_setting_as_one_band(tmp_path):
  from tff_algos import plot as plot_command
  from tff_algos.analysis import plot

  runs = []
  for name, seed, epochs in (('a0', 0, 1), ('a1', 1, 1), ('b0', 0, 5)):
    _fake_run(tmp_path / name, [0.1, 0.5, 0.8], epochs=epochs)
    config = json.loads((tmp_path / name / 'config.json').read_text())
    (tmp_path / name / 'config.json').write_text(
      json.dumps(dict(config, seed=seed))
    )
    runs.append(str(tmp_path / name))
  assert plot.seed_groups(runs) == [runs[:2], runs[2:]]
  out = tmp_path / 'loss.png'
  assert plot_command.main([*runs, f'--out={out}']) == 0
  assert out.stat().st_size > 0


def test_a_damaged_run_is_left_out_of_the_sweep_plots_as_of_its_table(tmp_path):
  """A run whose metrics.csv is damaged is left out of the summary table
  with a note, and so of the plots (which once stopped on it)."""
  runs = sweep.expand(['a: --epochs=1', 'b: --epochs=5'], [])
  for run in runs:
    _fake_run(tmp_path / run.name, [0.1, 0.5, 0.8])
  with open(tmp_path / runs[1].name / 'metrics.csv', 'a') as f:
    f.write('15,0.1,x\n')  # Not a number.
  rows = sweep.table(runs, str(tmp_path))
  assert 'rounds' in rows[0] and 'rounds' not in rows[1]
  written = sweep.plot_runs(runs, rows, str(tmp_path))
  assert written and all(os.path.getsize(p) > 0 for p in written)
