"""The DP settings (`--aggregator=dp` and the `--dp_*` flags), declared in
`simulation.config`: their defaults, and one line naming the flag for
values no run can use."""

import pytest

from tff_algos.privacy import budget
from tff_algos.simulation import config as config_lib

pytestmark = pytest.mark.fast  # Few tests, each cheap: all in the fast set.

DP = dict(
  aggregator='dp',
  client_sampling='uniform',
  clients_per_round=10,
  task='synthetic_1_1',
  dp_noise_multiplier=0.5,
)


def _resolve(num_clients=100, **values):
  """The DP settings of a run, as config.json records them."""
  config = config_lib.Config(**{**DP, **values})
  settings = config_lib.resolve(config, num_clients=num_clients)
  return {k: v for k, v in settings.to_json().items() if k.startswith('dp_')}


def test_every_dp_flag_is_a_privacy_setting_that_needs_the_dp_aggregator():
  dp = [s for s in config_lib.SETTINGS if s.name.startswith('dp_')]
  assert len(dp) == 9
  assert all(s.group == 'privacy' for s in dp)
  assert all(s.needs == ('aggregator', 'dp') for s in dp)


def test_without_dp_every_setting_is_none_and_a_dp_flag_an_error():
  resolved = _resolve(
    10, aggregator='mean', client_sampling='poisson', dp_noise_multiplier=None
  )
  assert set(resolved.values()) == {None} and len(resolved) == 9
  with pytest.raises(
    config_lib.ConfigError, match=r'^--dp_clip needs --aggregator=dp$'
  ):
    _resolve(10, aggregator='robust', dp_noise_multiplier=None, dp_clip=1.0)


def test_the_defaults():
  resolved = _resolve(client_sampling='poisson')
  assert resolved == dict(
    dp_noise_multiplier=0.5,
    dp_clip=None,
    dp_target_quantile=budget.TARGET_UNCLIPPED_QUANTILE,
    dp_noise_cohort=None,
    dp_initial_clip=None,
    dp_noise_seed=None,
    dp_delta=0.1 / 100,
    dp_accountant='rdp',
    dp_adjacency=budget.ADD_OR_REMOVE_ONE,
  )
  fixed = _resolve(num_clients=None, dp_clip=0.5)
  assert (fixed['dp_target_quantile'], fixed['dp_delta']) == (None, None)
  assert fixed['dp_adjacency'] == budget.REPLACE_ONE


@pytest.mark.parametrize(
  'values, message',
  [
    (
      dict(dp_noise_multiplier=None),
      r'^--aggregator=dp needs --dp_noise_multiplier \(z >= 0\)$',
    ),
    (
      dict(dp_noise_seed=2**32),
      r'^--dp_noise_seed must be in 0\.\.4294967295, got 4294967296$',
    ),
    (
      dict(dp_noise_cohort=101),
      r'^--dp_noise_cohort=101 is more than the 100 clients of '
      'synthetic_1_1: a round cannot draw more clients than there are$',
    ),
    (
      dict(dp_accountant='pld'),
      r'^--dp_accountant=pld needs --client_sampling=poisson \(dp_accounting '
      r'has no PLD of fixed-size sampling\)$',
    ),
  ],
)
def test_a_value_no_run_can_use_is_one_line_naming_the_flag(values, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    _resolve(**values)
