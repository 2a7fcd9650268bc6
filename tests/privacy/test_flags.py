"""The DP flags' resolution (`privacy.flags`): plain values in, the run's
DP settings out, a ValueError naming the flag for values no run can use,
and the run's settings (`simulation.config`) say what it says."""

import dataclasses

import pytest

from tasks import validate
from tff_algos.privacy import budget
from tff_algos.privacy import flags
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
  return flags.resolve(
    {**DP, **values}, num_clients, max_seed=config_lib.MAX_SEED
  )


def test_its_constants_are_the_packages():
  assert flags.FLOAT32_MAX == validate.FLOAT32_MAX
  assert set(flags.RESOLVED) == {
    f.name
    for f in dataclasses.fields(config_lib.Config)
    if f.name.startswith('dp_')
  }


def test_without_dp_every_setting_is_none_and_a_dp_flag_an_error():
  assert flags.resolve(
    dict(aggregator='mean', client_sampling='poisson'), 10, max_seed=1
  ) == dict.fromkeys(flags.RESOLVED)
  with pytest.raises(ValueError, match=r'^--dp_clip needs --aggregator=dp$'):
    flags.resolve(
      dict(aggregator='robust', client_sampling='uniform', dp_clip=1.0),
      10,
      max_seed=1,
    )


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
    (dict(dp_noise_multiplier=None), '--aggregator=dp needs'),
    (dict(dp_noise_seed=2**32), r'--dp_noise_seed must be in 0\.\.4294967295'),
    (dict(dp_noise_cohort=101), 'is more than the 100 clients of synthetic'),
    (dict(dp_accountant='pld'), 'needs --client_sampling=poisson'),
  ],
)
def test_a_value_no_run_can_use_is_a_value_error_config_reports(
  values, message
):
  with pytest.raises(ValueError, match=message) as raised:
    _resolve(**values)
  config = config_lib.Config(
    aggregator='dp',
    clients_per_round=10,
    **{'dp_noise_multiplier': 0.5, **values},
  )
  with pytest.raises(config_lib.ConfigError) as reported:
    config_lib.resolve(config, num_clients=100)
  assert str(reported.value) == str(raised.value)
