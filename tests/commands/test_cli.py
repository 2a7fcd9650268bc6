"""run_experiment.py as a user runs it: flags, errors, outputs."""

import json
import subprocess
import sys

import pytest

from conftest import cli
from conftest import USER_ENV
from tff_algos.plot import main as plot_main


@pytest.mark.parametrize(
  'args',
  [
    ['--algo=fedfoo'],
    ['--rounds=0'],
    # One case in the fast set: a process that refuses before importing
    # TensorFlow.
    pytest.param(['--task=nope'], marks=pytest.mark.fast),
    ['--clients_per_round=0'],
    ['--clients_per_round=-3'],
    ['--seed=-1'],
    ['--seed=4294967296'],
    ['--data_seed=-1'],
    ['--client_lr=inf'],
    ['--client_lr=nan'],
    ['--eval_clients=0'],
    ['--hparam=x=1'],
    ['--clients_per_round=31'],
    ['--client_lr=-0.1'],
    ['--straggler_fraction=1.5'],
    ['--algo=fedavg', '--mu=1'],
    ['--algo=fedsgd', '--epochs=5'],
    ['--batch_size=0'],
    ['--rounds=x'],
  ],
)
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
  result = cli(
    '--algo=fedprox',
    '--rounds=2',
    '--epochs=1',
    '--dissimilarity_every=1',
    '--eval_clients=7',
    f'--output_dir={out}',
  )
  assert result.returncode == 0, result.stderr
  assert 'seed 0 (data seed 0), train metrics over 7 clients' in result.stderr
  header, *rows = (out / 'metrics.csv').read_text().splitlines()
  # Over a sample of the clients: the training metrics' columns say so.
  assert header.startswith(
    'round,train_loss_sampled,train_accuracy_sampled,test_loss,test_accuracy,mu'
  )
  assert ',train_loss,' not in header
  assert 'grad_dissimilarity' in header and ',B,' not in header
  assert len(rows) == 3 and all(r.split(',')[9] for r in rows)  # B(w).
  assert (out / 'config.json').exists()
  summary = json.loads((out / 'summary.json').read_text())
  assert summary['train_metrics_over'] == '7 of 30 clients (--eval_clients)'
  assert summary['final_train_loss_sampled'] == float(rows[-1].split(',')[1])
  assert 'final_train_loss' not in summary
  assert plot_main([str(out), f'--out={tmp_path / "loss.png"}']) == 0
  assert (tmp_path / 'loss.png').stat().st_size  # The sampled loss, plotted.
  bad = cli('--eval_clients=31', f'--output_dir={tmp_path / "bad"}')
  assert bad.returncode == 2 and 'more than the 30 clients' in bad.stderr


@pytest.mark.slow
def test_a_script_using_the_package_prints_only_its_own_output(tmp_path):
  """No TensorFlow log lines, no exception at exit."""
  script = (
    'from tff_algos.algorithms import fedavg\n'
    'import tasks\n'
    'task = tasks.load_task("synthetic_1_1")\n'
    'fedavg.build_fed_avg(task.model_fn, 0.1)\n'
    'print("built")\n'
  )
  result = subprocess.run(
    [sys.executable, '-c', script],
    cwd=tmp_path,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert (result.returncode, result.stdout, result.stderr) == (0, 'built\n', '')
