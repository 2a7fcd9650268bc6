"""Adding an algorithm is adding one file: this test file registers FedAvg
with server momentum (FedAvgM) and runs it through the command line's code
path; the registry's rules for settings."""

from __future__ import annotations

import dataclasses
import json

import pytest
import tensorflow_federated as tff

import conftest
from conftest import REPO
from tff_algos import cli
from tff_algos import learning
from tff_algos import run
from tff_algos.algorithms import registry
from tff_algos.analysis import plot
from tff_algos.simulation import columns
from tff_algos.simulation import header
from tff_algos.simulation import results
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve


def build_fed_avg_m(
  model_fn,
  client_learning_rate: float,
  server_learning_rate: float,
  server_momentum: float,
  client_input=None,
) -> tff.learning.templates.LearningProcess:
  """FedAvg whose server step is SGD with momentum on the mean update."""
  return learning.compose(
    model_fn,
    learning.build_proximal_sgd_client_work(
      model_fn,
      tff.learning.optimizers.build_sgdm(client_learning_rate),
      client_input=client_input or learning.ScheduledInput(),
    ),
    tff.learning.optimizers.build_sgdm(
      server_learning_rate, momentum=server_momentum
    ),
  )


@pytest.fixture
def fedavgm():
  entry = registry.register(
    registry.Algorithm(
      name='fedavgm_test',
      label='FedAvgM',
      summary='FedAvg, server momentum',
      paper='Hsu et al. 2019',
      uses=(
        'epochs',
        'batch_size',
        'client_lr',
        'server_lr',
        'client_weighting',
        'straggler_policy',
      ),
      defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='drop'),
      hparams=dict(momentum=0.9),
      build=lambda model_fn, settings, client_input: build_fed_avg_m(
        model_fn,
        settings.client_optimizer.learning_rate,
        settings.server_optimizer.learning_rate,
        settings.hparams['momentum'],
        client_input,
      ),
    )
  )
  yield entry
  registry.unregister(entry.name)


def _main(*args):
  """The command's main() in this process."""
  run.main(
    ['run_experiment.py', '--rounds=3', '--epochs=1', '--progress=false', *args]
  )


@pytest.mark.slow
def test_a_registered_algorithm_runs_through_the_command_line(
  fedavgm, tmp_path
):
  runs = {}
  for name, flags in (
    # The user's builder takes no computed input: its runs train per client,
    # so FedAvg's does too (compiled clients sum in another float32 order).
    ('fedavg', ['--algo=fedavg', '--client_execution=per_client']),
    ('momentum0', ['--algo=fedavgm_test', '--momentum=0']),
    ('momentum', ['--algo=fedavgm_test']),
  ):
    _main(*flags, f'--output_dir={tmp_path / name}')
    runs[name] = results.read_rows(tmp_path / name)
  assert {r.pop('mu') for r in runs['fedavg']} == {'0.0'}  # FedAvg's μ.
  config = json.loads((tmp_path / 'momentum' / 'config.json').read_text())
  assert config['algo'] == 'fedavgm_test'
  assert config['momentum'] == 0.9  # Its default.
  assert 'mu' not in config and 'mu' not in runs['momentum'][0]  # Not FedProx.
  assert runs['momentum0'] == runs['fedavg']  # Momentum 0: FedAvg.
  # The first server step has no momentum yet; later ones do.
  assert runs['momentum'][1] == runs['fedavg'][1]
  assert runs['momentum'][3]['train_loss'] != runs['fedavg'][3]['train_loss']
  _, labels = plot.describe([[tmp_path / 'momentum'], [tmp_path / 'fedavg']])
  assert labels == ['FedAvgM momentum=0.9', 'FedAvg']


