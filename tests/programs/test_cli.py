"""run_experiment.py as a user runs it: flags, errors, outputs (issues 2, 13)."""

import pytest

from conftest import cli


@pytest.mark.parametrize('args', [
    ['--algo=fedfoo'], ['--rounds=0'], ['--task=nope'],
    ['--clients_per_round=31'], ['--client_lr=-0.1'],
    ['--straggler_fraction=1.5'], ['--algo=fedavg', '--mu=1'],
    ['--algo=fedsgd', '--epochs=5'], ['--batch_size=0'], ['--rounds=x'],
])
def test_invalid_flags_are_one_line_exit_2_and_write_nothing(tmp_path, args):
  out = tmp_path / 'run'
  result = cli(*args, f'--output_dir={out}')
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('run_experiment.py: error:')
  assert not out.exists()


def test_existing_results_are_not_overwritten(tmp_path):
  out = tmp_path / 'run'
  out.mkdir()
  (out / 'metrics.csv').write_text('precious')
  result = cli('--rounds=1', f'--output_dir={out}')
  assert result.returncode == 2 and '--overwrite' in result.stderr
  assert (out / 'metrics.csv').read_text() == 'precious'


@pytest.mark.slow
def test_cli_runs_and_writes_metrics(tmp_path):
  out = tmp_path / 'run'
  result = cli('--algo=fedprox', '--rounds=2', '--epochs=1',
                '--dissimilarity_every=1', f'--output_dir={out}')
  assert result.returncode == 0, result.stderr
  header, *rows = (out / 'metrics.csv').read_text().splitlines()
  assert header.startswith('round,train_loss,train_accuracy,test_loss,'
                           'test_accuracy,mu')
  assert len(rows) == 3 and all(r.split(',')[9] for r in rows)  # B logged.
  assert (out / 'config.json').exists() and (out / 'summary.json').exists()
