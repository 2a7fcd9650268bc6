"""The throughput benchmark still runs (its numbers are not asserted)."""

import json
import subprocess
import sys

from conftest import REPO


def test_throughput_benchmark_runs_and_reports_ratios(tmp_path):
  out = tmp_path / 'bench.json'
  result = subprocess.run(
      [sys.executable, 'benchmarks/throughput.py', '--workload=synthetic_mlr',
       '--rounds=1', '--warmup=1', f'--json={out}'],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'ours/tff_builtin' in result.stdout.strip().splitlines()[-1]
  report = json.loads(out.read_text())
  for name in ('ours', 'tff_builtin', 'fused'):
    assert report[name]['steps_per_second'] > 0
