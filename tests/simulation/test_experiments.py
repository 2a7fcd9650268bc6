"""Runs that survive (checkpoint/resume), their outputs and their end."""

import collections
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
import types

import pytest
import tensorflow as tf

from conftest import cli
from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos.simulation import experiment
from tff_algos.simulation import loop
from tff_algos.simulation import results
from tff_algos.simulation import run_dir
from tff_algos.simulation import trainer
import warm

# A short FedProx run with stragglers and adaptive μ: its checkpoints must
# carry the process state, μ and the adaptive rule's counters.
RUN_FLAGS = (
  '--task=synthetic_1_1',
  '--algo=fedprox',
  '--rounds=8',
  '--clients_per_round=5',
  '--epochs=2',
  '--mu=0.5',
  '--adaptive_mu',
  '--straggler_fraction=0.5',
  '--checkpoint_every=1',
  '--progress=false',
)


def _rows_written(path):
  try:
    with open(path, newline='') as f:
      return len(list(csv.DictReader(f)))
  except (OSError, csv.Error):
    return 0


def _kill_after_rows(out, rows):
  """Starts the run and SIGKILLs it once metrics.csv has `rows` rows."""
  process = subprocess.Popen(
    [sys.executable, 'run_experiment.py', *RUN_FLAGS, f'--output_dir={out}'],
    cwd=REPO,
    env=USER_ENV,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  deadline = time.monotonic() + 300
  while _rows_written(out / 'metrics.csv') < rows:
    assert process.poll() is None, 'the run ended before it was killed'
    assert time.monotonic() < deadline
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path):
  whole, killed = tmp_path / 'whole', tmp_path / 'killed'
  assert cli(*RUN_FLAGS, f'--output_dir={whole}').returncode == 0
  _kill_after_rows(killed, 3)  # Killed twice, at different rounds.
  _kill_after_rows(killed, 7)
  resumed = cli(*RUN_FLAGS, f'--output_dir={killed}', '--resume')
  assert resumed.returncode == 0, resumed.stderr
  assert '(resuming)' in resumed.stderr
  assert (killed / 'metrics.csv').read_bytes() == (
    whole / 'metrics.csv'
  ).read_bytes()
  summary = json.loads((killed / 'summary.json').read_text())
  assert summary['resumed_from_round'] >= 5
  assert (
    summary['final_train_loss']
    == json.loads((whole / 'summary.json').read_text())['final_train_loss']
  )
  # Old checkpoints are pruned; none is left half-written.
  assert sorted(os.listdir(killed / 'checkpoints')) == ['round_7', 'round_8']
  # TensorBoard holds each round once, with the metrics.csv values, although
  # the resumed runs recomputed rounds after their checkpoints.
  _assert_tensorboard_holds_each_row_once(killed)

  # A damaged newest checkpoint: the one before it is used, and
  # the run still ends as the uninterrupted one; TensorBoard's events lost
  # (as a kill loses what its writer buffered) are written again.
  (killed / 'summary.json').unlink()  # As if killed after the last save.
  newest = killed / 'checkpoints' / 'round_8' / run_dir.STATE_FILE
  newest.write_bytes(newest.read_bytes()[:100])
  for path in (killed / 'tensorboard').glob('events.out.tfevents.*'):
    path.unlink()
  again = cli(*RUN_FLAGS, f'--output_dir={killed}')
  assert again.returncode == 0, again.stderr
  assert 'round_8 is damaged' in again.stderr
  assert (killed / 'metrics.csv').read_bytes() == (
    whole / 'metrics.csv'
  ).read_bytes()
  _assert_tensorboard_holds_each_row_once(killed)


def _assert_tensorboard_holds_each_row_once(folder):
  losses = collections.defaultdict(list)
  for event_file in (folder / 'tensorboard').iterdir():
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        if value.tag == 'train_loss':
          losses[event.step].append(float(tf.make_ndarray(value.tensor)))
  assert dict(losses) == {
    int(r['round']): [pytest.approx(float(r['train_loss']), rel=1e-6)]
    for r in results.read_rows(folder)
  }


