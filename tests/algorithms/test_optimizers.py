"""Optimizers by name, their parameters and learning-rate schedules:
resolution without TensorFlow, compatibility with configs that predate
them, and what they do to a run."""

import json

import numpy as np
import pytest
import tensorflow as tf

import helpers
from tff_algos.algorithms import optimizers
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
    (dict(algo='fedsgd', client_optimizer='adam'), 'no client optimizer'),
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
