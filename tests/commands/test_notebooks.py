"""The notebooks run top to bottom headlessly and leave no TFF worker behind."""

import os
import subprocess
import time
import uuid

import nbclient
import nbformat
import portpicker
import psutil
import pytest

from conftest import REPO
from tff_algos.runtime import loopback

NOTEBOOK_DIR = REPO / 'notebooks'
NOTEBOOKS = ('01_compose_fedprox', '02_stragglers', '03_real_task')
WORKER = 'worker_binary'
TAG = 'TFF_ALGOS_TEST_KERNEL'  # Set in the kernel's environment only.
# The settings line of each notebook and what the test runs instead (as
# papermill's parameters would): every cell runs, with fewer rounds and
# epochs, so the notebooks' work is a fraction of a user's.
SMALLER = {
  '01_compose_fedprox': (
    'SETTINGS = dict(rounds=15, clients_per_round=10, epochs=20,',
    'SETTINGS = dict(rounds=3, clients_per_round=10, epochs=2,',
  ),
  '02_stragglers': (
    'ROUNDS, K, EPOCHS, BATCH, LR = 8, 10, 20, 10, 0.01',
    'ROUNDS, K, EPOCHS, BATCH, LR = 3, 10, 2, 10, 0.01',
  ),
  '03_real_task': ('ROUNDS = 10\n', 'ROUNDS = 3\n'),
}


def _kernel_workers(tag):
  """The live worker_binary processes that descend from the kernel tagged
  `tag`: a process inherits its parent's environment (and our runtime
  passes it on to the worker), so exactly those carry the tag; workers of
  other programs on the machine do not."""
  found = []
  for process in psutil.process_iter(['name', 'status']):
    if (
      process.info['name'] != WORKER
      or process.info['status'] == psutil.STATUS_ZOMBIE
    ):
      continue
    try:
      if process.environ().get(TAG) == tag:
        found.append(process)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      pass
  return found


def _smaller(nb, name):
  """`nb` with its settings line replaced by SMALLER's (which must find it
  exactly once)."""
  old, new = SMALLER[name]
  cells = [c for c in nb.cells if c.cell_type == 'code' and old in c.source]
  assert len(cells) == 1 and cells[0].source.count(old) == 1, (
    f'{name}: its settings line changed; update SMALLER'
  )
  cells[0].source = cells[0].source.replace(old, new)
  return nb


def _execute(name, monkeypatch, tmp_path):
  """Runs notebooks/<name>.ipynb, with SMALLER's settings, in a fresh
  kernel (its temporary folder in `tmp_path`, which must be left empty);
  returns it executed."""
  path = NOTEBOOK_DIR / f'{name}.ipynb'
  nb = _smaller(nbformat.read(path, as_version=4), name)
  scratch = tmp_path / 'kernel_tmp'
  scratch.mkdir()
  monkeypatch.setenv('TMPDIR', str(scratch))
  client = nbclient.NotebookClient(
    nb,
    timeout=600,
    kernel_name='python3',
    resources={'metadata': {'path': str(NOTEBOOK_DIR)}},
  )
  tag = uuid.uuid4().hex
  monkeypatch.setenv(TAG, tag)  # The kernel inherits our environment.
  seen = set()
  client.on_cell_executed = lambda **_: seen.update(
    p.pid for p in _kernel_workers(tag)
  )
  start = time.perf_counter()
  client.execute()  # Raises CellExecutionError if any cell fails.
  print(f'{name}: {time.perf_counter() - start:.1f} s')
  assert seen, 'the notebook never started a TFF worker'
  deadline = time.monotonic() + 10  # The kernel has just been shut down.
  while _kernel_workers(tag) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _kernel_workers(tag), f'{name} left worker_binary processes'
  assert not list(scratch.iterdir()), f'{name} left {list(scratch.iterdir())}'
  errors = ''.join(
    o.get('text', '')
    for c in nb.cells
    if c.cell_type == 'code'
    for o in c.get('outputs', [])
    if o.get('name') == 'stderr'
  )
  assert 'tensorflow' not in errors.lower(), errors[:2000]  # Quiet.
  return nb


def _stdout(nb):
  return ''.join(
    o.get('text', '')
    for c in nb.cells
    if c.cell_type == 'code'
    for o in c.get('outputs', [])
    if o.output_type == 'stream'
  )


@pytest.mark.slow
@pytest.mark.parametrize('name', NOTEBOOKS)
def test_notebook_runs_and_leaves_no_worker(name, monkeypatch, tmp_path):
  _execute(name, monkeypatch, tmp_path)


@pytest.mark.slow
def test_real_task_notebook_falls_back_without_mnist(monkeypatch, tmp_path):
  monkeypatch.setenv('TFF_DATA_DIR', str(tmp_path / 'no_mnist_here'))
  nb = _execute('03_real_task', monkeypatch, tmp_path)
  assert 'SYNTHETIC STAND-IN' in _stdout(nb)


@pytest.mark.fast
def test_the_worker_check_counts_only_workers_of_the_tagged_process(
  tff_runtime,
):
  """A worker started with the tag is found; this session's own is not."""
  tff_runtime.start()  # Idempotent; an in-process run may have stopped it.
  tag = uuid.uuid4().hex
  env = loopback.preload_env(
    dict(os.environ, **{TAG: tag}), loopback.loopback_shim()
  )
  worker = subprocess.Popen(
    [loopback.worker_binary(), f'--port={portpicker.pick_unused_port()}'],
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  try:
    assert tff_runtime.worker_pid() is not None
    assert [p.pid for p in _kernel_workers(tag)] == [worker.pid]
  finally:
    worker.kill()
    worker.wait()
  assert _kernel_workers(tag) == []


@pytest.mark.slow
def test_a_kernel_that_never_stops_the_runtime_ends_quietly(capfd):
  """runtime.stop() is optional: a kernel whose notebook starts the runtime,
  trains and never stops it shuts down without a word on its streams (its
  manager's SIGTERM, sent when a kernel is slow to exit, must not meet a
  handler of ours that unwinds mid-shutdown)."""
  nb = nbformat.v4.new_notebook()
  nb.cells = [
    nbformat.v4.new_code_cell(
      'import tasks\n'
      'from tff_algos import runtime\n'
      'from tff_algos.simulation import trainer\n'
      'runtime.start()\n'
      'trainer.train(None, tasks.load_task("synthetic_1_1"), rounds=1, '
      'epochs=1)'
    )
  ]
  capfd.readouterr()
  nbclient.NotebookClient(nb, timeout=600, kernel_name='python3').execute()
  err = capfd.readouterr().err
  assert 'Error' not in err and 'Traceback' not in err, err
