"""Nothing lost, nothing silent: run folders that two processes
cannot corrupt, divergence and hung workers that stop, damaged state that
is survived, bad input refused in one line, sweeps that die with their
parent and summaries that never shrink."""

import csv
import errno
import fcntl
import gc
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import cli
from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import run
from tff_algos.simulation import results
from tff_algos.simulation import run_dir

QUICK = ('--epochs=1', '--progress=false')
LONG = ('--rounds=100000', '--epochs=1', '--progress=false')


def _rows(path):
  try:
    with open(path, newline='') as f:
      return len(list(csv.DictReader(f)))
  except (OSError, csv.Error):
    return 0


def _start(*args, env=None, cwd=REPO):
  return subprocess.Popen(
    [sys.executable, str(REPO / 'run_experiment.py'), *args],
    cwd=cwd,
    env=env or USER_ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _wait_for_rows(process, metrics, rows=2, seconds=240):
  deadline = time.monotonic() + seconds
  while _rows(metrics) < rows:
    assert process.poll() is None, process.communicate()
    assert time.monotonic() < deadline, 'no progress'
    time.sleep(0.1)


def _one_line(result, code):
  lines = result.stderr.strip().splitlines()
  assert result.returncode == code, result.stderr
  assert len(lines) == 1 or (code != 2 and len(lines) == 2), lines
  return lines[-1]


def _workers_of(pid):
  try:
    return [
      p
      for p in psutil.Process(pid).children(recursive=True)
      if p.name() == 'worker_binary'
    ]
  except psutil.NoSuchProcess:
    return []


def _gone(process, seconds=15):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    try:
      if process.status() == psutil.STATUS_ZOMBIE:
        return True
    except psutil.NoSuchProcess:
      return True
    time.sleep(0.1)
  return False


# ---------------------------------------------------------- data loss
@pytest.mark.fast
def test_the_lock_names_its_holder_and_ends_with_it(tmp_path):
  folder = run_dir.RunDir(str(tmp_path / 'run'))
  with folder.hold():
    with pytest.raises(
      run_dir.OutputDirError, match=f'in use by process {os.getpid()}'
    ):
      with run_dir.RunDir(str(tmp_path / 'run')).hold():
        pass
  with folder.hold():  # Released.
    pass
  assert not (tmp_path / 'run').exists()  # Created, nothing written.


@pytest.mark.slow
def test_a_killed_sweep_takes_its_run_and_worker_with_it(tmp_path):
  out = tmp_path / 'sweep'
  sweep = _start('--variant=A: --algo=fedavg', *LONG, f'--output_dir={out}')
  try:
    _wait_for_rows(sweep, out / 'A' / 'metrics.csv')
    children = psutil.Process(sweep.pid).children()
    workers = [w for c in children for w in _workers_of(c.pid)]
    assert children and workers
  finally:
    sweep.kill()
    sweep.communicate(timeout=60)
  assert all(_gone(p) for p in children + workers)


# Starts argv[2:] as a terminal does (SIGINT not ignored, which pytest-xdist's
# workers pass on), sends it SIGINT once argv[1] says so, and exits with its
# exit code: after argv[1] seconds, or ('tensorflow') once TensorFlow's
# library is loaded, i.e. in the middle of its import.
_INTERRUPT = r"""
import signal, subprocess, sys, time
when, command = sys.argv[1], sys.argv[2:]
process = subprocess.Popen(
  command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
)
if when == 'tensorflow':
  deadline = time.monotonic() + 60
  while 'libtensorflow_framework' not in open(f'/proc/{process.pid}/maps').read():
    assert process.poll() is None and time.monotonic() < deadline
    time.sleep(0.01)
else:
  time.sleep(float(when))
process.send_signal(signal.SIGINT)
sys.exit(process.wait())
"""


@pytest.mark.parametrize(
  'program, when',
  [
    ('run_experiment.py', '0.3'),
    ('run_experiment.py', 'tensorflow'),
    ('python -m tff_algos', 'tensorflow'),
  ],
)
@pytest.mark.slow
def test_ctrl_c_while_importing_is_one_line_and_leaves_nothing(
  tmp_path, program, when
):
  """Before the run's own handler is installed: the same exit code, one
  line, no folder (the default one, runs/, in the working folder) and no
  process left (the worker started before TensorFlow's import)."""
  cwd = tmp_path / 'cwd'
  cwd.mkdir()
  entry = program.split()[1:] if ' ' in program else [str(REPO / program)]
  result, left = helpers.run_and_reap(
    [sys.executable, '-c', _INTERRUPT, when, sys.executable, *entry, *QUICK],
    tmp_path,
    cwd=cwd,
    env=dict(USER_ENV, PYTHONPATH=str(REPO)),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 130, result.stderr
  assert result.stderr.splitlines() == [f'{program}: interrupted']
  assert left == [] and list(cwd.iterdir()) == []


def test_a_ctrl_c_swallowed_by_a_gc_callback_still_interrupts():
  """As JAX's callback swallowed one while TensorFlow was imported: the
  command is interrupted all the same, without 'Exception ignored' lines."""
  # Python's own handler, which pytest-xdist's workers replace by SIG_IGN.
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  sent = []

  def callback(phase, info):
    del phase, info
    if not sent:
      sent.append(True)
      # To this thread, so that it raises here, to be swallowed. Sent to
      # the process, the kernel may hand it to another thread (the suite
      # leaves some running), and the main thread's sleep would not end.
      signal.raise_signal(signal.SIGINT)

  gc.callbacks.append(callback)
  start = time.monotonic()
  try:
    with pytest.raises(KeyboardInterrupt):
      with run._swallowed_ctrl_c_sent_again():
        gc.collect()
        assert sent, 'the callback did not run'
        time.sleep(10)  # What the command went on with.
  finally:
    gc.callbacks.remove(callback)
    signal.signal(signal.SIGINT, previous)
  assert time.monotonic() - start < 5


@pytest.mark.slow
def test_divergence_stops_naming_the_round_and_keeps_the_rows(tmp_path):
  out = tmp_path / 'run'
  result = cli(*QUICK, '--rounds=5', '--client_lr=1000', f'--output_dir={out}')
  line = _one_line(result, 1)
  assert 'not finite at round 1' in line and 'diverged' in line
  assert [r['round'] for r in results.read_rows(out)] == ['0', '1']
  assert not (out / 'summary.json').exists()


@pytest.mark.slow
def test_a_hung_local_worker_stops_the_run_and_it_resumes(tmp_path):
  out = tmp_path / 'run'
  args = (*QUICK, '--rounds=40', '--checkpoint_every=1', f'--output_dir={out}')
  run = _start(*args, env=dict(USER_ENV, TFF_ALGOS_WORKER_DEADLINE_FLOOR_S='3'))
  _wait_for_rows(run, out / 'metrics.csv', rows=3)
  workers = _workers_of(run.pid)
  for worker in workers:
    worker.send_signal(signal.SIGSTOP)
  start = time.monotonic()
  _, stderr = run.communicate(timeout=120)
  assert run.returncode == 1, stderr
  assert time.monotonic() - start < 60
  assert 'did not answer within' in stderr and 'to resume' in stderr
  assert all(_gone(w) for w in workers)
  resumed = cli(*args)
  assert resumed.returncode == 0 and '(resuming)' in resumed.stderr
  assert _rows(out / 'metrics.csv') == 41


def test_a_damaged_config_is_one_line(tmp_path):
  out = tmp_path / 'run'
  out.mkdir()
  (out / 'config.json').write_text('{"algo": "fedp')
  line = _one_line(cli(*QUICK, f'--output_dir={out}'), 2)
  assert 'config.json is damaged' in line and '--overwrite' in line


# ------------------------------------------------ bad input: one line, 2
@pytest.mark.parametrize(
  'args',
  [
    ['--variant=A: --muu=1'],
    ['--variant=A: --mu=abc'],
    ['--sweep=muu=1,2'],
    ['--variant=A: --algo=fedavg', '--sweep=seed=-1'],
  ],
)
def test_a_sweep_with_a_bad_run_flag_is_one_line(tmp_path, args):
  out = tmp_path / 'sweep'
  _one_line(cli(*args, f'--output_dir={out}'), 2)
  assert not out.exists()


@pytest.mark.parametrize('where', ['file', 'under_file'])
def test_an_unusable_output_dir_is_refused_before_loading(tmp_path, where):
  (tmp_path / 'file').write_text('x')
  out = tmp_path / 'file' if where == 'file' else tmp_path / 'file' / 'run'
  start = time.monotonic()
  line = _one_line(cli(f'--output_dir={out}', fresh_interpreter=True), 2)
  assert 'is a file' in line or 'which is a file' in line
  assert time.monotonic() - start < 8  # Before TensorFlow is imported.
  assert (tmp_path / 'file').read_text() == 'x'


@pytest.mark.fast
def test_a_named_folder_is_held_before_the_data_load_and_the_build(
  tmp_path, monkeypatch, capsys
):
  """A folder the user named is held first: one that the OS or another
  run refuses costs no data loading and no tracing."""
  from tff_algos import cli as cli_lib

  def refused(*args):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))

  def loaded(*args, **kwargs):
    raise AssertionError('the task was loaded before the folder was held')

  monkeypatch.setattr(cli_lib, 'load_task', loaded)
  with monkeypatch.context() as patched:
    patched.setattr(fcntl, 'flock', refused)
    with pytest.raises(SystemExit) as exit_code:
      _main(f'--output_dir={tmp_path / "run"}')
  assert exit_code.value.code == 2 and 'cannot lock' in capsys.readouterr().err
  assert not (tmp_path / 'run').exists()
  with pytest.raises(AssertionError, match='before the folder was held'):
    _main(f'--output_dir={tmp_path / "run"}')  # Held: now it loads.
  assert not (tmp_path / 'run').exists()  # Made, nothing written: removed.


