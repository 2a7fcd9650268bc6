"""Run folders' results, sweep expansion and tables (no TensorFlow)."""

import csv
import json
import os

import pytest

from tff_algos.analysis import sweep
from tff_algos.simulation import results
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

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


def _settings_json(**values):
  """A config.json's settings, as a run of `values` records them."""
  config = Config.create(rounds=3, clients_per_round=5, epochs=1, **values)
  return resolve(config).to_json()


def test_the_sweep_summary_gives_each_runs_seconds_per_round(tmp_path):
  """From each run's summary.json (wall time: never in metrics.csv); a run
  without a summary (unfinished) has none."""
  runs = sweep.expand(['a: --epochs=1', 'b: --epochs=5', 'c: --epochs=2'], [])
  for run, seconds in zip(runs, (0.25, 1.5, None)):
    _fake_run(tmp_path / run.name, [0.1, 0.5, 0.8])
    summary = tmp_path / run.name / 'summary.json'
    if seconds is None:
      summary.unlink()
    else:
      summary.write_text(json.dumps(dict(median_seconds_per_round=seconds)))
  sweep.write_summary(sweep.table(runs, str(tmp_path)), str(tmp_path))
  with open(tmp_path / 'summary.csv', newline='') as f:
    seconds = [row['seconds_per_round'] for row in csv.DictReader(f)]
  assert seconds == ['0.25', '1.5', '']
  markdown = (tmp_path / 'summary.md').read_text()
  assert '- seconds_per_round: the median seconds a round took' in markdown


def test_the_plot_command_on_a_sweep_folder_says_what_to_pass(tmp_path, capsys):
  """One line, exit 2: the run folders in it and the sweep's own plots
  (not that its metrics.csv, which it does not have, has no rounds)."""
  from tff_algos import plot as plot_command

  runs = sweep.expand(['a: --epochs=1', 'b: --epochs=5'], [])
  for run in runs:
    _fake_run(tmp_path / run.name, [0.1, 0.5, 0.8])
  rows = sweep.table(runs, str(tmp_path))
  sweep.write_summary(rows, str(tmp_path))
  sweep.plot_runs(runs, rows, str(tmp_path))
  (tmp_path / 'empty').mkdir()
  out = tmp_path / 'out.png'
  for folder, says in (
    (tmp_path, [f'{tmp_path / "a"} {tmp_path / "b"}', 'train_loss.png']),
    (tmp_path / 'empty', ['not a run folder', 'the --output_dir of a run']),
  ):
    with pytest.raises(SystemExit) as stopped:
      plot_command.main([str(folder), f'--out={out}'])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert all(s in line for s in says), line
    assert 'no rounds' not in line
  assert not out.exists()


def test_a_sweep_plot_names_each_variants_hyper_parameters_under_its_title(
  tmp_path, monkeypatch
):
  """A line is named as a single-run plot names it (FedProx with its μ),
  after the variant's name where that differs; the wrapped title stands
  clear of the column's description over the axes (their rendered boxes
  do not overlap: a formula's height once pushed the description into
  the title)."""
  from tff_algos.analysis import plot

  runs = sweep.expand(
    ['FedAvg: --algo=fedavg', 'small_mu: --algo=fedprox --mu=0.01'],
    ['dissimilarity_every=5', 'eval_every=1'],
  )
  for run, algorithm in zip(runs, (dict(algo='fedavg'), dict(algo='fedprox'))):
    _fake_run(tmp_path / run.name, [0.1, 0.5, 0.8])
    settings = _settings_json(
      **algorithm, **({'mu': 0.01} if run.variant == 'small_mu' else {})
    )
    (tmp_path / run.name / 'config.json').write_text(json.dumps(settings))
  figures = {}
  monkeypatch.setattr(
    plot, '_write', lambda figure, out: figures.update({out: figure})
  )
  try:
    sweep.plot_runs(runs, sweep.table(runs, str(tmp_path)), str(tmp_path))
    figure = figures[
      str(tmp_path / 'train_loss__dissimilarity_every-5__eval_every-1.png')
    ]
    axes = figure.axes[0]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ['FedAvg', 'small_mu: FedProx μ=0.01']
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    (note,) = axes.texts
    assert note.get_text().startswith('train_loss: ')
    assert '\n' in axes.get_title()  # Wrapped: two lines at least.
    title_bottom = axes.title.get_window_extent(renderer).y0
    assert title_bottom > note.get_window_extent(renderer).y1
  finally:
    plot._pyplot().close('all')


def test_a_plot_names_settings_as_their_declarations_say(tmp_path):
  """Labels and titles come from the settings' declarations: the setting
  the runs differ in is in each label in its declared form; the shared
  ones in the title, the task first, without the values a reader assumes
  (`plain`) or those declared label-only (`in_title=False`); and every
  declared label formats a value of its setting's type."""
  from tff_algos.analysis import plot
  from tff_algos.simulation.declarations import SETTINGS

  runs = []
  for lr in (0.1, 0.05):
    run_dir = tmp_path / f'lr{lr}'
    _fake_run(run_dir, [0.1, 0.5])
    (run_dir / 'config.json').write_text(
      json.dumps(
        dict(algo='fedavg', task='synthetic_1_1', client_lr=lr, rounds=7)
      )
    )
    runs.append([str(run_dir)])
  title, labels = plot.describe(runs)
  assert labels == ['FedAvg, η=0.1', 'FedAvg, η=0.05']
  assert title.startswith('synthetic_1_1, K=10, E=')
  assert 'stragglers' not in title and 'sgd' not in title  # Plain values.
  assert 'rounds' not in title  # Label-only.
  for s in SETTINGS:
    if s.label:
      value = s.choices[0] if s.choices else s.kind(1)
      assert plot.setting_text(s.record_key, value) != f'{s.record_key}={value}'
