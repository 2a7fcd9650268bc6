"""Sweeps through the command line, and the papers' configs."""

import csv
import json

import pytest

from conftest import cli
from conftest import REPO
from tff_algos import run


@pytest.mark.slow
def test_sweep_command_runs_each_variant_and_writes_the_summary(tmp_path):
  flagfile = tmp_path / 'sweep.flags'
  flagfile.write_text(
    '\n'.join(
      [
        '--rounds=2',
        '--clients_per_round=5',
        '--epochs=1',
        '--target_accuracy=0.2',
        '--progress=false',
        '--variant=FedAvg: --algo=fedavg --mu=0',
        '--variant=FedProx: --algo=fedprox --mu=1',
      ]
    )
  )
  out = tmp_path / 'sweep'
  # Run in two halves with --only: the summary covers the command's whole
  # plan, so the second half keeps the first half's row.
  for variant in ('FedAvg', 'FedProx'):
    result = cli(
      f'--flagfile={flagfile}',
      '--sweep=seed=3',
      f'--only={variant}',
      f'--output_dir={out}',
    )
    assert result.returncode == 0, result.stderr
  for name in ('FedAvg__seed-3', 'FedProx__seed-3'):
    config = json.loads((out / name / 'config.json').read_text())
    assert config['seed'] == 3 and config['rounds'] == 2
  assert (
    json.loads((out / 'FedProx__seed-3' / 'config.json').read_text())['algo']
    == 'fedprox'
  )
  with open(out / 'summary.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [r['variant'] for r in rows] == ['FedAvg', 'FedProx']
  # Each run's median seconds a round, from its summary.json.
  assert all(float(r['seconds_per_round']) > 0 for r in rows)
  summary = (out / 'summary.csv').read_text()
  assert (out / 'summary.md').exists()
  assert (out / 'train_loss.png').stat().st_size > 0  # Seeds share a plot.

  # The whole sweep again trains no run and starts none (one process finds
  # every finished run, of the same settings and code) and rewrites the
  # same summary; a run whose folder holds other settings stops the sweep
  # with a hint; --overwrite replaces just the runs it trains (here the one
  # --only names).
  again = cli(f'--flagfile={flagfile}', '--sweep=seed=3', f'--output_dir={out}')
  assert again.returncode == 0, again.stderr
  assert [
    line for line in again.stderr.splitlines() if line.startswith('[')
  ] == [
    '[1/2] FedAvg__seed-3: finished',
    '[2/2] FedProx__seed-3: finished',
  ]
  assert (out / 'summary.csv').read_text() == summary
  other = cli(
    f'--flagfile={flagfile}',
    '--sweep=seed=3',
    '--rounds=1',
    f'--output_dir={out}',
  )
  assert other.returncode == 2  # Bad input: one line (after "[1/2] …").
  (error,) = [line for line in other.stderr.splitlines() if 'error' in line]
  assert 'rounds=2 there, 1 here' in error and 'pass --overwrite' in error
  assert 'did not finish' not in other.stderr
  assert (out / 'summary.csv').read_text() == summary
  replaced = cli(
    f'--flagfile={flagfile}',
    '--sweep=seed=3',
    '--rounds=1',
    '--overwrite',
    '--only=FedAvg',
    f'--output_dir={out}',
  )
  assert replaced.returncode == 0, replaced.stderr
  rounds = {
    name: json.loads((out / name / 'config.json').read_text())['rounds']
    for name in ('FedAvg__seed-3', 'FedProx__seed-3')
  }
  assert rounds == {'FedAvg__seed-3': 1, 'FedProx__seed-3': 2}


def test_sweep_with_a_bad_variant_runs_nothing(tmp_path):
  out = tmp_path / 'sweep'
  for variants, says in (
    (
      (
        '--variant=ok: --algo=fedavg --mu=0',
        '--variant=bad: --algo=fedavg --epochs=0',
      ),
      'epochs',
    ),
    (('--variant=A: --mu=1', '--variant=A: --mu=2'), '--variant A given twice'),
  ):
    result = cli(*variants, f'--output_dir={out}')
    assert result.returncode == 2
    assert result.stderr.strip().count('\n') == 0 and says in result.stderr
    assert not out.exists()


@pytest.mark.fast
@pytest.mark.parametrize(
  'config',
  sorted(
    str(p.relative_to(REPO)) for p in (REPO / 'configs').glob('*/*.flags')
  ),
)
def test_every_paper_config_is_valid(config):
  """Each flag file parses, and each run it expands to is a valid Config."""
  command = run.parse_command([f'--flagfile={REPO / config}'])
  if command.variants:
    assert len(command.run_plans) == len(command.runs) >= 2
  else:
    assert command.plan.config.rounds >= 1