@pytest.mark.slow
def test_finished_and_different_runs_are_left_alone(tmp_path):
  """And the default folder of a command is found again."""

  def in_tmp(*args):
    return subprocess.run(
      warm.command(str(REPO / 'run_experiment.py'), *args),
      cwd=tmp_path,
      env=USER_ENV,
      capture_output=True,
      text=True,
      timeout=600,
    )

  out = tmp_path / 'runs' / 'fedprox_synthetic_1_1_seed0'
  flags = ('--epochs=1', '--progress=false')
  assert in_tmp('--rounds=2', *flags).returncode == 0
  again = in_tmp('--rounds=2', *flags)  # The same command: nothing to do.
  assert again.returncode == 0 and 'already holds' in again.stderr
  (out / 'summary.json').unlink()  # As if killed after its last checkpoint.
  resumed = in_tmp('--rounds=2', *flags)  # Its folder is found again.
  assert 'runs/fedprox_synthetic_1_1_seed0 (resuming)' in resumed.stderr
  assert in_tmp('--rounds=3', *flags).returncode == 0  # Another config:
  assert (tmp_path / 'runs' / 'fedprox_synthetic_1_1_seed0-2').is_dir()  # new.

  before = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}
  given = (*flags, f'--output_dir={out}')
  other = cli('--rounds=3', *given)  # Given explicitly, another config:
  assert other.returncode == 2, other.stderr  # refused.
  assert other.stderr.count('\n') == 1 and 'rounds=2 there, 3 here' in (
    other.stderr
  )
  fresh = cli('--resume', f'--output_dir={tmp_path / "none"}')
  assert fresh.returncode == 2 and 'no run to resume' in fresh.stderr
  assert {p: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

  replaced = cli('--rounds=3', *given, '--overwrite')
  assert replaced.returncode == 0, replaced.stderr
  assert results.summarize(out)['rounds'] == 3


@pytest.mark.fast
def test_non_finite_loss_stops_the_run_and_keeps_its_metrics(
  tmp_path, monkeypatch
):
  # TFF's apply-optimizer finalizer rejects non-finite updates, so a huge
  # learning rate leaves the model as it was: a divergence is simulated
  # instead, the global loss turning NaN from round 2 on.
  build_evaluation = trainer.evaluation.build_evaluation

  def diverging_at_round_2(model_fn, **options):
    evaluate, calls = build_evaluation(model_fn, **options), []

    def patched(weights, arrays):
      calls.append(1)  # Two calls (train, test) per round.
      metrics = dict(evaluate(weights, arrays))
      if len(calls) > 4:
        metrics['loss'] = math.nan
      return metrics

    patched.per_client_accuracy = False  # Only the pooled metrics patched.
    return patched

  monkeypatch.setattr(
    trainer.evaluation, 'build_evaluation', diverging_at_round_2
  )
  task, _ = helpers.task_and_arrays()
  out = tmp_path / 'run'
  with pytest.raises(loop.NonFiniteLoss, match='nan at round 2;'):
    experiment.run(
      helpers.quick_config(rounds=5), task, str(out), show_progress=False
    )
  rows = results.read_rows(str(out))
  assert [r['round'] for r in rows] == ['0', '1', '2']
  assert rows[-1]['train_loss'] == 'nan'
  assert not (out / 'summary.json').exists()


@pytest.mark.slow
def test_a_stop_request_whose_interrupt_was_swallowed_ends_the_round(
  tmp_path, monkeypatch
):
  # Python ignores an exception raised in a garbage-collector callback: a
  # SIGTERM handler's KeyboardInterrupt can vanish. The request it recorded
  # still stops the loop at the end of that round, resumably.
  from tff_algos.simulation import loop as loop_lib

  build_evaluation = trainer.evaluation.build_evaluation
  calls = []  # Over both runs below: the request comes once.
  requests = loop_lib.StopRequests()  # Where the CLI's handlers record.

  def swallowed_at_round_2(model_fn, **options):
    evaluate = build_evaluation(model_fn, **options)

    def patched(weights, arrays):
      calls.append(1)  # Two calls (train, test) per round.
      if len(calls) == 5:
        requests.request(signal.SIGTERM)  # Its raise "swallowed".
      return evaluate(weights, arrays)

    patched.per_client_accuracy = False  # Only the pooled metrics patched.
    return patched

  monkeypatch.setattr(
    trainer.evaluation, 'build_evaluation', swallowed_at_round_2
  )
  task, _ = helpers.task_and_arrays()
  out = tmp_path / 'run'
  with pytest.raises(loop_lib.Interrupted) as interrupted:
    experiment.run(
      helpers.quick_config(rounds=5),
      task,
      str(out),
      show_progress=False,
      stop_requests=requests,
    )
  assert (interrupted.value.round_num, interrupted.value.signum) == (
    2,
    signal.SIGTERM,
  )
  assert [r['round'] for r in results.read_rows(str(out))] == ['0', '1', '2']
  assert requests.pending is None
  experiment.run(
    helpers.quick_config(rounds=5),
    task,
    str(out),
    show_progress=False,
    stop_requests=requests,
  )  # Resumes; no stale request.
  assert results.summarize(str(out))['rounds'] == 5


@pytest.mark.fast
def test_an_interrupt_that_became_a_system_error_still_interrupts():
  """A signal's KeyboardInterrupt raised inside a C call (numpy's __array__
  while TensorFlow converts a round's inputs) surfaces as a SystemError
  caused by it: the loop stops as interrupted at that round, with its
  signal; any other SystemError is a bug and propagates."""
  from tff_algos.simulation import loop as loop_lib

  def stepping(error):
    def step(state, round_num):
      if round_num == 3:
        raise error
      return types.SimpleNamespace(state=state, stop=False)

    run = object.__new__(loop_lib.Loop)  # Only what `run` reads.
    run.callbacks, run.step = [], step
    run.stop_requests = loop_lib.StopRequests()
    return run

  signalled = loop_lib.StopRequests().request(signal.SIGTERM)
  try:
    raise SystemError('returned a result with an exception set') from (
      signalled
    )
  except SystemError as e:
    mangled = e
  with pytest.raises(loop_lib.Interrupted) as interrupted:
    stepping(mangled).run('state', range(1, 6))
  assert (interrupted.value.round_num, interrupted.value.signum) == (
    3,
    signal.SIGTERM,
  )
  with pytest.raises(SystemError):
    stepping(SystemError('a bug')).run('state', range(1, 6))
