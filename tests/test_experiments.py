"""Runs that survive (checkpoint/resume), sweeps and results (issue 5)."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from conftest import REPO
from conftest import USER_ENV
from conftest import cli
import helpers
from tff_algos import experiment
from tff_algos import results
from tff_algos import sweep

# A short FedProx run with stragglers and adaptive μ: its checkpoints must
# carry the process state, μ and the adaptive rule's counters.
RUN_FLAGS = ('--task=synthetic_1_1', '--algo=fedprox', '--rounds=8',
             '--clients_per_round=5', '--epochs=2', '--mu=0.5',
             '--adaptive_mu', '--straggler_fraction=0.5',
             '--checkpoint_every=1', '--progress=false')


def _rows_written(path):
  try:
    with open(path, newline='') as f:
      return len(list(csv.DictReader(f)))
  except (OSError, csv.Error):
    return 0


def _kill_after_rows(out, rows):
  """Starts the run and SIGKILLs it once metrics.csv has `rows` rows."""
  process = subprocess.Popen(
      [sys.executable, 'run_experiment.py', *RUN_FLAGS, f'--output_dir={out}'],
      cwd=REPO, env=USER_ENV, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 300
  while _rows_written(out / 'metrics.csv') < rows:
    assert process.poll() is None, 'the run ended before it was killed'
    assert time.monotonic() < deadline
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()


def test_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path):
  whole, killed = tmp_path / 'whole', tmp_path / 'killed'
  assert cli(*RUN_FLAGS, f'--output_dir={whole}').returncode == 0
  _kill_after_rows(killed, 3)  # Killed twice, at different rounds.
  _kill_after_rows(killed, 7)
  resumed = cli(*RUN_FLAGS, f'--output_dir={killed}', '--resume')
  assert resumed.returncode == 0, resumed.stderr
  assert '(resuming)' in resumed.stderr
  assert ((killed / 'metrics.csv').read_bytes() ==
          (whole / 'metrics.csv').read_bytes())
  summary = json.loads((killed / 'summary.json').read_text())
  assert summary['resumed_from_round'] >= 5
  assert summary['final_train_loss'] == json.loads(
      (whole / 'summary.json').read_text())['final_train_loss']
  # Old checkpoints are pruned; none is left half-written.
  assert sorted(os.listdir(killed / 'checkpoints')) == ['round_7', 'round_8']


def test_finished_and_different_runs_are_left_alone(tmp_path):
  out = tmp_path / 'run'
  flags = ('--rounds=2', '--epochs=1', f'--output_dir={out}')
  assert cli(*flags).returncode == 0
  before = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}

  again = cli(*flags)  # The same command: nothing to do.
  assert again.returncode == 0 and 'already holds' in again.stderr
  other = cli(*flags[1:], '--rounds=3')  # Another config: refused.
  assert other.returncode == 2, other.stderr
  assert other.stderr.count('\n') == 1 and 'rounds=2 there, 3 here' in (
      other.stderr)
  fresh = cli('--resume', f'--output_dir={tmp_path / "none"}')
  assert fresh.returncode == 2 and 'no run to resume' in fresh.stderr
  assert {p: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

  replaced = cli(*flags[1:], '--rounds=3', '--overwrite')
  assert replaced.returncode == 0, replaced.stderr
  assert results.summarize(out)['rounds'] == 3


def test_metrics_reach_tensorboard_with_the_rounds_as_steps(tmp_path):
  out = tmp_path / 'run'
  assert cli('--rounds=2', '--epochs=1', f'--output_dir={out}').returncode == 0
  losses = {}
  for event_file in (out / 'tensorboard').iterdir():
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        if value.tag == 'train_loss':
          losses[event.step] = float(tf.make_ndarray(value.tensor))
  rows = results.read_rows(out)
  assert losses == pytest.approx(
      {int(r['round']): float(r['train_loss']) for r in rows}, rel=1e-6)


def test_rounds_to_target_is_monotone_and_interpolated():
  # Best so far: 0.5, 0.7, 0.7, 0.9 -> 0.8 is crossed half-way through 2..3.
  assert results.rounds_to_target([0, 1, 2, 3], [0.5, 0.7, 0.6, 0.9],
                                   0.8) == pytest.approx(2.5)
  # Evaluated every 5 rounds: 0.2 -> 0.6 from round 5 to 10.
  assert results.rounds_to_target([0, 5, 10], [0.1, 0.2, 0.6],
                                  0.3) == pytest.approx(6.25)
  assert results.rounds_to_target([0, 1], [0.5, 0.7], 0.5) == 0
  assert results.rounds_to_target([0, 1, 2], [0.5, 0.9, 0.6], 0.95) is None


def test_last_half_mean_and_updates_per_round():
  assert results.last_half_mean([0, 1, 2, 3, 4], [9, 9, 9, 1, 3], 4) == 2
  assert results.updates_per_round(5, 10, 600) == 300  # FedAvg Table 2.
  assert results.updates_per_round(1, -1, 600) == 1    # FedSGD: B = ∞.


def _fake_run(run_dir, accuracies, epochs=1, batch_size=10):
  run_dir.mkdir(parents=True)
  with open(run_dir / 'metrics.csv', 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'train_loss', 'test_accuracy'])
    for round_num, accuracy in enumerate(accuracies):
      writer.writerow([round_num, 1 - accuracy, accuracy])
  (run_dir / 'config.json').write_text(json.dumps(
      dict(epochs=epochs, batch_size=batch_size)))
  (run_dir / 'summary.json').write_text(json.dumps(
      dict(examples_per_client=600)))


def test_sweep_expands_overrides_and_tables_speedups(tmp_path):
  runs = sweep.expand(
      ['slow: --algo=fedsgd', 'fast: --epochs=5', 'slow: --algo=fedavg'],
      ['seed=0,1', 'task=a', 'task=b'])
  assert [r.name for r in runs] == [
      'slow__seed-0__task-b', 'fast__seed-0__task-b',
      'slow__seed-1__task-b', 'fast__seed-1__task-b']
  assert runs[0].args == ('--algo=fedavg', '--seed=0', '--task=b')
  assert [r.name for r in sweep.expand(['a: --x=1', 'b: --x=2'], [],
                                       only=['b'])] == ['b']
  for text in ('no colon', 'name: not-a-flag'):
    with pytest.raises(ValueError):
      sweep.expand([text], [])
  with pytest.raises(ValueError, match='no variant c'):
    sweep.expand(['a: --x=1'], [], only=['c'])

  for run, accuracies in zip(runs, ([0.1, 0.5, 0.7, 0.9], [0.1, 0.9],
                                    [0.1, 0.2, 0.3, 0.4], [0.1, 0.95])):
    _fake_run(tmp_path / run.name, accuracies,
              epochs=5 if run.variant == 'fast' else 1)
  rows = sweep.table(runs, str(tmp_path), target_accuracy=0.8)
  assert [r['rounds_to_target'] for r in rows] == [
      pytest.approx(2.5), pytest.approx(0.875), None, pytest.approx(0.7 / 0.85)]
  assert rows[1]['speedup'] == pytest.approx(2.5 / 0.875)
  assert rows[3]['speedup'] is None  # Its baseline never reached 80%.
  assert rows[1]['u'] == 300 and rows[0]['u'] == 60
  sweep.write_summary(rows, str(tmp_path), 0.8)
  with open(tmp_path / 'summary.csv', newline='') as f:
    assert [r['run'] for r in csv.DictReader(f)] == [r.name for r in runs]
  assert '| slow__seed-0__task-b | slow | 0 | b |' in (
      tmp_path / 'summary.md').read_text()


def test_sweep_command_runs_each_variant_and_writes_the_summary(tmp_path):
  flagfile = tmp_path / 'sweep.flags'
  flagfile.write_text('\n'.join([
      '--rounds=2', '--clients_per_round=5', '--epochs=1',
      '--target_accuracy=0.2', '--progress=false',
      '--variant=FedAvg: --algo=fedavg --mu=0',
      '--variant=FedProx: --algo=fedprox --mu=1']))
  out = tmp_path / 'sweep'
  result = cli(f'--flagfile={flagfile}', '--sweep=seed=3',
                f'--output_dir={out}')
  assert result.returncode == 0, result.stderr
  for name in ('FedAvg__seed-3', 'FedProx__seed-3'):
    config = json.loads((out / name / 'config.json').read_text())
    assert config['seed'] == 3 and config['rounds'] == 2
  assert json.loads((out / 'FedProx__seed-3' / 'config.json').read_text())[
      'algo'] == 'fedprox'
  with open(out / 'summary.csv', newline='') as f:
    assert [r['variant'] for r in csv.DictReader(f)] == ['FedAvg', 'FedProx']
  assert (out / 'summary.md').exists()
  assert (out / 'train_loss__seed-3.png').stat().st_size > 0


def test_sweep_with_a_bad_variant_runs_nothing(tmp_path):
  out = tmp_path / 'sweep'
  result = cli('--variant=ok: --algo=fedavg --mu=0',
                '--variant=bad: --algo=fedavg --epochs=0',
                f'--output_dir={out}')
  assert result.returncode == 2
  assert result.stderr.strip().count('\n') == 0 and 'epochs' in result.stderr
  assert not out.exists()


def test_non_finite_loss_stops_the_run_and_keeps_its_metrics(tmp_path,
                                                           monkeypatch):
  # TFF's apply-optimizer finalizer rejects non-finite updates, so a huge
  # learning rate leaves the model as it was: a divergence is simulated
  # instead, the global loss turning NaN from round 2 on.
  build_evaluation = experiment.evaluation.build_evaluation

  def diverging_at_round_2(model_fn):
    evaluate, calls = build_evaluation(model_fn), []

    def patched(weights, arrays):
      calls.append(1)  # Two calls (train, test) per round.
      metrics = dict(evaluate(weights, arrays))
      if len(calls) > 4:
        metrics['loss'] = math.nan
      return metrics
    return patched

  monkeypatch.setattr(experiment.evaluation, 'build_evaluation',
                      diverging_at_round_2)
  task, _ = helpers.task_and_arrays()
  out = tmp_path / 'run'
  with pytest.raises(experiment.NonFiniteLoss, match='nan at round 2;'):
    experiment.run(helpers.quick_config(rounds=5), task, str(out),
                   show_progress=False)
  rows = results.read_rows(str(out))
  assert [r['round'] for r in rows] == ['0', '1', '2']
  assert rows[-1]['train_loss'] == 'nan'
  assert not (out / 'summary.json').exists()


@pytest.mark.parametrize('config', sorted(
    str(p.relative_to(REPO)) for p in (REPO / 'configs').glob('*/*.flags')))
def test_every_paper_config_is_valid(config):
  """Each flag file parses, and each run it expands to is a valid Config."""
  import run_experiment  # pylint: disable=g-import-not-at-top
  run_experiment._ARGV.clear()  # pylint: disable=protected-access
  run_experiment.FLAGS.unparse_flags()
  argv = ['run_experiment.py', f'--flagfile={REPO / config}']
  run_experiment.parse_flags(argv)
  if run_experiment.FLAGS.variant:
    runs, _ = run_experiment.sweep_plan(argv[0])
    assert len(runs) >= 2
  else:
    assert run_experiment.checked_config().rounds >= 1
