"""Your own research on the harness: a task and an algorithm
from files of their own (tests/commands/user_modules) through the real
command line, a sweep over seeds in subprocesses, killed and resumed, its
summary, and plots that name what differs."""

import csv
import dataclasses
import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from conftest import USER_ENV
import helpers
import warm

MODULES = REPO / 'tests' / 'commands' / 'user_modules'
IMPORTS = (
  f'--import={MODULES / "blobs_task.py"}',
  f'--import={MODULES / "fedavgm_algorithm.py"}',
)
SWEEP = (
  *IMPORTS,
  '--task=blobs',
  '--algo=fedavgm',
  '--rounds=4',
  '--clients_per_round=3',
  '--epochs=1',
  '--server_lr=0.5',
  '--momentum=0.5',
  '--progress=false',
  '--checkpoint_every=1',
  '--sweep=seed=0,1',
)


def _command(*args, cwd, module='tff_algos', fresh_interpreter=False):
  """`python -m MODULE ARGS` from `cwd` (not the repository): through the
  warm interpreter (tests/warm.py), or with `fresh_interpreter`, in a new
  one (a command killed mid-run, or whose whole stderr is checked: a warm
  one has imported TensorFlow before it starts)."""
  python = [sys.executable] if fresh_interpreter else warm.command()
  return [*python, '-m', module, *args], dict(cwd=cwd, env=USER_ENV, text=True)


def _rows(path):
  try:
    with open(path, newline='') as f:
      return list(csv.DictReader(f))
  except OSError:
    return []


@pytest.mark.slow
def test_a_sweep_of_your_task_and_algorithm_survives_a_kill(tmp_path):
  out = tmp_path / 'sweep'
  sweep = (*SWEEP, f'--output_dir={out}')
  command, kwargs = _command(*sweep, cwd=tmp_path, fresh_interpreter=True)
  first = subprocess.Popen(
    command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs
  )
  deadline = time.monotonic() + 300
  while len(_rows(out / 'run__seed-0' / 'metrics.csv')) < 3:
    assert first.poll() is None, first.communicate()
    assert time.monotonic() < deadline
    time.sleep(0.05)
  first.send_signal(signal.SIGKILL)  # The sweep, and with it its run.
  first.wait()
  assert not (out / 'summary.md').exists()

  command, kwargs = _command(*sweep, cwd=tmp_path)  # The same, resumed.
  again = subprocess.run(command, capture_output=True, timeout=600, **kwargs)
  assert again.returncode == 0, again.stderr[-3000:]
  assert '(resuming)' in again.stderr  # Seed 0 went on from its checkpoint.
  assert 'results in ' in again.stderr and 'summary.md' in again.stderr
  for seed in (0, 1):
    run_dir = out / f'run__seed-{seed}'
    config = json.loads((run_dir / 'config.json').read_text())
    assert config['algo'] == 'fedavgm' and config['task'] == 'blobs'
    assert config['imports'] == [
      str(MODULES / 'blobs_task.py'),
      str(MODULES / 'fedavgm_algorithm.py'),
    ]
    rows = _rows(run_dir / 'metrics.csv')
    assert [r['round'] for r in rows] == ['0', '1', '2', '3', '4']
    # The algorithm's own metrics: from its process and from its hook.
    assert all(float(r['mean_update_norm']) > 0 for r in rows[1:])
    assert [float(r['server_lr_now']) for r in rows[1:]] == [
      0.25,
      0.5,
      0.5,
      0.5,
    ]
    summary = json.loads((run_dir / 'summary.json').read_text())
    assert summary['final_mean_update_norm'] == float(
      rows[-1]['mean_update_norm']
    )
  summary = (out / 'summary.md').read_text()
  assert 'Mean ± standard deviation over seeds' in summary
  with open(out / 'summary_seeds.csv', newline='') as f:
    (seeds,) = list(csv.DictReader(f))
  assert (
    seeds['seeds'] == '0 1' and float(seeds['final_test_accuracy_std']) >= 0
  )
  assert (out / 'train_loss.png').stat().st_size > 0

  # Plots: the two seeds are one line; a run of another task is refused
  # unless asked for.
  other = tmp_path / 'synthetic'
  other.mkdir()
  (other / 'metrics.csv').write_text('round,train_loss\n0,2.3\n1,1.9\n')
  (other / 'config.json').write_text(
    json.dumps(
      dict(algo='fedavg', task='synthetic_1_1', epochs=20, batch_size=10)
    )
  )
  runs = [str(out / 'run__seed-0'), str(out / 'run__seed-1'), str(other)]
  # A fresh interpreter: the one line on stderr is all a user would see.
  plot, plot_kwargs = _command(
    cwd=tmp_path, module='tff_algos.plot', fresh_interpreter=True
  )
  refused = subprocess.run(
    [*plot, *runs, f'--out={tmp_path / "mixed.png"}'],
    capture_output=True,
    **plot_kwargs,
  )
  assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
  assert 'different tasks (blobs, synthetic_1_1)' in refused.stderr
  assert not (tmp_path / 'mixed.png').exists()
  plot, plot_kwargs = _command(cwd=tmp_path, module='tff_algos.plot')
  allowed = subprocess.run(
    [*plot, *runs, '--allow_mixed_tasks', f'--out={tmp_path / "mixed.png"}'],
    capture_output=True,
    **plot_kwargs,
  )
  assert allowed.returncode == 0, allowed.stderr
  assert (tmp_path / 'mixed.png').stat().st_size > 0


