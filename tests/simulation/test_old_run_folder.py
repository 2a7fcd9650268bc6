"""A run folder written by an earlier version of the package (old_run/:
`run_experiment.py --rounds=2 --checkpoint_every=1 --clients_per_round=5
--epochs=2` at commit 65189cb, before the settings were declared once in
`simulation.config`) still loads, holds the same settings as the same
command today, and resumes to the rows that version wrote."""

import json
import pathlib
import shutil

import pytest

from conftest import cli
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

OLD = pathlib.Path(__file__).parent / 'old_run'
FLAGS = ('--rounds=2', '--checkpoint_every=1', '--clients_per_round=5')
FLAGS += ('--epochs=2', '--progress=false')


def _saved():
  saved = json.loads((OLD / 'config.json').read_text())
  del saved['provenance']
  return saved


@pytest.mark.fast
def test_its_config_json_loads_as_the_same_settings():
  from tff_algos import run

  plan = run.parse_command(list(FLAGS)).plan
  today = resolve(plan.config, num_clients=30).to_json()
  assert resolve(Config.from_json(_saved())).to_json() == today == _saved()


@pytest.mark.slow
def test_it_resumes_to_the_rows_it_would_have_written(tmp_path):
  out = tmp_path / 'run'
  out.mkdir()
  shutil.copy(OLD / 'config.json', out)
  shutil.copytree(OLD / 'checkpoints', out / 'checkpoints')
  rows = (OLD / 'metrics.csv').read_text().splitlines(keepends=True)
  (out / 'metrics.csv').write_text(''.join(rows[:-1]))  # Rounds 0 and 1.
  resumed = cli(*FLAGS, f'--output_dir={out}', '--accept_package_change')
  assert resumed.returncode == 0, resumed.stderr
  assert '(resuming)' in resumed.stderr
  assert (out / 'metrics.csv').read_text() == ''.join(rows)
