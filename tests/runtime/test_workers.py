"""Remote TFF workers (`--workers`), tested with two on loopback."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import portpicker
import psutil
import pytest

from conftest import cli
from conftest import listening_ips
from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import runtime
from tff_algos import worker as worker_main
from tff_algos.runtime import processes as process_lib
from tff_algos.runtime import remote
from tff_algos.simulation import client_store
from tff_algos.simulation.client_store import ClientStore


def _wait_listening(port, process, timeout=30):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    assert process.poll() is None, f'worker on port {port} exited'
    with socket.socket() as s:
      if s.connect_ex(('127.0.0.1', port)) == 0:
        return
    time.sleep(0.05)
  raise AssertionError(f'worker on port {port} did not start')


def _start_worker(port, log_path):
  """`python -m tff_algos.worker --port=PORT`, its output in `log_path`."""
  with open(log_path, 'a') as log:
    return subprocess.Popen(
      [sys.executable, '-m', 'tff_algos.worker', f'--port={port}'],
      cwd=REPO,
      stdin=subprocess.DEVNULL,
      stdout=log,
      stderr=log,
      preexec_fn=process_lib.die_with_parent(),
    )


def _cpu_seconds(process):
  times = psutil.Process(process.pid).cpu_times()
  return times.user + times.system


@pytest.fixture
def workers(tmp_path):
  """Two `python -m tff_algos.worker` processes on 127.0.0.1.

  Afterwards, even when the test failed: this process is back on the local
  runtime alone, and both worker processes are killed and reaped (the
  module exec()s into worker_binary, which starts no processes).
  """
  processes, addresses = [], []
  try:
    for i in range(2):
      port = portpicker.pick_unused_port()
      processes.append(_start_worker(port, tmp_path / f'worker{i}.log'))
      addresses.append(f'127.0.0.1:{port}')
      _wait_listening(port, processes[-1])
    yield processes, addresses
  finally:
    runtime.start()  # Disconnects; the local runtime for the next tests.
    for process in processes:
      process.kill()  # Also ends a SIGSTOPped one.
      process.wait(timeout=10)


def test_workers_listen_on_loopback_only(workers):
  processes, _ = workers
  for process in processes:  # The module exec()s into worker_binary.
    assert 'worker_binary' in psutil.Process(process.pid).exe()
    listening = listening_ips(process.pid)
    assert listening and listening <= {'127.0.0.1', '::ffff:127.0.0.1'}


@pytest.mark.parametrize('algo', ['fedprox', 'fedisgd'])
def test_two_workers_give_the_local_runtimes_metrics(tmp_path, workers, algo):
  """FedISGD too: its update spread is in the round's one aggregation.
  With remote workers the clients train per client (compiled clients would
  train in this process and leave the workers idle), each reading its data
  in its worker: the same metrics as the local reference run, whose
  clients' data are sent."""
  processes, addresses = workers
  local, _ = helpers.run(
    tmp_path,
    'local',
    algo=algo,
    rounds=2,
    straggler_fraction=0.5,
    client_execution='per_client',
  )
  runtime.start(workers=addresses)
  cpu_before = [_cpu_seconds(p) for p in processes]
  spread, _ = helpers.run(
    tmp_path, 'spread', algo=algo, rounds=2, straggler_fraction=0.5
  )
  config = json.loads((tmp_path / 'spread' / 'config.json').read_text())
  execution = config['provenance'][0]['execution']
  assert execution == 'per client, reading their data where they train'
  assert spread == local  # metrics.csv byte for byte.
  # Both workers did client work: each round's 5 clients are split 2 + 3
  # (and any federated evaluation in halves).
  served = [w.clients_served for w in runtime.remote_workers()]
  assert sum(served) >= 2 * 5 and min(served) >= 2 * 2, served
  cpu_used = [_cpu_seconds(p) - c for p, c in zip(processes, cpu_before)]
  print('worker CPU seconds', cpu_used, 'clients', served)
  assert min(cpu_used) > 0.05, cpu_used  # An idle worker: ~0.


