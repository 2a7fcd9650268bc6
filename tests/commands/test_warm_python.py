"""tests/warm.py's commands behave as a fresh interpreter's: the same
outputs, exit codes, signals, paths, environment and stdin, and a run's
metrics.csv byte for byte; an edit between two commands is seen."""

import json
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import REPO
from conftest import USER_ENV
import warm

NOT_IN_FAST_SET = (
  'its zygote imports TensorFlow first (about 6 CPU-seconds); what it '
  "serves is the slow tests' command lines"
)
pytestmark = pytest.mark.slow


def _both(*args, **kwargs):
  """(fresh interpreter's CompletedProcess, warm one's) for `python ARGS`."""
  kwargs = dict(dict(capture_output=True, text=True, timeout=300), **kwargs)
  fresh = subprocess.run([sys.executable, *args], **kwargs)
  return fresh, subprocess.run(warm.command(*args), **kwargs)


def _seen(result):
  return result.returncode, result.stdout, result.stderr


def _without_times(text):
  """Output with its times masked (they differ run to run): "2.5 s" and
  summary.json's seconds."""
  text = re.sub(r'("\w*seconds\w*": )[\d.e-]+', r'\1<t>', text)
  return re.sub(r'\d+(\.\d+)?\s?(s|ms|min)\b', '<t>', text)


def test_a_run_writes_the_same_bytes_and_says_the_same(tmp_path):
  outputs = {}
  for name, python in (('fresh', [sys.executable]), ('warm', warm.command())):
    out = tmp_path / name
    result = subprocess.run(
      [
        *python,
        'run_experiment.py',
        '--rounds=2',
        '--progress=false',
        f'--output_dir={out}',
      ],
      cwd=REPO,
      env=dict(USER_ENV, TFF_ALGOS_COMPUTATION_CACHE='0'),
      capture_output=True,
      text=True,
      timeout=600,
    )
    assert result.returncode == 0, result.stderr
    outputs[name] = (
      (out / 'metrics.csv').read_bytes(),
      _without_times(result.stderr.replace(str(out), '<out>')),
      _without_times(result.stdout.replace(str(out), '<out>')),
    )
  assert outputs['warm'] == outputs['fresh']


SCRIPT = """
import json, os, sys
installed = (sys.prefix, sys.base_prefix)
outside = sorted(  # The modules a run records as the user's code.
  (name, m.__file__) for name, m in list(sys.modules.items())
  if isinstance(getattr(m, '__file__', None), str)
  and not m.__file__.startswith(installed))
print(json.dumps(dict(argv=sys.argv, path=sys.path, cwd=os.getcwd(),
                      env=dict(os.environ), stdin=sys.stdin.read(),
                      main=__name__, outside=outside)))
sys.exit(int(os.environ.get('EXIT', '0')))
"""


@pytest.mark.parametrize('form', ['script', '-m', '-c'])
def test_argv_path_cwd_environment_stdin_and_exit_code(tmp_path, form):
  (tmp_path / 'lib').mkdir()
  (tmp_path / 'lib' / 'echo.py').write_text(SCRIPT)
  args = {
    'script': [str(tmp_path / 'lib' / 'echo.py')],
    '-m': ['-m', 'echo'],
    '-c': ['-c', SCRIPT],
  }[form]
  env = dict(USER_ENV, PYTHONPATH=str(tmp_path / 'lib'), EXIT='3')
  fresh, warmed = _both(
    *args, 'an argument', cwd=tmp_path, env=env, input='typed\n'
  )
  assert fresh.returncode == 3
  assert json.loads(warmed.stdout) == json.loads(fresh.stdout)
  assert _seen(warmed) == _seen(fresh)


@pytest.mark.parametrize(
  'code',
  [
    'raise ValueError("no")',
    'import sys; sys.exit("a message")',
    'import os; os.kill(os.getpid(), 15)',
    'import atexit; atexit.register(print, "at exit")',
    'import threading, time; '
    'threading.Thread(target=lambda: (time.sleep(0.2), print("joined"))).start()',
  ],
)
def test_errors_exits_signals_and_what_runs_at_exit(code):
  fresh, warmed = _both('-c', code, env=USER_ENV)
  assert _seen(warmed) == _seen(fresh)


def _sleeper(seconds):
  """`-c` code that writes its pid to argv[1], then sleeps."""
  return (
    'import os, sys, time\n'
    'open(sys.argv[1], "w").write(str(os.getpid()))\n'
    f'time.sleep({seconds})\n'
  )


def _pid_once_started(process, pid_file):
  deadline = time.monotonic() + 60
  while not pid_file.exists() or not pid_file.read_text():
    assert process.poll() is None, process.communicate()
    assert time.monotonic() < deadline
    time.sleep(0.05)
  return int(pid_file.read_text())


@pytest.mark.parametrize(
  'sig, ignored',
  [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
)
def test_a_signal_to_the_launcher_reaches_the_command(tmp_path, sig, ignored):
  """Also when the command starts with the signal ignored, as the commands
  of pytest-xdist's workers (which ignore SIGINT) do: it sleeps on."""
  code = _sleeper(3 if ignored else 60)
  disposition = signal.SIG_IGN if ignored else signal.SIG_DFL
  results = []
  for name, python in (('fresh', [sys.executable]), ('warm', warm.command())):
    pid_file = tmp_path / name
    process = subprocess.Popen(
      [*python, '-c', code, str(pid_file)],
      stderr=subprocess.PIPE,
      text=True,
      preexec_fn=lambda: signal.signal(sig, disposition),
    )
    _pid_once_started(process, pid_file)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    results.append((process.returncode, stderr.splitlines()[-1:]))
  assert results[0][0] == (0 if ignored else -sig)
  assert results[1] == results[0]


def test_a_killed_launcher_takes_its_command_with_it(tmp_path):
  pid_file = tmp_path / 'pid'
  process = subprocess.Popen(warm.command('-c', _sleeper(60), str(pid_file)))
  child = psutil.Process(_pid_once_started(process, pid_file))
  assert child.pid != process.pid
  process.kill()
  process.wait()
  child.wait(timeout=10)  # Raises psutil.TimeoutExpired if it lives on.


def test_an_edit_between_two_commands_is_seen(tmp_path):
  module = tmp_path / 'mine.py'
  printed = []
  for value in ('1', '2'):
    module.write_text(f'VALUE = {value}\n')
    result = subprocess.run(
      warm.command('-c', 'import mine; print(mine.VALUE)'),
      cwd=tmp_path,
      env=USER_ENV,
      capture_output=True,
      text=True,
      timeout=60,
    )
    printed.append(result.stdout)
  assert printed == ['1\n', '2\n']


def test_the_zygote_holds_none_of_this_repository():
  """What the commands import from the repository, they import fresh; the
  preloaded libraries they find imported."""
  result = subprocess.run(
    warm.command(
      '-c', 'import json, sys; print(json.dumps(sorted(sys.modules)))'
    ),
    capture_output=True,
    text=True,
    timeout=60,
  )
  modules = json.loads(result.stdout)
  ours = ('tff_algos', 'tasks', 'tensorflow_federated')
  assert not [m for m in modules if m.split('.')[0] in ours]
  assert set(warm.PRELOAD) <= set(modules)