@pytest.mark.fast
def test_an_unwritable_output_dir_is_refused(tmp_path, monkeypatch):
  monkeypatch.setattr(os, 'access', lambda path, mode: False)
  with pytest.raises(run_dir.OutputDirError, match='permission denied'):
    run_dir.check_usable(str(tmp_path / 'run'))


@pytest.mark.slow
def test_bad_leaf_data_is_one_line_and_writes_nothing(tmp_path):
  data = tmp_path / 'leaf'
  for split in ('train', 'test'):
    (data / split).mkdir(parents=True)
    (data / split / 'd.json').write_text(
      json.dumps(
        dict(
          users=['u'],
          num_samples=[1],
          user_data={'u': dict(x=[[0.1] * 60], y=[15])},
        )
      )
    )
  out = tmp_path / 'run'
  line = _one_line(cli(f'--data_dir={data}', f'--output_dir={out}'), 2)
  assert "d.json: user 'u': y: sample 0 has label 15" in line
  assert not out.exists()


def _main(*args):
  run.main(['run_experiment.py', *args])


@pytest.mark.parametrize(
  'raised_by',
  [
    'python-full',
    pytest.param('tensorflow-full', marks=pytest.mark.slow),
    'python-read-only',
    pytest.param('tensorflow-read-only', marks=pytest.mark.slow),
  ],
)
def test_a_full_or_read_only_disk_is_one_line_saying_rerunning_resumes(
  raised_by, tmp_path, monkeypatch, capsys
):
  """A full disk, or a folder made read-only mid-run: one line,
  exit 1, the rows so far kept; the same command resumes (below)."""
  import tensorflow as tf

  release_manager = run_dir.RunDir.release_manager
  path = str(tmp_path / 'run' / 'metrics.csv')
  full = {  # TFF's managers write through tf.io.gfile.
    'python-full': OSError(errno.ENOSPC, 'No space left on device', path),
    'tensorflow-full': tf.errors.ResourceExhaustedError(
      None, None, f'{path}_temp8677; No space left on device'
    ),
    'python-read-only': OSError(errno.EROFS, 'Read-only file system', path),
    'tensorflow-read-only': tf.errors.PermissionDeniedError(
      None, None, f'{path}_temp8677; Permission denied'
    ),
  }[raised_by]

  def full_after_round_1(self, first_round):
    manager = release_manager(self, first_round)

    class Full:
      async def release(self, value, key):
        if key > 1:
          raise full
        await manager.release(value, key)

    return Full()

  monkeypatch.setattr(run_dir.RunDir, 'release_manager', full_after_round_1)
  with pytest.raises(SystemExit) as exit_:
    _main('--rounds=5', *QUICK, f'--output_dir={tmp_path / "run"}')
  assert exit_.value.code == 1
  line = capsys.readouterr().err.strip().splitlines()[-1]
  assert (
    'no space left on the device holding'
    if 'full' in raised_by
    else 'cannot write'
  ) in line
  assert 'metrics.csv' in line and 'run the same command to resume' in line
  assert [r['round'] for r in results.read_rows(tmp_path / 'run')] == ['0', '1']
  if raised_by == 'python-read-only':  # Writable again: it goes on.
    monkeypatch.setattr(run_dir.RunDir, 'release_manager', release_manager)
    _main('--rounds=5', *QUICK, f'--output_dir={tmp_path / "run"}')
    assert [r['round'] for r in results.read_rows(tmp_path / 'run')] == [
      '0',
      '1',
      '2',
      '3',
      '4',
      '5',
    ]