def test_a_worker_without_the_client_data_is_a_clear_error(tmp_path, workers):
  """Each worker lists the store's folder on its own machine, then reads
  each file and returns its size and keyed hash. A loopback worker shares
  this one, so a file changed here after the store was checked is one its
  machine holds changed."""
  _, addresses = workers
  runtime.start(workers=addresses)
  rng = np.random.default_rng(0)
  arrays = [dict(x=rng.normal(size=(n, 2)).astype(np.float32)) for n in (3, 1)]
  store = ClientStore.of(arrays, root=str(tmp_path))
  assert store.files == {'0.0', '1.0'}
  store.check_remote_workers(arrays)  # Both workers read every file.
  path = store.path(1) + '.0'
  intact = open(path, 'rb').read()
  for damaged, differs in (
    (intact[:-1] + bytes([intact[-1] ^ 1]), "differs from this machine's"),
    (intact[:-3], f'has {len(intact) - 3} of its {len(intact)} bytes'),
  ):
    with open(path, 'wb') as f:
      f.write(damaged)
    with pytest.raises(client_store.StoreError) as error:
      store.check_remote_workers(arrays)
    assert str(error.value) == (
      f'the TFF worker at {addresses[0]}: its copy of the client data file '
      f'{path} {differs}: copy the folder to its machine again '
      '(docs/guide/remote-workers.md) or run with '
      '--client_execution=per_client'
    )
  os.remove(path)
  with pytest.raises(client_store.StoreError) as error:
    store.check_remote_workers(arrays)
  assert str(error.value).startswith(
    f'the TFF worker at {addresses[0]} has 1 of the 2 files of the client '
    f'data folder {store.folder} (missing 1.0)'
  )
  assert '--client_execution=per_client' in str(error.value)
  # A folder a worker does not have at all.
  absent = str(tmp_path / 'absent')
  assert runtime.remote_workers()[1].files_in(absent) == set()


@pytest.mark.slow
def test_a_worker_killed_mid_run_stops_the_cli_with_a_clear_error(
  tmp_path, workers
):
  processes, addresses = workers
  metrics = tmp_path / 'run' / 'metrics.csv'
  run = subprocess.Popen(
    [
      sys.executable,
      'run_experiment.py',
      '--rounds=100000',
      '--epochs=1',
      f'--workers={",".join(addresses)}',
      '--progress=false',
      f'--output_dir={tmp_path / "run"}',
    ],
    cwd=REPO,
    env=USER_ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  try:
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 2):
      assert run.poll() is None, run.communicate()[1]
      assert time.monotonic() < deadline, 'no progress'
      time.sleep(0.1)
    local_workers = [
      p
      for p in psutil.Process(run.pid).children(recursive=True)
      if 'worker_binary' in ' '.join(p.cmdline())
    ]
    processes[1].kill()
    killed = time.monotonic()
    _, stderr = run.communicate(timeout=60)
  finally:
    if run.poll() is None:
      run.kill()
      run.wait()
  assert time.monotonic() - killed < 30
  assert local_workers and not any(
    p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in local_workers
  )
  assert run.returncode == 1, stderr
  last = stderr.strip().splitlines()[-1]
  assert last.startswith('run_experiment.py: stopped: ') and (
    addresses[1] in last
  ), stderr


def test_a_hung_worker_is_an_error_not_a_hang(tmp_path, workers, monkeypatch):
  processes, addresses = workers
  monkeypatch.setattr(remote, 'PROBE_EVERY_S', 0.5)
  monkeypatch.setattr(remote, 'PROBE_TIMEOUT_S', 2.0)
  runtime.start(workers=addresses)
  stopped = []

  def stop_worker_once_it_works():
    while runtime.remote_workers() and not (
      runtime.remote_workers()[0].clients_served
    ):
      time.sleep(0.05)
    processes[0].send_signal(signal.SIGSTOP)  # Alive, but never answers.
    stopped.append(time.monotonic())

  threading.Thread(target=stop_worker_once_it_works, daemon=True).start()
  with pytest.raises(runtime.WorkerError, match='stopped answering') as e:
    helpers.run(tmp_path, 'hung', rounds=1000, epochs=1)
  assert stopped and time.monotonic() - stopped[0] < 20
  assert addresses[0] in str(e.value)


@pytest.mark.fast
def test_an_unreachable_worker_is_a_clear_error(monkeypatch):
  monkeypatch.setattr(remote, 'CONNECT_TIMEOUT_S', 1.0)
  address = f'127.0.0.1:{portpicker.pick_unused_port()}'
  start = time.monotonic()
  try:
    with pytest.raises(runtime.WorkerError, match=f'cannot reach .*{address}'):
      runtime.start(workers=[address])
    assert not runtime.remote_workers()  # Nothing half-connected is kept.
  finally:
    runtime.start()
  assert time.monotonic() - start < 10


@pytest.mark.parametrize(
  'text',
  [
    'localhost',
    '127.0.0.1:',
    ':8000',
    '127.0.0.1:0',
    '127.0.0.1:70000',
    'host:80x',
    '::1:8000',
    '127.0.0.1:8000,127.0.0.1:8000',
    'a b:1',
    ',',
  ],
)
def test_malformed_worker_addresses_are_refused(text):
  with pytest.raises(ValueError, match='--workers'):
    runtime.parse_workers(text)


@pytest.mark.fast
def test_worker_addresses_are_parsed():
  assert runtime.parse_workers('') == []
  assert runtime.parse_workers(
    ' 127.0.0.1:8000, example.org:9000 ,[::1]:1'
  ) == ['127.0.0.1:8000', 'example.org:9000', '[::1]:1']


