"""Optimizers by name, their parameters and learning-rate schedules:
resolution without TensorFlow, compatibility with configs that predate
them, and what they do to a run."""

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
import helpers
from tff_algos import cli
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve


@pytest.mark.fast
def test_the_default_is_todays_plain_sgd_at_a_constant_rate():
  fedavg = resolve(Config(algo='fedavg')).record
  assert (fedavg.client_optimizer, fedavg.server_optimizer) == ('sgd', 'sgd')
  assert (fedavg.client_lr_schedule, fedavg.server_lr_schedule) == (
    'constant',
    'constant',
  )
  assert fedavg.client_momentum is None and fedavg.server_lr_decay is None
  fedisgd = resolve(Config(algo='fedisgd')).record  # η_g decays in steps (×1).
  assert (
    fedisgd.server_lr_schedule,
    fedisgd.server_lr_decay,
    fedisgd.server_lr_decay_every,
  ) == ('step', 1.0, 1)
  assert resolve(Config(algo='fedsgd')).record.client_optimizer is None


@pytest.mark.fast
def test_presets_and_parameters_resolve_with_their_defaults():
  adam = resolve(
    Config(algo='fedprox', client_optimizer='adam', client_beta2=0.99)
  ).record
  assert (adam.client_beta1, adam.client_beta2, adam.client_epsilon) == (
    0.9,
    0.99,
    1e-7,
  )
  fedyogi = resolve(Config(algo='fedavg', server_optimizer='fedyogi')).record
  assert (
    fedyogi.server_beta1,
    fedyogi.server_beta2,
    fedyogi.server_epsilon,
    fedyogi.server_lr,
  ) == (0.9, 0.99, 1e-3, 1e-2)
  given = resolve(
    Config(algo='fedavg', server_optimizer='fedadam', server_lr=0.1)
  ).record
  assert given.server_lr == 0.1  # A given rate wins over the preset's.


@pytest.mark.parametrize(
  'settings, message',
  [
    (
      dict(algo='fedsgd', client_optimizer='adam'),
      '--client_optimizer is not a fedsgd hyper-parameter: its clients run '
      'no optimizer',
    ),
    (
      dict(client_optimizer='adam', client_momentum=0.5),
      'adam has no momentum',
    ),
    (dict(client_optimizer='fedadam'), '--client_optimizer must be one of'),
    (dict(server_lr_decay=0.5), 'needs --server_lr_schedule'),
    (dict(client_lr_schedule='step', client_lr_decay=2.0), r'\(0, 1\]'),
    (
      dict(client_lr_schedule='inverse_time', client_lr_decay=-1.0),
      'positive number',
    ),
    (dict(client_optimizer='sgdm', client_momentum=1.0), r'\[0, 1\)'),
    (dict(server_optimizer='adam', server_epsilon=0.0), 'positive number'),
    (dict(client_lr_schedule='cosine'), 'must be one of constant'),
  ],
)
def test_bad_optimizer_settings_are_config_errors(settings, message):
  with pytest.raises(ConfigError, match=message):
    resolve(Config(**settings))


# A value other than plain SGD's for each optimizer flag of a role.
_NOT_PLAIN = dict(
  momentum=0.9,
  beta1=0.9,
  beta2=0.99,
  epsilon=1e-3,
  lr_schedule='step',
  lr_decay=0.5,
  lr_decay_every=2,
)


def _not_plain(role):
  """{flag: a value plain SGD at a constant rate does not have}."""
  kind = 'sgdm' if role == 'client' else 'fedadam'
  return {
    name: _NOT_PLAIN.get(name.removeprefix(f'{role}_'), kind)
    for name in optimizers.flag_names(role)
  }


@pytest.fixture(scope='module')
def fedavgm():
  """The user's FedAvgM (its own file), whose builder makes its own
  optimizers: its `uses` declares neither."""
  cli.import_modules(
    [str(REPO / 'tests/commands/user_modules/fedavgm_algorithm.py')]
  )
  return registry.get('fedavgm')


