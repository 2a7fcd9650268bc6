"""Session set-up: one TFF runtime for the whole suite, stopped at the end;
the option --reach-every-module (`make check`)."""

import ast
import atexit
import inspect
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

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

import warm

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / 'shared' / 'data'
if SHARED_DATA.is_dir():  # Dataset tasks read ../shared/data when present.
  os.environ.setdefault('TFF_DATA_DIR', str(SHARED_DATA))


# The environment a user's shell gives the CLI (the suite sets TF's log level).
USER_ENV = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}


def cli(*args, fresh_interpreter=False, env=None):
  """run_experiment.py ARGS as a user runs it (in `env`, default USER_ENV):
  its CompletedProcess. In a fork of an interpreter that has imported
  TensorFlow (warm.py), or with `fresh_interpreter`, in a new one (for
  what the start itself does)."""
  python = [sys.executable] if fresh_interpreter else warm.command()
  return subprocess.run(
    [*python, 'run_experiment.py', *args],
    cwd=REPO,
    env=USER_ENV if env is None else env,
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
  process imported, in DIR/<pid>.txt; with --reach-every-module, the
  modules whose code ran, judged."""
  _judge_reach(session)
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


# --reach-every-module: whether a set of tests runs code of every module of
# the package. A module is reached when a function or method defined in it
# is called in a test process, other than while the package's modules are
# being imported (importing a module tests none of it); a module that
# defines no function (most packages' __init__.py) when its code runs at
# all. Processes the tests start do not count.
REACHED_PACKAGES = ('tff_algos', 'tasks')

# The modules the fast set (`make check`, pytest -m fast) does not run, each
# with the reason; --reach-every-module fails for any other it misses.
NOT_RUN_BY_THE_FAST_SET = {
  'tff_algos/__main__.py': (
    'the `python -m tff_algos` entry point: only a process started so runs '
    'it (the slow tests of test_own_research.py and test_bad_input_corpus.py)'
  ),
  'tff_algos/logs.py': (
    'quiet() runs as `import tff_algos` does (which does not count), and its '
    'filters only when TensorFlow happens to log; the slow test of a '
    "script's output (test_cli.py) checks what they silence"
  ),
  'tff_algos/runtime/profiling.py': (
    "the benchmarks' timers (benchmarks/round_profile.py, cohort.py); no "
    'test uses them'
  ),
}

_REACH = pytest.StashKey()
_REACHED = pytest.StashKey()
_MISSED = pytest.StashKey()


def _module_paths():
  """The absolute path of every module of the package."""
  return [
    path
    for package in REACHED_PACKAGES
    for path in sorted((REPO / package).rglob('*.py'))
  ]


def _module_files():
  """{absolute path: whether it defines a function} for every module of
  the package."""
  return {
    str(path): any(
      isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
      for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )
    for path in _module_paths()
  }


class _Reach:
  """The package's modules whose code ran in this process, seen by a
  profile hook (sys.setprofile, in every thread). While a hook is set, the
  interpreter runs every instruction on its slower tracing path and calls
  the hook at every call and return, C functions' too. The hook is removed
  once every module it waits for is reached (in each thread at its next
  call); the modules of NOT_RUN_BY_THE_FAST_SET are not waited for."""

  def __init__(self):
    files = _module_files()
    waited = {
      f
      for f in files
      if os.path.relpath(f, REPO) not in NOT_RUN_BY_THE_FAST_SET
    }
    self.modules = frozenset(files)
    # Reached by a call of one of its functions, or, for a module without
    # functions, by its code running.
    self.functions = {f for f in waited if files[f]}
    self.bodies = waited - self.functions
    self.reached = set()
    self.profile = self._hook()

  def start(self):
    threading.setprofile(self.profile)
    sys.setprofile(self.profile)

  def stop(self):
    self.functions.clear()
    self.bodies.clear()
    sys.setprofile(None)
    threading.setprofile(None)

  def _hook(self):
    # A closure over locals: the hook runs at every call and return.
    functions, bodies, reached = self.functions, self.bodies, self.reached
    importing, stop = self._importing, self.stop
    new_locals = inspect.CO_NEWLOCALS

    def profile(frame, event, arg):
      if event != 'call':
        return
      if not functions and not bodies:  # Another thread: remove its hook.
        sys.setprofile(None)
        return
      code = frame.f_code
      filename = code.co_filename
      if filename in functions:
        # A function's code, not a module's or class's body (no new locals).
        if code.co_flags & new_locals and not importing(frame.f_back):
          functions.discard(filename)
          reached.add(filename)
      elif filename in bodies:
        bodies.discard(filename)
        reached.add(filename)
      else:
        return
      if not functions and not bodies:
        stop()

    return profile

  def _importing(self, frame):
    """Whether a module of the package is being imported in `frame`'s
    stack."""
    while frame is not None:
      code = frame.f_code
      if code.co_name == '<module>' and code.co_filename in self.modules:
        return True
      frame = frame.f_back
    return False


def pytest_addoption(parser):
  parser.addoption(
    '--reach-every-module',
    action='store_true',
    help=(
      'fail unless the tests call a function of every module of tff_algos/ '
      'and tasks/ but those of NOT_RUN_BY_THE_FAST_SET (tests/conftest.py)'
    ),
  )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
  config = session.config
  if not config.getoption('reach_every_module'):
    return
  config.stash[_REACHED] = set()
  # xdist's controller runs no test: its workers report (testnodedown).
  if not config.pluginmanager.hasplugin('dsession'):
    config.stash[_REACH] = _Reach()
    config.stash[_REACH].start()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
  del error
  reached = getattr(node, 'workeroutput', {}).get('reached_modules')
  if reached is not None:
    node.config.stash[_REACHED].update(reached)


def _judge_reach(session):
  """Fails the session, in the process that reports it, for every module
  that no test process reached."""
  config = session.config
  if not config.getoption('reach_every_module'):
    return
  reach = config.stash.get(_REACH, None)
  if reach is not None:
    reach.stop()
    config.stash[_REACHED].update(reach.reached)
  if hasattr(config, 'workeroutput'):  # An xdist worker.
    config.workeroutput['reached_modules'] = sorted(config.stash[_REACHED])
    return
  reached = config.stash[_REACHED]
  # Only the names here: which modules define functions does not matter.
  missed = [
    os.path.relpath(f, REPO)
    for f in map(str, _module_paths())
    if f not in reached
    and os.path.relpath(f, REPO) not in NOT_RUN_BY_THE_FAST_SET
  ]
  if missed:
    config.stash[_MISSED] = missed
    if session.exitstatus == pytest.ExitCode.OK:
      session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
  missed = config.stash.get(_MISSED, None)
  if missed:
    terminalreporter.write_sep(
      '=',
      f'--reach-every-module: {len(missed)} of the modules never ran',
      red=True,
    )
    terminalreporter.write_line(
      'No test called a function of these modules; mark a test of each fast '
      '(pytest.ini), or give the reason in NOT_RUN_BY_THE_FAST_SET '
      '(tests/conftest.py):'
    )
    for module in missed:
      terminalreporter.write_line(f'  {module}')
