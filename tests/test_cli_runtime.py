"""The command line and the TFF runtime's lifetime (issue 2)."""

import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import REPO
from conftest import cli
from conftest import listening_ips
from tff_algos import runtime


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


def _workers_of(process):
  return [p for p in process.children(recursive=True)
          if 'worker_binary' in ' '.join(p.cmdline())]


def _gone(process):
  try:
    return process.status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def _assert_listens_on_loopback_only(processes):
  listening = set().union(*(listening_ips(p.pid) for p in processes))
  assert listening
  assert listening <= {'127.0.0.1', '::ffff:127.0.0.1', '::1'}, listening


def test_the_runtime_worker_accepts_loopback_connections_only(tff_runtime):
  worker = psutil.Process(tff_runtime.worker_pid())
  _assert_listens_on_loopback_only([worker])


def test_without_a_c_compiler_no_exposed_runtime_worker_starts(
    tmp_path, monkeypatch):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))  # No shim built yet,
  monkeypatch.setenv('CC', str(tmp_path / 'no-such-cc'))  # and none to be.
  monkeypatch.delenv('TFF_ALGOS_WORKER_LISTEN_ALL', raising=False)
  worker = runtime._Worker(max_concurrent_computation_calls=-1)  # pylint: disable=protected-access
  with pytest.raises(runtime.WorkerError, match='C compiler.*LISTEN_ALL'):
    worker.stub()
  assert worker.process is None and worker.log_path is None
  monkeypatch.setenv('TFF_ALGOS_WORKER_LISTEN_ALL', '1')  # The opt-in.
  try:
    worker.stub()
    listening = listening_ips(worker.process.pid)
    assert listening & {'0.0.0.0', '::'}, listening
  finally:
    worker.stop()


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM,
                                 signal.SIGKILL])
def test_no_runtime_process_outlives_an_interrupted_run(tmp_path, sig):
  metrics = tmp_path / 'run' / 'metrics.csv'
  process = subprocess.Popen(
      [sys.executable, 'run_experiment.py', '--rounds=100000', '--epochs=1',
       f'--output_dir={tmp_path / "run"}'], cwd=REPO,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  deadline = time.monotonic() + 240
  while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
    assert process.poll() is None and time.monotonic() < deadline, 'no progress'
    time.sleep(0.2)
  workers = _workers_of(psutil.Process(process.pid))
  assert workers, 'the run should be using a TFF worker'
  _assert_listens_on_loopback_only(workers)
  process.send_signal(sig)
  # A worker holding our stdout/stderr would make this wait forever.
  process.communicate(timeout=60)
  assert process.returncode != 0
  deadline = time.monotonic() + 10
  while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert all(_gone(w) for w in workers)
  assert metrics.read_text().startswith('round,')  # Rows so far are kept.
