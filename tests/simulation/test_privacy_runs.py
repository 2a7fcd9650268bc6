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

from conftest import cli
from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos import learning
from tff_algos.privacy import accounting
from tff_algos.simulation import callbacks as callbacks_lib
from tff_algos.simulation import evaluation
from tff_algos.simulation import header
from tff_algos.simulation import results
from tff_algos.simulation import trainer
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve

DP = dict(aggregator='dp', dp_noise_multiplier=0.8, dp_clip=0.5)


def _rows(tmp_path, name, **overrides):
  text, rows = helpers.run(tmp_path, name, **overrides)
  return text, rows


@pytest.fixture(scope='module')
def shared_run(tmp_path_factory):
  """(metrics.csv text, rows, folder) of a run of `overrides` that
  several tests read and none writes to, run once for them all."""
  done = {}

  def run(**overrides):
    key = tuple(sorted(overrides.items()))
    if key not in done:
      folder = tmp_path_factory.mktemp('shared')
      done[key] = (*helpers.run(folder, 'run', **overrides), folder / 'run')
    return done[key]

  return run


def test_a_dp_run_reports_the_epsilon_of_its_sampling_each_round(
  tmp_path, shared_run
):
  _, rows = _rows(tmp_path, 'dp', **DP, client_sampling='poisson')
  config = json.loads((tmp_path / 'dp' / 'config.json').read_text())
  assert config['dp_adjacency'] == 'add-or-remove-one'
  assert config['dp_delta'] == pytest.approx(0.1 / 30)  # 0.1/N by default.
  expected = accounting.epsilons(
    0.8,
    3,
    config['dp_delta'],
    num_clients=30,
    clients_per_round=5,
    sampling='poisson',
  )
  # Recorded at TensorBoard's float32 precision, as every column.
  expected = [float(np.float32(e)) for e in expected]
  assert [float(r['epsilon']) for r in rows] == [0.0, *expected]
  summary = json.loads((tmp_path / 'dp' / 'summary.json').read_text())
  assert summary['final_epsilon'] == expected[-1]
  table_row = results.summarize(tmp_path / 'dp')  # A sweep summary's row.
  assert table_row['final_epsilon'] == expected[-1]
  assert (
    table_row['final_client_test_accuracy_p50']
    == summary['final_client_test_accuracy_p50']
  )
  assert (summary['dp_adjacency'], summary['dp_accountant']) == (
    'add-or-remove-one',
    'rdp',
  )
  _, uniform, _ = shared_run(**DP)  # Replace-one: larger ε.
  assert float(uniform[-1]['epsilon']) > expected[-1]


def test_under_uniform_sampling_the_header_gives_poissons_epsilon_too(
  tmp_path,
):
  """A DP run of uniform sampling says, in the line under its header, that
  its ε is replace-one's and that --client_sampling=poisson gives the
  add-or-remove-one ε, both as the accountant computes them for its noise;
  a run of Poisson sampling says nothing of it."""
  result = cli(
    '--rounds=2',
    '--clients_per_round=5',
    '--epochs=1',
    '--progress=false',
    '--aggregator=dp',
    '--dp_noise_multiplier=0.8',
    '--dp_clip=0.5',
    f'--output_dir={tmp_path / "dp"}',
  )
  assert result.returncode == 0, result.stderr
  lines = result.stderr.splitlines()
  (at,) = [i for i, line in enumerate(lines) if line.startswith('fedprox on')]
  note = lines[at + 1]
  mechanism = accounting.mechanism(0.8, clients_per_round=5)
  spent = {
    sampling: accounting.epsilon_of(
      mechanism,
      2,
      0.1 / 30,
      num_clients=30,
      clients_per_round=5,
      sampling=sampling,
    )
    for sampling in ('uniform', 'poisson')
  }
  assert note == (
    'note: uniform sampling gives the replace-one ε '
    f'({spent["uniform"]:.4g} after 2 rounds at δ=0.0033); '
    '--client_sampling=poisson gives the add-or-remove-one ε of the usual '
    f'DP analyses ({spent["poisson"]:.4g} with this noise)'
  )
  rows = results.read_rows(tmp_path / 'dp')
  assert float(rows[-1]['epsilon']) == float(np.float32(spent['uniform']))
  assert spent['poisson'] < spent['uniform']
  poisson = resolve(
    helpers.quick_config(**DP, client_sampling='poisson'), num_clients=30
  )
  assert header.sampling_note(poisson, mechanism, 30) is None