# ----------------------------------------------- a CLI a newcomer drives
def test_help_is_fast_lists_tasks_and_algorithms_and_exits_0():
  for flag in ('--help', '-h'):
    start = time.monotonic()
    result = subprocess.run(
      [sys.executable, 'run_experiment.py', flag],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert result.returncode == 0
    assert time.monotonic() - start < 5
    for text in (
      'tasks (--task):',
      'algorithms (--algo):',
      'run flags:',
      'algorithm flags:',
      'data flags:',
      'output flags:',
      'sweep flags:',
      'mnist_powerlaw',
      'fedisgd',
    ):
      assert text in result.stdout


def test_plot_help_errors_and_what_it_wrote(tmp_path):
  plot = [sys.executable, '-m', 'tff_algos.plot']
  help_text = subprocess.run(
    plot + ['--help'], cwd=REPO, capture_output=True, text=True, timeout=60
  )
  assert help_text.returncode == 0
  for flag in ('--metric', '--out', '--title', 'RUN_DIR'):
    assert flag in help_text.stdout
  missing = subprocess.run(
    plot + [str(tmp_path / 'nope'), '--out=x.png'],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert missing.returncode == 2
  assert 'no such run folder' in missing.stderr


@pytest.mark.slow
def test_a_dry_run_shows_merged_settings_and_checks_the_data(tmp_path):
  result = cli(
    '--variant=A: --algo=fedavg',
    '--variant=B: --mu=0.5',
    '--rounds=7',
    '--client_fraction=0.5',
    '--dry_run',
    f'--output_dir={tmp_path / "s"}',
  )
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  settings = [json.loads(line.split(' ', 1)[1]) for line in lines]
  assert [s['rounds'] for s in settings] == [7, 7]
  assert settings[0]['algo'] == 'fedavg' and settings[1]['mu'] == 0.5
  # K as the runs use it: C = 0.5 of synthetic's 30 clients.
  assert [s['clients_per_round'] for s in settings] == [15, 15]
  assert 'data: synthetic_1_1: 30 clients' in result.stderr
  bad = cli('--task=mnist_iid', f'--data_dir={tmp_path}', '--dry_run')
  assert bad.returncode == 2 and 'MNIST needs' in bad.stderr
  assert not (tmp_path / 's').exists()
