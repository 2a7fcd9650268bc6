"""The throughput benchmark still runs (its numbers are not asserted)."""

import json
import subprocess

import pytest

from conftest import REPO
from conftest import SHARED_DATA
from conftest import USER_ENV
import warm

NOT_IN_FAST_SET = (
  'each test runs benchmarks/throughput.py as a process that imports '
  'TensorFlow (11 s and more), and the benchmark is no module of the package'
)


def _run_benchmark(tmp_path, workload, *flags):
  out = tmp_path / 'bench.json'
  result = subprocess.run(
    warm.command(
      'benchmarks/throughput.py',
      f'--workload={workload}',
      # One round, not warmed up: what is checked is that every runner
      # runs and the report adds up, not its rate.
      '--rounds=1',
      '--warmup=0',
      f'--json={out}',
      *flags,
    ),
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  ratios, overhead = result.stdout.strip().splitlines()[-2:]
  assert 'ours/tff_builtin' in ratios and 'ours_production/' in ratios
  assert 'per-round overhead' in overhead
  report = json.loads(out.read_text())
  # The split: a rest that is an overhead, or none where ours' round takes
  # less than its steps at the fused loop's rate.
  ours, steps = (
    report['ours']['seconds_per_round'],
    report['local_steps_seconds_per_round'],
  )
  if report['overhead_seconds_per_round'] is None:
    assert ours < steps and 'no per-round overhead' in overhead
  else:
    assert report['overhead_seconds_per_round'] == pytest.approx(ours - steps)
    assert report['overhead_seconds_per_round'] >= 0
  for name in ('ours', 'tff_builtin', 'fused', 'ours_production'):
    assert report[name]['steps_per_second'] > 0
    assert report[name]['steps_per_cpu_second'] > 0
  return report


@pytest.mark.slow
def test_throughput_benchmark_runs_and_reports_ratios(tmp_path):
  """synthetic_mlr (FedProx, μ = 1) shrunk to two clients and one epoch:
  what is checked is that each runner runs and the report adds up, which
  takes no particular number of steps."""
  report = _run_benchmark(
    tmp_path, 'synthetic_mlr', '--clients_per_round=2', '--epochs=1'
  )
  assert (report['clients_per_round'], report['epochs']) == (2, 1)
  assert report['ratio_ours_over_tff_builtin'] > 0


@pytest.mark.slow
def test_throughput_benchmark_runs_a_fed_avg_dataset_workload(tmp_path):
  """mnist_cnn shrunk to one client and one epoch (FedAvg: μ = 0)."""
  if not (SHARED_DATA / 'mnist').is_dir():
    pytest.skip(f'needs MNIST in {SHARED_DATA}/mnist')
  report = _run_benchmark(
    tmp_path,
    'mnist_cnn',
    f'--data_dir={SHARED_DATA}',
    '--clients_per_round=1',
    '--epochs=1',
  )
  assert (report['clients_per_round'], report['epochs']) == (1, 1)


def test_throughput_benchmark_without_its_data_is_one_line_exit_2(tmp_path):
  out = tmp_path / 'bench.json'
  result = subprocess.run(
    warm.command(
      'benchmarks/throughput.py',
      '--workload=mnist_cnn',
      f'--data_dir={tmp_path}',
      f'--json={out}',
    ),
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('throughput.py: error: MNIST')
  assert not out.exists()
