"""The TFF runtime's lifetime and its loopback-only worker."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from conftest import cli
from conftest import listening_ips
from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import runtime
from tff_algos.runtime import local
from tff_algos.simulation import run_dir


def _workers_of(process):
  return [
    p
    for p in process.children(recursive=True)
    if 'worker_binary' in ' '.join(p.cmdline())
  ]


def _gone(process):
  try:
    return process.status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def _assert_listens_on_loopback_only(processes):
  listening = set().union(*(listening_ips(p.pid) for p in processes))
  assert listening
  assert listening <= {'127.0.0.1', '::ffff:127.0.0.1', '::1'}, listening


@pytest.mark.fast
def test_the_runtime_worker_accepts_loopback_connections_only(tff_runtime):
  tff_runtime.start()  # (An in-process CLI test may have stopped it.)
  worker = psutil.Process(tff_runtime.worker_pid())
  _assert_listens_on_loopback_only([worker])


@pytest.mark.fast
def test_a_computation_that_fails_in_the_worker_is_a_one_line_error(
  tff_runtime, tmp_path
):
  tff_runtime.start()

  @tff.tensorflow.computation(tf.string)
  def read(path):
    return tf.io.read_file(path)

  missing = str(tmp_path / 'missing')
  with pytest.raises(runtime.WorkerError) as error:
    read(missing)
  message = str(error.value)
  assert '\n' not in message
  assert message.startswith(
    f'a computation failed on the local TFF worker (pid '
    f'{tff_runtime.worker_pid()}): '
  )
  assert f'{missing}; No such file or directory' in message
  assert 'ReadFile' in message  # The failing node, from the next line.
  assert read(str(REPO / 'README.md')).startswith(b'#')  # Still serving.


@pytest.mark.fast
def test_without_a_c_compiler_no_exposed_runtime_worker_starts(
  tmp_path, monkeypatch
):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))  # No shim built yet,
  monkeypatch.setenv('CC', str(tmp_path / 'no-such-cc'))  # and none to be.
  monkeypatch.delenv('TFF_ALGOS_WORKER_LISTEN_ALL', raising=False)
  worker = local._Worker(max_concurrent_computation_calls=-1)
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


def _files_but_metrics(folder):
  """The run's files but the rows it is writing (metrics.csv, and the
  temporary file that replaces it)."""
  return {
    p.name: p.stat().st_mtime_ns
    for p in folder.iterdir()
    if p.is_file() and not p.name.startswith('metrics.csv')
  }


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
@pytest.mark.slow
def test_no_runtime_process_outlives_an_interrupted_run(tmp_path, sig):
  """And while the run holds its folder, a second process on it is refused
  naming the holder and changes nothing; the worker's log lives in the run
  folder, never in the temp folder (which a SIGKILL would leave it in)."""
  out, temp = tmp_path / 'run', tmp_path / 'tmp'
  temp.mkdir()
  metrics = out / 'metrics.csv'
  process = subprocess.Popen(
    [
      sys.executable,
      'run_experiment.py',
      '--rounds=100000',
      '--epochs=1',
      f'--output_dir={out}',
    ],
    cwd=REPO,
    env=dict(USER_ENV, TMPDIR=str(temp)),
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
  )
  deadline = time.monotonic() + 240
  while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
    assert process.poll() is None and time.monotonic() < deadline, 'no progress'
    time.sleep(0.2)
  workers = _workers_of(psutil.Process(process.pid))
  assert workers, 'the run should be using a TFF worker'
  _assert_listens_on_loopback_only(workers)
  before = _files_but_metrics(out)
  second = cli('--rounds=100000', '--epochs=1', f'--output_dir={out}')
  assert second.returncode == 2, second.stderr
  assert f'in use by process {process.pid}' in second.stderr
  assert second.stderr.strip().count('\n') == 0
  assert _files_but_metrics(out) == before
  process.send_signal(sig)
  # A worker holding our stdout/stderr would make this wait forever.
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == (128 + sig if sig != signal.SIGKILL else -sig), (
    stderr.decode()[-3000:]
  )
  if sig != signal.SIGKILL:  # One line naming the round, to resume from.
    word = 'interrupted' if sig == signal.SIGINT else 'terminated'
    last = stderr.decode().strip().splitlines()[-1]
    assert last.startswith(f'run_experiment.py: {word} at round ')
    assert last.endswith('; run the same command to resume')
    assert 'Traceback' not in stderr.decode()
  deadline = time.monotonic() + 10
  while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert all(_gone(w) for w in workers)
  assert metrics.read_text().startswith('round,')  # Rows so far are kept.
  assert not list(temp.glob('tff_worker*'))  # (TF's autograph files are.)
  assert (out / 'worker.log').exists()
  # The lock died with its holder: the folder can be held (resumed) again.
  with run_dir.RunDir(str(out)).hold():
    pass


_PREPARE_THEN_WAIT = """
import signal  # Ctrl-C raises here even if SIGINT came ignored (the
signal.signal(signal.SIGINT, signal.default_int_handler)  # suite run as a
# background job: its processes inherit that).
from tff_algos import runtime
runtime.prepare()  # The worker starts now, before TensorFlow is imported.
from tff_algos.runtime import prestart
print(prestart._PRESTARTED.process.pid, flush=True)
import time
time.sleep(600)
"""


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_worker_started_before_tensorflow_never_outlives_us(sig):
  """runtime.prepare() starts the worker first thing, so that it starts
  while TensorFlow is imported: it dies with its process whatever ends it,
  before the runtime ever adopted it."""
  process = subprocess.Popen(
    [sys.executable, '-c', _PREPARE_THEN_WAIT],
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  worker = psutil.Process(int(process.stdout.readline()))
  assert 'worker_binary' in ' '.join(worker.cmdline())
  deadline = time.monotonic() + 60
  while not listening_ips(worker.pid):
    assert time.monotonic() < deadline, 'the worker never listened'
    time.sleep(0.1)
  _assert_listens_on_loopback_only([worker])
  process.send_signal(sig)
  process.communicate(timeout=60)
  deadline = time.monotonic() + 10
  while not _gone(worker) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert _gone(worker)


_PREPARE_THEN_RUN = """
import sys
from tff_algos import runtime
runtime.prepare()
from tff_algos.runtime import prestart
prestarted = prestart._PRESTARTED.process.pid
import tensorflow_federated as tff
import numpy as np
runtime.install()
five = tff.tensorflow.computation(lambda: np.int32(5))
if sys.argv[2] == 'computes_first':  # As a run does before its folder.
  assert five() == 5
