"""Privacy and fairness in a run: DP from the command line with its ε per
round, client sampling schemes, and the per-client view of the model."""

import csv
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO
from conftest import USER_ENV
from conftest import cli
import helpers
from tff_algos.simulation import accounting
from tff_algos.simulation import evaluation
from tff_algos.simulation import results
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve

DP = dict(aggregator='dp', dp_noise_multiplier=0.8, dp_clip=0.5)


def _rows(tmp_path, name, **overrides):
  text, rows = helpers.run(tmp_path, name, **overrides)
  return text, rows


def test_a_dp_run_reports_the_epsilon_of_its_sampling_each_round(tmp_path):
  _, rows = _rows(tmp_path, 'dp', **DP, client_sampling='poisson')
  config = json.loads((tmp_path / 'dp' / 'config.json').read_text())
  assert config['dp_adjacency'] == 'add-or-remove-one'
  assert config['dp_delta'] == pytest.approx(0.1 / 30)  # 0.1/N by default.
  expected = accounting.epsilons(
      0.8, 3, config['dp_delta'], num_clients=30, clients_per_round=5,
      sampling='poisson')
  # Recorded at TensorBoard's float32 precision, as every column.
  expected = [float(np.float32(e)) for e in expected]
  assert [float(r['epsilon']) for r in rows] == [0.0, *expected]
  summary = json.loads((tmp_path / 'dp' / 'summary.json').read_text())
  assert summary['final_epsilon'] == expected[-1]
  table_row = results.summarize(tmp_path / 'dp')  # A sweep summary's row.
  assert table_row['final_epsilon'] == expected[-1]
  assert table_row['final_client_test_accuracy_p50'] == summary[
      'final_client_test_accuracy_p50']
  assert (summary['dp_adjacency'], summary['dp_accountant']) == (
      'add-or-remove-one', 'rdp')
  _, uniform = _rows(tmp_path, 'uniform', **DP)  # Replace-one: larger ε.
  assert float(uniform[-1]['epsilon']) > expected[-1]


def test_dp_noise_is_seeded_the_same_seed_the_same_run(tmp_path):
  first, _ = _rows(tmp_path, 'a', **DP)
  again, _ = _rows(tmp_path, 'b', **DP)
  other, _ = _rows(tmp_path, 'c', **DP, seed=1)
  mean, _ = _rows(tmp_path, 'd')
  assert first == again
  assert first != other and first != mean
  # The noise's seed is a constant of the initial state: seeds of one
  # experiment still have one code id, so that they are averaged.
  assert results.code_id(tmp_path / 'a') == results.code_id(tmp_path / 'c')


@pytest.mark.parametrize('flags, message', [
    (dict(dp_clip=1.0), '--dp_clip needs --aggregator=dp'),
    (dict(aggregator='dp'), 'needs --dp_noise_multiplier'),
    (dict(aggregator='dp', dp_noise_multiplier=-1.0), 'must be a number >= 0'),
    (dict(DP, dp_clip=0.0), '--dp_clip must be a positive number'),
    (dict(DP, dp_delta=1.0), r'--dp_delta must be in \(0, 1\)'),
    (dict(DP, dp_accountant='pld'), 'needs --client_sampling=poisson'),
    (dict(DP, client_sampling='proportional'), 'no DP accountant'),
    (dict(aggregator='dp', dp_noise_multiplier=1.0), 'adaptive clipping needs'),
    (dict(DP, client_weighting='num_examples'), 'unweighted mean'),
    (dict(client_sampling='poisson', clients_per_round=40), 'q = K/N'),
    (dict(DP, dp_noise_cohort=3), '--dp_noise_cohort must be >= '),
])
def test_bad_privacy_and_sampling_settings_are_config_errors(flags, message):
  with pytest.raises(ConfigError, match=message):
    resolve(helpers.quick_config(**flags), num_clients=30)


def test_dp_makes_the_mean_uniform_and_proportional_sampling_too():
  assert resolve(helpers.quick_config(**DP)).algorithm.client_weighting == (
      'uniform')
  proportional = resolve(helpers.quick_config(client_sampling='proportional'))
  assert proportional.algorithm.client_weighting == 'uniform'
  given = resolve(helpers.quick_config(client_sampling='proportional',
                                       client_weighting='num_examples'))
  assert given.algorithm.client_weighting == 'num_examples'


@pytest.mark.parametrize('sampling', ['poisson', 'proportional'])
def test_sampling_schemes_train_and_draw_the_same_for_every_algorithm(
    tmp_path, sampling):
  _, fedavg = _rows(tmp_path, 'fedavg', algo='fedavg', client_sampling=sampling)
  _, fedprox = _rows(tmp_path, 'fedprox', algo='fedprox', mu=0.0,
                     client_sampling=sampling)
  _, uniform = _rows(tmp_path, 'uniform', algo='fedavg')
  participants = lambda rows: [r['participants'] for r in rows[1:]]  # pylint: disable=unnecessary-lambda-assignment
  assert participants(fedavg) == participants(fedprox)
  assert fedavg != uniform
  if sampling == 'poisson':
    assert len(set(participants(fedavg))) >= 1