@pytest.mark.fast
@pytest.mark.parametrize('role', ['client', 'server'])
def test_an_algorithm_refuses_every_flag_of_an_optimizer_it_does_not_declare(
  fedavgm, role
):
  assert not fedavgm.takes_optimizer(role)
  for name, value in _not_plain(role).items():
    with pytest.raises(ConfigError) as error:
      resolve(Config.create(algo='fedavgm', **{name: value}))
    assert str(error.value) == (
      f'--{name} is not a fedavgm hyper-parameter: its {role} optimizer is '
      'its own (it has epochs, batch_size, client_lr, server_lr, '
      'client_weighting, straggler_policy, momentum, warmup_rounds)'
    )


@pytest.mark.fast
def test_its_builder_gets_plain_sgd_at_its_rates_as_config_json_records(
  fedavgm,
):
  settings = resolve(Config(algo='fedavgm', client_lr=0.05, server_lr=0.5))
  assert settings.algorithm.client_optimizer == optimizers.OptimizerSettings(
    'sgd', 0.05
  )
  assert settings.algorithm.server_optimizer == optimizers.OptimizerSettings(
    'sgd', 0.5
  )
  recorded = settings.to_json()
  assert (recorded['client_optimizer'], recorded['server_optimizer']) == (
    'sgd',
    'sgd',
  )
  # What config.json records (and files written before recorded) loads as
  # the same settings: repeating plain SGD is not a change.
  assert resolve(Config.from_json(recorded)).to_json() == recorded


@pytest.mark.fast
def test_fedsgd_refuses_every_client_optimizer_flag_even_plain_sgd():
  for name, value in (
    *_not_plain('client').items(),
    ('client_optimizer', 'sgd'),
  ):
    with pytest.raises(ConfigError, match='its clients run no optimizer'):
      resolve(Config.create(algo='fedsgd', **{name: value}))


_DECLARED = {
  'client': ('fedavg', 'fedprox', 'fedisgd', 'centralized'),
  'server': ('fedavg', 'fedprox', 'fedisgd', 'fedsgd'),
}


@pytest.mark.fast
@pytest.mark.parametrize('role', ['client', 'server'])
def test_the_builtin_algorithms_apply_the_optimizers_they_declare(role):
  """Each built-in algorithm takes the optimizer flags its builder applies
  (`core.arguments`), resolves them into what its builder gets and
  records them in config.json; the others refuse them."""
  kind = 'sgdm' if role == 'client' else 'fedadam'
  flags = {f'{role}_optimizer': kind, f'{role}_momentum': 0.5}
  if role == 'server':
    flags = {f'{role}_optimizer': kind, f'{role}_beta2': 0.9}
  for algo in ('fedavg', 'fedprox', 'fedisgd', 'fedsgd', 'centralized'):
    declared = registry.get(algo).takes_optimizer(role)
    assert declared == (algo in _DECLARED[role]), algo
    if algo not in _DECLARED[role]:
      with pytest.raises(ConfigError, match=f'--{role}_optimizer is not a'):
        resolve(Config.create(algo=algo, **flags))
      continue
    settings = resolve(Config.create(algo=algo, **flags))
    built = getattr(settings.algorithm, f'{role}_optimizer')
    assert built.kind == kind, algo
    recorded = settings.to_json()
    assert {k: recorded[k] for k in flags} == flags, algo
    assert resolve(Config.from_json(recorded)).to_json() == recorded


@pytest.mark.fast
def test_a_preset_takes_its_rate_from_the_flags_or_its_documented_default():
  rate = lambda **flags: resolve(Config(**flags)).algorithm.server_optimizer
  assert rate(algo='fedavg', server_optimizer='fedadam').learning_rate == 1e-2
  assert (
    rate(algo='fedavg', server_optimizer='fedadam', server_lr=0.3).learning_rate
    == 0.3
  )
  # Presets without a rate of their own take the algorithm's (1: model
  # averaging), whatever a preset of another kind would.
  assert rate(algo='fedavg', server_optimizer='sgdm').learning_rate == 1.0
  assert rate(algo='fedavg', server_optimizer='adam').learning_rate == 1.0
  # FedSGD's η defaults to --client_lr; FedAdam's documented 10⁻² wins.
  assert (
    rate(algo='fedsgd', client_lr=0.3, server_optimizer='fedadam').learning_rate
    == 1e-2
  )
  assert rate(algo='fedsgd', client_lr=0.3).learning_rate == 0.3