runtime.start(log_path=sys.argv[1])
assert runtime.worker_pid() == prestarted, 'not adopted'
print(five())
runtime.stop()
"""


@pytest.mark.parametrize('before', ['starts_first', 'computes_first'])
def test_the_worker_started_first_is_adopted_and_logs_to_the_run(
  tmp_path, before
):
  """The worker `runtime.prepare()` started is the run's, also when the
  run's first computations ran on it before the run's folder (and so its
  log) was known: its whole output goes to the log."""
  log = tmp_path / 'worker.log'
  env = dict(USER_ENV, TF_CPP_MIN_LOG_LEVEL='0')  # A chatty worker.
  result = subprocess.run(
    [sys.executable, '-c', _PREPARE_THEN_RUN, str(log), before],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ['5']
  # What it wrote before the run knew its folder, and after.
  assert log.read_text().strip()


_RUN_WITHOUT_START = """
import json
import pathlib
import sys

import psutil

import tasks
sys.path.append('tests')
import helpers
from tff_algos import runtime

helpers.run(
    pathlib.Path(sys.argv[1]), 'run', rounds=1, client_execution='per_client')
workers = [
    p.pid for p in psutil.Process().children(recursive=True)
    if 'worker_binary' in ' '.join(p.cmdline())
]
print(json.dumps(dict(ours=runtime.worker_pid(), workers=workers)))
"""


@pytest.mark.slow
def test_a_run_that_never_started_the_runtime_runs_on_it(tmp_path):
  """A notebook that runs (`experiment.run`; `trainer.train` and
  `trainer.loop_for` build through the same `trainer.build_for_run`)
  without `runtime.start()`:
  its computations run on our worker (loopback only, stopped with the
  process). Per-client clients ran on a worker of TFF's default context,
  which listens on every interface and is stopped only by a `__del__` that
  may not run (such workers were seen adopted by pid 1 after the run)."""
  result, left = helpers.run_and_reap(
    [sys.executable, '-c', _RUN_WITHOUT_START, str(tmp_path)],
    tmp_path,
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  pids = json.loads(result.stdout.strip().splitlines()[-1])
  assert pids['ours'] is not None and pids['workers'] == [pids['ours']], pids
  assert left == []  # No worker (nor anything else) outlived the run.
