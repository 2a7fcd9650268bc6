"""docs/scoreboard.py: every command it lists is a valid run_experiment.py
command line (flags parsed and every run of a sweep validated, as a dry run
does before it loads data), and every row names one of those commands."""

import importlib.util
import shlex

import pytest

from conftest import REPO


def _scoreboard():
  spec = importlib.util.spec_from_file_location(
      'scoreboard', REPO / 'docs' / 'scoreboard.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


SCOREBOARD = _scoreboard()


@pytest.mark.parametrize('name', sorted(SCOREBOARD.COMMANDS))
def test_every_scoreboard_command_is_valid(name, monkeypatch):
  import run_experiment  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)  # Its --flagfile paths are relative to the repo.
  words = shlex.split(SCOREBOARD.COMMANDS[name])
  assert words[:2] == ['.venv/bin/python', 'run_experiment.py']
  argv = ['run_experiment.py', *words[2:], f'--output_dir=runs/{name}']
  run_experiment.reset_command_line()
  run_experiment.parse_flags(argv)
  if run_experiment.FLAGS.variant or run_experiment.FLAGS.sweep:
    runs, _, settings = run_experiment.sweep_plan(argv[0])
    assert len(settings) == len(runs) >= 1
  else:
    assert run_experiment.checked_config().rounds >= 1


def test_every_row_names_a_listed_command():
  for row in SCOREBOARD.ROWS:
    if row.command is None:
      assert row.reason, row.item  # Not run: it says why.
    elif not row.command.startswith(('task ', 'fedprox_fig1_*')):
      assert row.command in SCOREBOARD.COMMANDS, row.item