def test_dp_noise_is_seeded_the_same_seed_the_same_run(tmp_path, shared_run):
  first, _, folder = shared_run(**DP)
  again, _ = _rows(tmp_path, 'again', **DP)  # Run anew, in this process.
  other, _, other_folder = shared_run(**DP, seed=1)
  mean, _, _ = shared_run()
  assert first == again
  assert first != other and first != mean
  # The noise's seed is a constant of the initial state: seeds of one
  # experiment still have one code id, so that they are averaged.
  assert results.code_id(folder) == results.code_id(other_folder)


@pytest.mark.parametrize(
  'flags, message',
  [
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
    (dict(DP, dp_noise_cohort=31), 'more than the 30 clients'),
    (dict(DP, dp_initial_clip=1.0), '--dp_initial_clip is adaptive'),
    (
      dict(aggregator='dp', dp_noise_multiplier=0.1, dp_initial_clip=-1.0),
      '--dp_initial_clip must be a positive number',
    ),
    (dict(DP, dp_noise_seed=-1), '--dp_noise_seed must be in'),
    (dict(dp_noise_seed=1), '--dp_noise_seed needs --aggregator=dp'),
  ],
)
def test_bad_privacy_and_sampling_settings_are_config_errors(flags, message):
  with pytest.raises(ConfigError, match=message):
    resolve(helpers.quick_config(**flags), num_clients=30)


def test_the_noise_seed_varies_the_noise_alone(tmp_path, shared_run):
  _, default, _ = shared_run(**DP)
  _, same = _rows(tmp_path, 'same', **DP, dp_noise_seed=0)
  _, other = _rows(tmp_path, 'other', **DP, dp_noise_seed=7)
  assert same == default
  assert [r['participants'] for r in other] == [
    r['participants'] for r in default
  ]  # The same clients,
  assert other[0] == default[0]  # the same initial model,
  assert other[1]['train_loss'] != default[1]['train_loss']  # other noise.


@pytest.mark.fast
def test_dp_makes_the_mean_uniform_and_proportional_sampling_too():
  assert resolve(helpers.quick_config(**DP)).algorithm.client_weighting == (
    'uniform'
  )
  proportional = resolve(helpers.quick_config(client_sampling='proportional'))
  assert proportional.algorithm.client_weighting == 'uniform'
  given = resolve(
    helpers.quick_config(
      client_sampling='proportional', client_weighting='num_examples'
    )
  )
  assert given.algorithm.client_weighting == 'num_examples'


@pytest.mark.parametrize('sampling', ['poisson', 'proportional'])
def test_sampling_schemes_train_and_draw_the_same_for_every_algorithm(
  tmp_path, sampling, shared_run
):
  _, fedavg = _rows(tmp_path, 'fedavg', algo='fedavg', client_sampling=sampling)
  _, fedprox = _rows(
    tmp_path, 'fedprox', algo='fedprox', mu=0.0, client_sampling=sampling
  )
  _, uniform, _ = shared_run(algo='fedavg')
  participants = lambda rows: [r['participants'] for r in rows[1:]]
  assert participants(fedavg) == participants(fedprox)
  assert fedavg != uniform
  if sampling == 'poisson':
    assert len(set(participants(fedavg))) >= 1


def test_the_per_client_columns_are_those_of_client_accuracy_csv(shared_run):
  _, rows, folder = shared_run()
  with open(folder / 'client_accuracy.csv', newline='') as f:
    clients = list(csv.DictReader(f))
  assert len(clients) == 30 and {c['round'] for c in clients} == {'3'}
  accuracy = np.array([float(c['accuracy']) for c in clients if c['accuracy']])
  final = rows[-1]
  for name, value in evaluation.client_accuracy_summary(
    accuracy, np.ones_like(accuracy)
  ).items():
    assert float(final[name]) == float(np.float32(value)), name
  assert float(final['client_test_accuracy_min']) == accuracy.min()
  summary = json.loads((folder / 'summary.json').read_text())
  assert summary['final_client_test_accuracy_p50'] == float(
    final['client_test_accuracy_p50']
  )


def test_the_per_client_plot_pools_seeds_and_refuses_runs_without_it(tmp_path):
  for seed in (0, 1):
    _rows(tmp_path, f'seed{seed}', seed=seed)
  from tff_algos import plot

  assert (
    plot.main(
      [
        str(tmp_path / 'seed0'),
        str(tmp_path / 'seed1'),
        '--per_client',
        f'--out={tmp_path / "ecdf.png"}',
      ]
    )
    == 0
  )
  assert (tmp_path / 'ecdf.png').stat().st_size > 0
  (tmp_path / 'seed1' / results.CLIENT_ACCURACY_FILE).unlink()
  with pytest.raises(SystemExit) as exit_:
    plot.main(
      [
        str(tmp_path / 'seed1'),
        '--per_client',
        f'--out={tmp_path / "none.png"}',
      ]
    )
  assert exit_.value.code == 2