@pytest.mark.fast
def test_unknown_or_foreign_settings_are_usage_errors(
  fedavgm, tmp_path, capsys
):
  for flags, message in (
    (
      ['--hparam=momentun=0.5'],
      '--momentun is not a fedavgm_test hyper-parameter (it has '
      'epochs, batch_size, client_lr, server_lr, client_weighting, '
      'straggler_policy, momentum)',
    ),
    (['--momentum=inf'], '--momentum must be a number (below 3.4e38'),
    (['--mu=1'], '--mu is not a fedavgm_test hyper-parameter'),
    (['--algo=fedavg', '--mu=1'], '--mu=1: fedavg has mu=0'),
    (['--adaptive_mu'], '--adaptive_mu is not a fedavgm_test hyper-parameter'),
    (  # Its builder makes its own server optimizer (`uses` lacks it).
      ['--server_lr_decay=0.5'],
      '--server_lr_decay is not a fedavgm_test hyper-parameter: its server '
      'optimizer is its own',
    ),
    # Its builder makes its own mean: no noise would
    # be added, so no ε may be reported.
    (
      ['--aggregator=dp', '--dp_noise_multiplier=1', '--dp_clip=1'],
      '--aggregator=dp: the process of '
      '--algo=fedavgm_test carries no DP aggregator',
    ),
  ):
    with pytest.raises(SystemExit) as exit_:
      _main('--algo=fedavgm_test', *flags, f'--output_dir={tmp_path}/x')
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
  assert not (tmp_path / 'x').exists()


_FEDAVGM = REPO / 'tests' / 'commands' / 'user_modules' / 'fedavgm_algorithm.py'


@pytest.mark.fast
@pytest.mark.parametrize(
  'flags, named',
  [
    (['--client_optimizer=sgdm', '--client_momentum=0.9'], 'client_optimizer'),
    (['--server_optimizer=fedadam'], 'server_optimizer'),
  ],
)
def test_a_user_algorithm_refuses_optimizer_flags_it_does_not_declare(
  flags, named, tmp_path, capsys
):
  """FedAvgM (its own file, --import) builds its own optimizers: the flags
  of the run's optimizers are one line and exit 2, nothing written."""
  with pytest.raises(SystemExit) as exit_:
    _main(
      f'--import={_FEDAVGM}',
      '--algo=fedavgm',
      *flags,
      f'--output_dir={tmp_path / "x"}',
    )
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1
  assert f'--{named} is not a fedavgm hyper-parameter' in err
  assert not (tmp_path / 'x').exists()


@pytest.mark.slow
def test_the_command_refuses_a_client_optimizer_the_algorithm_lacks(tmp_path):
  """The same through a real command line (the warm interpreter)."""
  done = conftest.cli(
    f'--import={_FEDAVGM}',
    '--algo=fedavgm',
    '--client_optimizer=sgdm',
    '--client_momentum=0.9',
    f'--output_dir={tmp_path / "x"}',
  )
  assert done.returncode == 2, done.stderr
  assert done.stderr.count('\n') == 1
  assert (
    '--client_optimizer is not a fedavgm hyper-parameter: its client '
    'optimizer is its own (it has epochs, batch_size, client_lr, '
    in done.stderr
  )
  assert not (tmp_path / 'x').exists()


@pytest.mark.fast
def test_resolution_fills_in_each_algorithms_own_settings():
  fedsgd = resolve(Config(algo='fedsgd', client_lr=0.3)).record
  assert (fedsgd.epochs, fedsgd.batch_size, fedsgd.server_lr) == (1, -1, 0.3)
  assert fedsgd.hparams == {'mu': 0.0} and fedsgd.server_lr_decay is None
  fedisgd = resolve(Config(algo='fedisgd')).record
  assert (fedisgd.client_weighting, fedisgd.straggler_policy) == (
    'uniform',
    'partial',
  )
  # A setting the algorithm does not have does not tell runs apart.
  assert (
    resolve(Config.create(algo='fedavg', mu=0.0)).to_json()
    == resolve(Config(algo='fedavg')).to_json()
  )
  with pytest.raises(ConfigError, match='fedsgd has epochs=1'):
    resolve(Config(algo='fedsgd', epochs=5))
  with pytest.raises(ValueError, match='not settings an algorithm can use'):
    registry.Algorithm(
      name='x',
      label='x',
      summary='',
      paper='',
      build=None,
      uses=('momentum',),
      defaults={},
    )


