"""Each run setting is declared once (`config.SETTINGS`): its flag, its
config.json key, its check and its group all come from the declaration,
and `config.reference()` describes every flag of a run."""

import dataclasses

import pytest

from tff_algos import algorithms  # noqa: F401  (registers them)
from tff_algos import cli
from tff_algos import run
from tff_algos.simulation import config

pytestmark = pytest.mark.fast


def test_the_reference_describes_every_flag_of_the_command_in_help_order():
  holder = cli.flag_values(run.GROUPS)
  described = [entry['flag'] for entry in config.reference()]
  assert described == list(holder)
  for entry in config.reference():
    flag = holder[entry['flag']]
    assert entry['help'] in flag.help  # absl adds an enum's values.
    assert flag.default == entry['default']
  used = {e['flag']: e['used_by'] for e in config.reference()}
  assert used['dp_clip'] == '--aggregator=dp' and used['rounds'] == ''
  assert 'fedprox' in used['mu'] and 'fedavg' not in used['mu']
  assert 'fedsgd' not in used['client_momentum']


def test_config_json_holds_the_recorded_settings_and_the_hparams():
  keys = [s.record_key for s in config.SETTINGS if s.record_key]
  fields = [f.name for f in dataclasses.fields(config.Config)]
  assert fields == [*keys, 'hparams']
  assert 'output_dir' not in keys and 'imports' in keys


@pytest.mark.parametrize(
  'setting', [s for s in config.SETTINGS if s.check and s.record_key]
)
def test_a_value_its_check_refuses_is_one_line_naming_the_flag(setting):
  bad = -(10**40) if setting.kind is float else -(2**40)
  values = {setting.record_key: bad}
  if setting.group == 'privacy':
    values = dict(aggregator='dp', dp_noise_multiplier=1.0, dp_clip=1.0)
    values[setting.record_key] = bad
  with pytest.raises(config.ConfigError) as raised:
    config.resolve(config.Config.create(**values))
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith(f'--{setting.name}') or (
    setting.name == 'stop_at_accuracy'
  )