def test_the_per_client_columns_are_those_of_client_accuracy_csv(tmp_path):
  _, rows = _rows(tmp_path, 'run')
  with open(tmp_path / 'run' / 'client_accuracy.csv', newline='') as f:
    clients = list(csv.DictReader(f))
  assert len(clients) == 30 and {c['round'] for c in clients} == {'3'}
  accuracy = np.array([float(c['accuracy']) for c in clients if
                       c['accuracy']])
  final = rows[-1]
  for name, value in evaluation.client_accuracy_summary(
      accuracy, np.ones_like(accuracy)).items():
    assert float(final[name]) == float(np.float32(value)), name
  assert float(final['client_test_accuracy_min']) == accuracy.min()
  summary = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  assert summary['final_client_test_accuracy_p50'] == float(
      final['client_test_accuracy_p50'])


def test_the_per_client_plot_pools_seeds_and_refuses_runs_without_it(
    tmp_path):
  for seed in (0, 1):
    _rows(tmp_path, f'seed{seed}', seed=seed)
  from tff_algos import plot  # pylint: disable=g-import-not-at-top
  assert plot.main([str(tmp_path / 'seed0'), str(tmp_path / 'seed1'),
                    '--per_client', f'--out={tmp_path / "ecdf.png"}']) == 0
  assert (tmp_path / 'ecdf.png').stat().st_size > 0
  (tmp_path / 'seed1' / results.CLIENT_ACCURACY_FILE).unlink()
  with pytest.raises(SystemExit) as exit_:
    plot.main([str(tmp_path / 'seed1'), '--per_client',
               f'--out={tmp_path / "none.png"}'])
  assert exit_.value.code == 2


def test_the_privacy_utility_plot_puts_each_line_at_its_epsilons(tmp_path):
  from tff_algos import plot  # pylint: disable=g-import-not-at-top
  from tff_algos.analysis import plot as plot_lib  # pylint: disable=g-import-not-at-top
  runs = [tmp_path / name for name in ('seed0', 'seed1', 'noisier')]
  for run, seed, z in zip(runs, (0, 1, 0), (0.8, 0.8, 2.0)):
    _rows(tmp_path, run.name, **dict(DP, dp_noise_multiplier=z), seed=seed)
  groups = plot_lib.seed_groups([str(r) for r in runs])
  assert [len(g) for g in groups] == [2, 1]  # The seeds are one line.
  rows = results.read_rows(runs[0])
  rounds = [int(r['round']) for r in rows]
  assert plot_lib._positions(groups[0], rounds, 'epsilon') == [
      float(r['epsilon']) for r in rows]
  assert plot.main([*map(str, runs), '--metric=test_accuracy',
                    '--x=epsilon', f'--out={tmp_path / "pu.png"}']) == 0
  _, labels = plot_lib.describe(groups)
  assert ['z=0.8' in labels[0], 'z=2' in labels[1]] == [True, True]
  with pytest.raises(ValueError, match='different .epsilon.'):
    plot_lib._positions([str(runs[0]), str(runs[2])], rounds, 'epsilon')
  _rows(tmp_path, 'no_dp')
  with pytest.raises(SystemExit) as exit_:
    plot.main([str(tmp_path / 'no_dp'), '--x=epsilon',
               f'--out={tmp_path / "none.png"}'])
  assert exit_.value.code == 2


@pytest.mark.parametrize('aggregator', ['compression', 'robust'])
def test_tffs_compression_and_robust_aggregators_train(tmp_path, aggregator):
  _, rows = _rows(tmp_path, aggregator, aggregator=aggregator)
  assert np.isfinite(float(rows[-1]['train_loss']))
  assert float(rows[-1]['train_loss']) < float(rows[0]['train_loss'])


RUN = ('--rounds=8', '--epochs=1', '--progress=false', '--checkpoint_every=1',
       '--aggregator=dp', '--dp_noise_multiplier=0.8', '--dp_clip=0.5',
       '--client_sampling=poisson')


@pytest.mark.slow
def test_a_killed_dp_run_resumes_to_the_uninterrupted_metrics(tmp_path):
  """The noise is seeded from (seed, round) and kept in the process state:
  a DP run SIGKILLed and resumed ends byte for byte as one that was not."""
  whole = tmp_path / 'whole'
  assert cli(*RUN, f'--output_dir={whole}').returncode == 0
  killed = tmp_path / 'killed'
  process = subprocess.Popen(
      [sys.executable, 'run_experiment.py', *RUN, f'--output_dir={killed}'],
      cwd=REPO, env=USER_ENV, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 300
  while not (killed / 'checkpoints').is_dir() or len(list(
      (killed / 'checkpoints').glob('round_*'))) < 2 or len(
          (killed / 'metrics.csv').read_text().splitlines()) < 5:
    assert process.poll() is None, 'the run ended before it was killed'
    assert time.monotonic() < deadline
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()
  resumed = cli(*RUN, f'--output_dir={killed}')
  assert resumed.returncode == 0 and '(resuming)' in resumed.stderr
  assert (killed / 'metrics.csv').read_bytes() == (
      whole / 'metrics.csv').read_bytes()