@pytest.mark.parametrize(
  'old, new, hparams',
  [
    (  # Hyper-parameters were fields of their own, None where not had.
      dict(algo='fedprox', mu=0.5, lam=None, adaptive_mu=True, hparams={}),
      dict(algo='fedprox', mu=0.5, adaptive_mu=True),
      {'mu': 0.5, 'adaptive_mu': True},
    ),
    (  # FedISGD's λ was once held as "mu".
      dict(algo='fedisgd', mu=0.3),
      dict(algo='fedisgd', lam=0.3),
      {'lam': 0.3},
    ),
    (
      dict(
        algo='centralized',
        mu=0.0,
        lam=None,
        adaptive_mu=None,
        hparams={'updates_per_round': 50.0},
      ),
      dict(algo='centralized', updates_per_round=50),
      {'mu': 0.0, 'updates_per_round': 50},
    ),
  ],
)
def test_older_config_json_files_load_as_the_same_settings(old, new, hparams):
  loaded = resolve(Config.from_json(old))
  assert loaded.to_json() == resolve(Config.from_json(new)).to_json()
  assert loaded.algorithm.hparams == hparams


@pytest.mark.fast
def test_a_hyperparameter_declares_its_flag_check_column_and_header():
  decay = registry.HyperParameter(
    'decay', 0.5, help='A decay.', minimum=0.0, column='the decay', symbol='δ'
  )
  entry = registry.register(
    dataclasses.replace(registry.get('fedprox'), name='t', hparams=(decay,))
  )
  try:
    config = cli.config_from_flags(_flags('--algo=t', '--decay=0.25'))
    settings = resolve(config)
    assert settings.algorithm.hparams == {'decay': 0.25}
    assert settings.hparam_columns == {'decay': 0.25}
    assert settings.to_json()['decay'] == 0.25
    assert entry.describe_hparams(settings.algorithm.hparams) == ['δ=0.25']
    assert 'decay' in columns.names(settings.hparam_columns)
    for bad in ('--decay=-1', '--decay=inf'):
      with pytest.raises(cli.UsageError, match='--decay must be a number >= 0'):
        cli.config_from_flags(_flags('--algo=t', bad))
    with pytest.raises(cli.UsageError, match='not a fedavg hyper-parameter'):
      cli.config_from_flags(_flags('--algo=fedavg', '--decay=0.25'))
    registry.register(
      dataclasses.replace(
        entry, name='u', hparams=(dataclasses.replace(decay, name='rounds'),)
      )
    )
    with pytest.raises(cli.UsageError, match='named as the flag --rounds'):
      cli.flag_values(run.GROUPS)
  finally:
    registry.unregister('t')
    registry.unregister('u')


def _flags(*args):
  holder = cli.flag_values(run.GROUPS)
  cli.parse(holder, list(args))
  return holder


class _EvenClients(registry.ClientPlan):
  """A user's plan: trains the task's even-indexed clients, 3 steps a
  round."""

  def header(self, num_clients, clients_per_round, settings):
    return [f'{(num_clients + 1) // 2} even clients, K={clients_per_round}']

  def training(self, ids, arrays):
    return list(ids)[::2], list(arrays)[::2]

  def steps_per_round(self, hparams):
    return 3


@pytest.mark.fast
def test_an_algorithm_decides_which_clients_its_runs_train():
  """`Algorithm.clients` and `fixed` run settings: the trainer's clients,
  the sampler's round length, the header and K come from the algorithm's
  declaration alone."""
  import numpy as np

  from tff_algos.simulation import trainer

  registry.register(
    dataclasses.replace(
      registry.get('fedavg'),
      name='t',
      clients=_EvenClients(),
      fixed=dict(registry.get('fedavg').fixed, clients_per_round=2),
    )
  )
  try:
    settings = resolve(Config.create(algo='t', epochs=1))
    assert settings.sampling.clients_per_round == 2
    with pytest.raises(ConfigError, match='--clients_per_round=3: t has'):
      resolve(Config.create(algo='t', clients_per_round=3))
    train = [dict(x=np.full((4, 1), k), y=np.zeros(4)) for k in range(5)]
    data = trainer.ClientData.from_arrays(settings, train)
    assert data.client_ids == ['0', '2', '4']
    assert [int(a['x'][0, 0]) for a in data.train] == [0, 2, 4]
    assert len(data.evaluated) == 5  # f(w) stays over all the clients.
    assert trainer.sampler(settings, data.train).steps_per_round == 3
    line = header.header(settings, _Task(5), 'out', 'new')
    assert '3 even clients, K=2' in line
  finally:
    registry.unregister('t')


@dataclasses.dataclass
class _Task:
  """What the run header reads of a task."""

  size: int
  description: str = 'a task'

  @property
  def client_ids(self):
    return [str(k) for k in range(self.size)]
