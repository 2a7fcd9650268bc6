"""Session set-up: one TFF runtime for the whole suite, stopped at the end."""

import atexit
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# No gRPC fork handlers in this process (before anything imports gRPC):
# with them, a fork (the tests start processes) can block for ever in
# gRPC's pre-fork handler while its threads are busy.
os.environ['GRPC_ENABLE_FORK_SUPPORT'] = '0'

# One computation cache for the suite and the processes it starts (built
# processes and compiled computations are reused across tests, as across
# the runs of a sweep), never the user's; removed at the end.
if 'TFF_ALGOS_CACHE' not in os.environ:
  os.environ['TFF_ALGOS_CACHE'] = tempfile.mkdtemp(prefix='tff_algos_tests_')
  atexit.register(shutil.rmtree, os.environ['TFF_ALGOS_CACHE'], True)

import psutil
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / 'shared' / 'data'
if SHARED_DATA.is_dir():  # Dataset tasks read ../shared/data when present.
  os.environ.setdefault('TFF_DATA_DIR', str(SHARED_DATA))


# The environment a user's shell gives the CLI (the suite sets TF's log level).
USER_ENV = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}


def cli(*args):
  """run_experiment.py ARGS as a user runs it: (CompletedProcess, text)."""
  return subprocess.run(
    [sys.executable, 'run_experiment.py', *args],
    cwd=REPO,
    env=USER_ENV,
    capture_output=True,
    text=True,
    timeout=600,
  )


def listening_ips(pid):
  """The addresses process `pid` accepts TCP connections on."""
  return {
    c.laddr.ip
    for c in psutil.Process(pid).connections(kind='inet')
    if c.status == psutil.CONN_LISTEN
  }


def pytest_sessionfinish(session):
  """With TFF_ALGOS_MODULES_SEEN=DIR, the package's modules this test
  process imported, in DIR/<pid>.txt: what a set of tests reaches (README,
  "Tests")."""
  del session
  directory = os.environ.get('TFF_ALGOS_MODULES_SEEN')
  if directory:
    seen = sorted(
      m for m in sys.modules if m.split('.')[0] in ('tff_algos', 'tasks')
    )
    pathlib.Path(directory, f'{os.getpid()}.txt').write_text('\n'.join(seen))


@pytest.fixture(scope='session', autouse=True)
def tff_runtime():
  from tff_algos import runtime

  runtime.start()
  yield runtime
  runtime.stop()


@pytest.fixture
def shared_data():
  if not SHARED_DATA.is_dir():
    pytest.skip(f'needs the shared datasets at {SHARED_DATA}')
  return SHARED_DATA