def test_a_malformed_workers_flag_is_one_line_exit_2(tmp_path):
  out = tmp_path / 'run'
  result = cli('--workers=127.0.0.1', f'--output_dir={out}')
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('run_experiment.py: error:')
  assert '--workers' in lines[0] and not out.exists()


@pytest.mark.fast
def test_the_worker_script_binds_loopback_unless_listen_all(
  monkeypatch, capsys
):
  started = []
  monkeypatch.setattr(os, 'execve', lambda *args: started.append(args))
  port = portpicker.pick_unused_port()
  worker_main.main([f'--port={port}'])
  binary, argv, env = started.pop()
  assert binary.endswith('worker_binary') and f'--port={port}' in argv
  assert 'loopback_bind' in env['LD_PRELOAD']
  assert 'WARNING' not in capsys.readouterr().err

  monkeypatch.delenv('LD_PRELOAD', raising=False)
  worker_main.main([f'--port={port}', '--listen_all'])
  _, _, env = started.pop()
  assert 'LD_PRELOAD' not in env
  warning = capsys.readouterr().err
  assert 'WARNING' in warning and 'ALL network interfaces' in warning


def test_the_worker_script_refuses_a_busy_port(monkeypatch, capsys):
  monkeypatch.setattr(os, 'execve', lambda *args: pytest.fail('started'))
  with socket.socket() as busy:
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # As gRPC.
    busy.bind(('127.0.0.1', 0))
    busy.listen()
    with pytest.raises(SystemExit) as e:
      worker_main.main([f'--port={busy.getsockname()[1]}'])
  err = capsys.readouterr().err
  assert e.value.code == 2 and len(err.strip().splitlines()) == 1
  assert 'is not free: Address already in use' in err


def _kill_leaving_time_wait(process, port):
  """SIGKILLs the worker `process` while a connection to it is open, and
  closes that connection after the worker's end did: the worker's end is
  left in TIME-WAIT, as a run's connections may leave it (or not: a
  connection with unread data ends with a reset, leaving nothing)."""
  with socket.create_connection(('127.0.0.1', port)) as held:
    accepted = held.getsockname()[1]
    deadline = time.monotonic() + 30
    while not any(  # Accepted: not in the backlog, which a kill resets.
      c.raddr and c.raddr.port == accepted
      for c in psutil.Process(process.pid).connections(kind='tcp')
    ):
      assert time.monotonic() < deadline, 'the worker never accepted'
      time.sleep(0.05)
    process.kill()
    process.wait(timeout=10)
    held.settimeout(10)
    while held.recv(4096):  # Read to the killed worker's FIN, so that
      pass  # closing sends ours (unread data would send a reset).
  deadline = time.monotonic() + 10
  while psutil.CONN_TIME_WAIT not in {
    c.status
    for c in psutil.net_connections(kind='tcp')
    if c.laddr and c.laddr.port == port
  }:
    assert time.monotonic() < deadline, 'no TIME-WAIT connection on the port'
    time.sleep(0.05)


def test_a_killed_worker_restarts_on_its_port_at_once(tmp_path):
  """What its old process leaves on the port (a connection in TIME-WAIT)
  does not keep a new worker from it, as it does not keep worker_binary;
  a worker listening on it does."""
  port = portpicker.pick_unused_port()
  address, log = f'127.0.0.1:{port}', tmp_path / 'worker.log'
  processes = [_start_worker(port, log)]
  try:
    _wait_listening(port, processes[0])
    runtime.start(workers=[address])
    assert runtime.remote_workers()[0].files_in(str(tmp_path)) == {log.name}
    _kill_leaving_time_wait(processes[0], port)  # Mid-run.
    runtime.start()  # The coordinator lets go of it.
    processes.append(_start_worker(port, log))
    _wait_listening(port, processes[1])
    runtime.start(workers=[address])  # It serves.
    assert runtime.remote_workers()[0].files_in(str(tmp_path)) == {log.name}
    second = subprocess.run(
      [sys.executable, '-m', 'tff_algos.worker', f'--port={port}'],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip().splitlines() == [
      'python -m tff_algos.worker: error: port '
      f'{port} is not free: Address already in use'
    ]
  finally:
    runtime.start()
    for process in processes:
      process.kill()
      process.wait(timeout=10)


def test_without_a_c_compiler_the_worker_script_refuses_to_listen_on_all(
  tmp_path, monkeypatch, capsys
):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))  # No shim built yet,
  monkeypatch.setenv('CC', str(tmp_path / 'no-such-cc'))  # and none to be.
  monkeypatch.setattr(os, 'execve', lambda *args: pytest.fail('started'))
  with pytest.raises(SystemExit) as e:
    worker_main.main([f'--port={portpicker.pick_unused_port()}'])
  err = capsys.readouterr().err
  assert e.value.code == 2 and len(err.strip().splitlines()) == 1
  assert 'C compiler' in err and '--listen_all' in err