def test_the_privacy_utility_plot_puts_each_line_at_its_epsilons(
  tmp_path, shared_run
):
  from tff_algos import plot
  from tff_algos.analysis import plot as plot_lib

  _rows(tmp_path, 'noisier', **dict(DP, dp_noise_multiplier=2.0))
  runs = [shared_run(**DP)[2], shared_run(**DP, seed=1)[2]]
  runs.append(tmp_path / 'noisier')
  groups = plot_lib.seed_groups([str(r) for r in runs])
  assert [len(g) for g in groups] == [2, 1]  # The seeds are one line.
  rows = results.read_rows(runs[0])
  rounds = [int(r['round']) for r in rows]
  assert plot_lib._positions(groups[0], rounds, 'epsilon') == [
    float(r['epsilon']) for r in rows
  ]
  assert (
    plot.main(
      [
        *map(str, runs),
        '--metric=test_accuracy',
        '--x=epsilon',
        f'--out={tmp_path / "pu.png"}',
      ]
    )
    == 0
  )
  _, labels = plot_lib.describe(groups)
  assert ['z=0.8' in labels[0], 'z=2' in labels[1]] == [True, True]
  with pytest.raises(ValueError, match='different .epsilon.'):
    plot_lib._positions([str(runs[0]), str(runs[2])], rounds, 'epsilon')
  no_dp = shared_run()[2]
  with pytest.raises(SystemExit) as exit_:
    plot.main([str(no_dp), '--x=epsilon', f'--out={tmp_path / "none.png"}'])
  assert exit_.value.code == 2


@pytest.mark.parametrize('aggregator', ['compression', 'robust'])
def test_tffs_compression_and_robust_aggregators_train(tmp_path, aggregator):
  _, rows = _rows(tmp_path, aggregator, aggregator=aggregator)
  assert np.isfinite(float(rows[-1]['train_loss']))
  assert float(rows[-1]['train_loss']) < float(rows[0]['train_loss'])


RUN = (
  '--rounds=8',
  '--epochs=1',
  '--progress=false',
  '--checkpoint_every=1',
  '--aggregator=dp',
  '--dp_noise_multiplier=0.8',
  '--dp_clip=0.5',
  '--client_sampling=poisson',
)