@pytest.mark.fast
def test_the_registry_refuses_optimizer_declarations_that_contradict():
  fedavg = registry.get('fedavg')
  for changes, message in (
    (
      dict(uses=('epochs', 'server_lr', 'client_optimizer')),
      'uses client_optimizer but not client_lr',
    ),
    (
      dict(uses=('client_lr', 'server_optimizer')),
      'uses server_optimizer but not server_lr',
    ),
    (dict(client_optimizer=False), 'its clients run none'),
    (
      dict(server_lr_schedule='step', uses=('server_lr',)),
      'a server_lr_schedule of its own needs server_optimizer',
    ),
  ):
    with pytest.raises(ValueError, match=message):
      dataclasses.replace(fedavg, name='x', **changes)


def test_configs_written_before_optimizers_mean_what_they_meant():
  """config.json of an earlier version (no optimizer keys) resolves to the
  settings a run of the same flags has now: the run resumes."""
  for flags in (
    dict(algo='fedavg', client_lr=0.1),
    dict(
      algo='fedisgd',
      server_lr=0.75,
      server_lr_decay=0.5,
      server_lr_decay_every=100,
    ),
  ):
    now = resolve(Config(**flags)).to_json()
    old = {
      k: v
      for k, v in now.items()
      if not k.startswith(
        (
          'client_optimizer',
          'server_optimizer',
          'client_momentum',
          'server_momentum',
          'client_beta',
          'server_beta',
          'client_epsilon',
          'server_epsilon',
          'client_lr_',
          'server_lr_schedule',
        )
      )
      and k not in ('partition', 'imports')
    }
    assert (
      resolve(Config.from_json(json.loads(json.dumps(old)))).to_json() == now
    )


@pytest.mark.fast
def test_schedules_in_python_and_tensorflow_agree():
  for kind, decay, every, expected in (
    ('step', 0.5, 2, [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]),
    ('inverse_time', 1.0, 2, [1.0, 1.0, 0.5, 0.5, 1 / 3, 1 / 3]),
    ('constant', None, None, [1.0] * 6),
  ):
    python = [
      optimizers.Schedule(kind, decay, every).rate(1.0, t) for t in range(6)
    ]
    assert python == pytest.approx(expected)
    if kind != 'constant':
      rate = optimizers.schedule_fn(kind, 1.0, decay, every)
      assert [float(rate(tf.constant(t))) for t in range(6)] == (
        pytest.approx(expected)
      )


def test_optimizers_and_schedules_change_a_run(tmp_path):
  """Client Adam with a step schedule and server FedAdam train a run; a
  client schedule changes the rate of later rounds only."""
  _, sgd = helpers.run(tmp_path, 'sgd', algo='fedavg', rounds=3)
  _, adam = helpers.run(
    tmp_path,
    'adam',
    algo='fedavg',
    rounds=3,
    client_optimizer='adam',
    server_optimizer='fedadam',
  )
  _, decayed = helpers.run(
    tmp_path,
    'decayed',
    algo='fedavg',
    rounds=3,
    client_lr_schedule='step',
    client_lr_decay=0.1,
    client_lr_decay_every=1,
  )
  loss = lambda rows: [float(r['train_loss']) for r in rows]
  assert np.all(np.isfinite(loss(adam))) and loss(adam) != loss(sgd)
  assert loss(decayed)[:2] == loss(sgd)[:2]  # Round 1 at η, then η/10...
  assert loss(decayed)[2] != loss(sgd)[2]
  config = json.loads((tmp_path / 'adam' / 'config.json').read_text())
  assert (
    config['client_optimizer'],
    config['server_optimizer'],
    config['server_beta2'],
    config['server_lr'],
  ) == ('adam', 'fedadam', 0.99, 0.01)