def test_an_undeclared_metric_is_reported_not_dropped(tmp_path, capsys):
  """A metric the process reports but the algorithm does not declare is
  said once on stderr."""
  from tff_algos import cli
  from tff_algos.algorithms import registry

  cli.import_modules([str(MODULES / 'fedavgm_algorithm.py')])
  entry = registry.get('fedavgm')

  def undeclared(settings):  # Its callbacks, their columns not declared.
    callbacks = entry.round_callbacks(settings)
    for callback in callbacks:
      callback.columns = {}
    return callbacks

  quiet = registry.register(
    dataclasses.replace(
      entry, name='fedavgm_undeclared', metrics={}, callbacks=undeclared
    )
  )
  try:
    _, rows = helpers.run(tmp_path, 'undeclared', algo=quiet.name, rounds=2)
  finally:
    registry.unregister(quiet.name)
  assert 'mean_update_norm' not in rows[0]
  err = capsys.readouterr().err
  assert err.count('aggregator/mean_update_norm =') == 1  # Its process's...
  assert err.count('server_lr_now =') == 1  # ...and its callback's.
  assert 'declare it in the algorithm' in err


def test_the_example_algorithm_runs_in_a_sweep_plots_and_exports(tmp_path):
  """examples/fedprox_mu_decay.py, one file: with no decay it is FedProx,
  value for value (its own column says the decay); with decay its callback
  sets μ_t = μ·decay^t each round; its runs plot and it exports."""
  example = f'--import={REPO / "examples" / "fedprox_mu_decay.py"}'
  out = tmp_path / 'sweep'
  command, kwargs = _command(
    example,
    '--task=synthetic_1_1',
    '--rounds=3',
    '--clients_per_round=3',
    '--epochs=1',
    '--progress=false',
    '--variant=decaying: --algo=fedprox_mu_decay --mu_decay=0.5',
    '--variant=constant: --algo=fedprox_mu_decay --mu_decay=1',
    '--variant=fedprox: --algo=fedprox --mu=1',
    f'--output_dir={out}',
    cwd=tmp_path,
  )
  result = subprocess.run(command, capture_output=True, timeout=600, **kwargs)
  assert result.returncode == 0, result.stderr[-3000:]
  constant = _rows(out / 'constant' / 'metrics.csv')
  assert [r.pop('mu_decay') for r in constant] == ['1.0'] * 4
  assert constant == _rows(out / 'fedprox' / 'metrics.csv')
  assert 'μ=1, μ decay=0.5' in result.stderr  # The run's header.
  decaying = _rows(out / 'decaying' / 'metrics.csv')
  assert [float(r['mu']) for r in decaying[1:]] == [1.0, 0.5, 0.25]
  assert (
    decaying[-1]['train_loss']
    != _rows(out / 'constant' / 'metrics.csv')[-1]['train_loss']
  )

  plot, plot_kwargs = _command(cwd=tmp_path, module='tff_algos.plot')
  plotted = subprocess.run(
    [
      *plot,
      str(out / 'decaying'),
      str(out / 'fedprox'),
      '--metric=mu',
      f'--out={tmp_path / "mu.png"}',
    ],
    capture_output=True,
    **plot_kwargs,
  )
  assert plotted.returncode == 0, plotted.stderr
  export, export_kwargs = _command(
    example,
    '--algo=fedprox_mu_decay',
    '--task=synthetic_1_1',
    f'--out={tmp_path / "export"}',
    cwd=tmp_path,
    module='tff_algos.export',
  )
  exported = subprocess.run(
    export, capture_output=True, timeout=600, **export_kwargs
  )
  assert exported.returncode == 0, exported.stderr[-3000:]
  manifest = json.loads((tmp_path / 'export' / 'manifest.json').read_text())
  assert manifest['algorithm'] == 'fedprox_mu_decay'
  assert manifest['hyperparameters']['mu'] == 1.0
  assert manifest['hyperparameters']['mu_decay'] == 0.9
  # The decay is a round callback, not part of the computations: the
  # manifest says what a pipeline has to do between rounds.
  assert "sets the client work's μ" in manifest['round_callbacks']['DecayingMu']


@pytest.mark.fast
def test_the_example_algorithms_own_flag_is_checked_and_helped(
  tmp_path, capsys
):
  from tff_algos import run

  example = f'--import={REPO / "examples" / "fedprox_mu_decay.py"}'
  with pytest.raises(SystemExit) as exit_:
    run.main(
      [
        'run_experiment.py',
        example,
        '--algo=fedprox_mu_decay',
        '--mu_decay=-0.5',
        f'--output_dir={tmp_path / "x"}',
      ]
    )
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and '--mu_decay must be a number >= 0' in err
  assert not (tmp_path / 'x').exists()
  run.main(['run_experiment.py', example, '--help'])
  helped = capsys.readouterr().out
  assert '--mu_decay\n      The factor μ is multiplied by' in helped