@pytest.mark.slow
def test_a_killed_dp_run_resumes_to_the_uninterrupted_metrics(tmp_path):
  """The noise is seeded from (seed, round) and kept in the process state:
  a DP run SIGKILLed and resumed ends byte for byte as one that was not."""
  whole = tmp_path / 'whole'
  result = cli(*RUN, f'--output_dir={whole}')
  assert result.returncode == 0
  # Poisson sampling: its ε is add-or-remove-one's, no note on sampling.
  assert 'note: uniform sampling' not in result.stderr
  killed = tmp_path / 'killed'
  process = subprocess.Popen(
    [sys.executable, 'run_experiment.py', *RUN, f'--output_dir={killed}'],
    cwd=REPO,
    env=USER_ENV,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  deadline = time.monotonic() + 300
  while (
    not (killed / 'checkpoints').is_dir()
    or len(list((killed / 'checkpoints').glob('round_*'))) < 2
    or len((killed / 'metrics.csv').read_text().splitlines()) < 5
  ):
    assert process.poll() is None, 'the run ended before it was killed'
    assert time.monotonic() < deadline
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()
  resumed = cli(*RUN, f'--output_dir={killed}')
  assert resumed.returncode == 0 and '(resuming)' in resumed.stderr
  assert (killed / 'metrics.csv').read_bytes() == (
    whole / 'metrics.csv'
  ).read_bytes()


def test_every_round_of_a_dp_run_is_a_noised_release_even_without_clients(
  tmp_path,
):
  """Poisson sampling at q = 1/30 draws no client in some rounds: the
  server still releases the noise of a zero sum, so that the ε of the
  sampled Gaussian is the ε of what was released."""
  _, rows = _rows(
    tmp_path,
    'poisson',
    algo='fedavg',
    epochs=1,
    rounds=8,
    aggregator='dp',
    client_sampling='poisson',
    clients_per_round=1,
    dp_noise_multiplier=2.0,
    dp_clip=0.5,
    dp_delta=1e-5,
  )
  empty = [r for r in rows[1:] if r['participants'] == '0']
  assert len(empty) >= 2
  for row in empty:  # Its model is not the round before's.
    before = rows[int(row['round']) - 1]
    assert row['train_loss'] != before['train_loss']
  expected = accounting.epsilons(
    2.0, 8, 1e-5, num_clients=30, clients_per_round=1, sampling='poisson'
  )
  assert [float(r['epsilon']) for r in rows[1:]] == [
    float(np.float32(e)) for e in expected
  ]


class _Weights(trainer.RoundCallback):
  """Each round's row and global model weights."""

  def __init__(self):
    self.rounds = []

  def after_round(self, end):
    self.rounds.append(
      (
        dict(end.row),
        [np.asarray(w, np.float64) for w in end.weights.trainable],
      )
    )


# Mechanisms at a large z, the clients' updates ~0 (a learning rate of
# 1e-12): a round's change of the model is the noise alone.
NOISE_RUNS = {
  'fixed': dict(clients_per_round=10, dp_noise_multiplier=50.0, dp_clip=1.0),
  'adaptive': dict(
    clients_per_round=30, dp_noise_multiplier=2.5, dp_initial_clip=2.0
  ),
  'cohort': dict(
    clients_per_round=10,
    dp_noise_multiplier=50.0,
    dp_clip=1.0,
    dp_noise_cohort=30,
  ),
  'poisson_with_empty_rounds': dict(
    clients_per_round=1,
    dp_noise_multiplier=50.0,
    dp_clip=1.0,
    client_sampling='poisson',
  ),
}


@pytest.mark.parametrize('name', sorted(NOISE_RUNS))
def test_the_noise_added_is_the_noise_the_accountant_assumed(name):
  """The per-coordinate change of the model each round, over the clip norm
  and the mean's divisor K, is the value noise multiplier of the mechanism
  the ε is computed for (6 rounds × 610 coordinates: a relative error of
  about 1.2%)."""
  task, arrays = helpers.task_and_arrays()
  settings = resolve(
    helpers.quick_config(
      algo='fedavg',
      epochs=1,
      client_lr=1e-12,
      rounds=6,
      aggregator='dp',
      **NOISE_RUNS[name],
    ),
    num_clients=30,
  )
  loop = trainer.loop_for(settings, task.model_fn, arrays, evaluate=False)
  (spent,) = [
    c for c in loop.callbacks if isinstance(c, callbacks_lib.PrivacySpent)
  ]
  recorded = _Weights()
  loop.callbacks.append(recorded)
  loop.run(
    loop.initial_state(
      learning.initial_model_weights(task.model_fn, settings.run.seed)
    ),
    range(settings.run.rounds + 1),
  )
  k = settings.sampling.clients_per_round
  ratios, participants = [], []
  for (_, before), (row, after) in zip(recorded.rounds, recorded.rounds[1:]):
    change = np.concatenate([(a - b).ravel() for a, b in zip(after, before)])
    clip = row.get('dp_clip_norm', settings.privacy.clip)
    ratios.append(np.std(change) / (clip / k))
    participants.append(row['participants'])
  assert np.mean(ratios) == pytest.approx(
    spent.mechanism.noise_multipliers[0], rel=0.06
  )
  if name == 'cohort':  # The model's noise is that of M clients: zC/M.
    assert spent.mechanism.noise_multipliers[0] == pytest.approx(50 * 10 / 30)
  if name == 'poisson_with_empty_rounds':
    assert 0 in participants
    empty = [r for r, p in zip(ratios, participants) if p == 0]
    assert np.mean(empty) == pytest.approx(50.0, rel=0.1)


def test_with_a_noise_cohort_epsilon_is_the_trained_models(tmp_path):
  """K = 5 clients with the noise of M = 10: the model's noise multiplier
  is z·K/M, and its ε is the epsilon column; the M-client deployment's is
  deployment_epsilon, and summary.json says which is which."""
  _, rows = _rows(
    tmp_path, 'cohort', **DP, dp_noise_cohort=10, client_sampling='poisson'
  )
  delta = 0.1 / 30
  model = accounting.epsilons(
    0.8 * 5 / 10,
    3,
    delta,
    num_clients=30,
    clients_per_round=5,
    sampling='poisson',
  )
  deployment = accounting.epsilons(
    0.8,
    3,
    delta,
    num_clients=30,
    clients_per_round=5,
    sampling='poisson',
    noise_cohort_size=10,
  )
  as_written = lambda values: [float(np.float32(e)) for e in values]
  assert [float(r['epsilon']) for r in rows[1:]] == pytest.approx(
    as_written(model), rel=1e-6
  )
  assert [float(r['deployment_epsilon']) for r in rows[1:]] == as_written(
    deployment
  )
  assert model[-1] > 2 * deployment[-1]
  summary = json.loads((tmp_path / 'cohort' / 'summary.json').read_text())
  assert 'trained model' in summary['final_epsilon_of']
  assert 'not the trained model' in summary['final_deployment_epsilon_of']
