"""The notebooks run top to bottom headlessly and leave no TFF worker behind."""

import time

import nbclient
import nbformat
import psutil
import pytest

from conftest import REPO

NOTEBOOK_DIR = REPO / 'notebooks'
NOTEBOOKS = ('01_compose_fedprox', '02_stragglers', '03_real_task')
WORKER = 'worker_binary'


def _alive(pid, create_time):
  """Whether the process (pid, create_time) still exists and is no zombie."""
  try:
    process = psutil.Process(pid)
    return (process.create_time() == create_time and
            process.status() != psutil.STATUS_ZOMBIE)
  except psutil.NoSuchProcess:
    return False


def _workers():
  """{pid: create_time} of every live worker_binary on the machine."""
  found = {}
  for process in psutil.process_iter(['name', 'create_time', 'status']):
    if (process.info['name'] == WORKER and
        process.info['status'] != psutil.STATUS_ZOMBIE):
      found[process.pid] = process.info['create_time']
  return found


class _KernelWatcher:
  """Records the kernel's pid and every worker_binary it has started.

  Other programs on the machine (e.g. background experiments) start their
  own workers, so a worker counts as the notebook's when it was seen as a
  descendant of the kernel, or when it is new and orphaned (its parent, e.g.
  the dead kernel, is gone).
  """

  def __init__(self, client):
    self.client = client
    self.kernel = None  # (pid, create_time)
    self.workers = {}   # pid -> create_time

  def __call__(self, **unused_kwargs):
    provisioner = getattr(self.client.km, 'provisioner', None)
    process = getattr(provisioner, 'process', None)
    if process is None:
      return
    try:
      kernel = psutil.Process(process.pid)
      self.kernel = (kernel.pid, kernel.create_time())
      for child in kernel.children(recursive=True):
        if child.name() == WORKER:
          self.workers[child.pid] = child.create_time()
    except psutil.NoSuchProcess:
      pass


def _leaked(watcher, before):
  leaked = {pid for pid, t in watcher.workers.items() if _alive(pid, t)}
  for pid, t in _workers().items():
    if before.get(pid) == t:
      continue
    try:
      if psutil.Process(pid).ppid() in (0, 1) or (
          watcher.kernel and psutil.Process(pid).ppid() == watcher.kernel[0]):
        leaked.add(pid)
    except psutil.NoSuchProcess:
      pass
  return leaked


def _execute(name):
  """Runs notebooks/<name>.ipynb in a fresh kernel; returns it executed."""
  path = NOTEBOOK_DIR / f'{name}.ipynb'
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(
      nb, timeout=600, kernel_name='python3',
      resources={'metadata': {'path': str(NOTEBOOK_DIR)}})
  watcher = _KernelWatcher(client)
  client.on_cell_executed = watcher
  before = _workers()
  start = time.perf_counter()
  client.execute()  # Raises CellExecutionError if any cell fails.
  print(f'{name}: {time.perf_counter() - start:.1f} s')

  assert watcher.kernel is not None
  assert watcher.workers, 'the notebook never started a TFF worker'
  assert not _alive(*watcher.kernel), 'the kernel is still running'
  assert not _leaked(watcher, before), (
      f'{name} left worker_binary processes running')
  return nb


def _stdout(nb):
  return ''.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code'
                 for o in c.get('outputs', []) if o.output_type == 'stream')


@pytest.mark.parametrize('name', NOTEBOOKS)
def test_notebook_runs_and_leaves_no_worker(name):
  _execute(name)


def test_real_task_notebook_falls_back_without_mnist(monkeypatch, tmp_path):
  monkeypatch.setenv('MNIST_DIR', str(tmp_path / 'no_mnist_here'))
  nb = _execute('03_real_task')  # The kernel inherits our environment.
  assert 'SYNTHETIC STAND-IN' in _stdout(nb)
