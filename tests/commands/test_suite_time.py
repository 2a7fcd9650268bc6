"""tools/suite_time.py on a small repository whose `make test` prints
what pytest prints: the figures it records, the fresh clones, the empty
caches, and its errors (not the layout of its tables)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = REPO / 'tools' / 'suite_time.py'


def _repo(tmp_path, summaries):
  """A repository with one commit per pytest summary line; `make test`
  sleeps 0.3 s, records its caches and working folder, prints the line and
  fails when the line does."""
  repo = tmp_path / 'project'
  repo.mkdir()
  git = ['git', '-C', str(repo), '-c', 'user.name=t', '-c', 'user.email=t@t']
  subprocess.run([*git, 'init', '-q'], check=True)
  commits = []
  for summary in summaries:
    (repo / 'Makefile').write_text(
      'test:\n\t@sleep 0.3\n'
      f'\t@echo "$$PIP_CACHE_DIR $$UV_CACHE_DIR $(CURDIR)" >> {tmp_path}/seen\n'
      f'\t@echo "{summary}"\n' + ('\t@exit 3\n' if 'failed' in summary else '')
    )
    subprocess.run([*git, 'add', 'Makefile'], check=True)
    subprocess.run([*git, 'commit', '-qm', summary], check=True)
    commits.append(
      subprocess.run(
        [*git, 'rev-parse', 'HEAD'], check=True, capture_output=True, text=True
      ).stdout.strip()
    )
  return repo, commits


def _suite_time(folder, repo, *args):
  """The script, run from `folder`."""
  return subprocess.run(
    [sys.executable, str(SCRIPT), f'--repo={repo}', *args],
    cwd=folder,
    env=dict(os.environ, TMPDIR=str(folder)),
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_each_version_runs_on_a_fresh_clone_and_is_a_multiple_of_the_first(
  tmp_path,
):
  repo, (a, b) = _repo(
    tmp_path,
    ['2 passed in 0.10s (0:00:00)', '3 passed, 1 skipped in 0.20s (0:00:00)'],
  )
  result = _suite_time(
    tmp_path, 'project', a[:7], b, '--cold', f'--json={tmp_path}/t.json'
  )
  assert result.returncode == 0, result.stderr
  runs = json.loads((tmp_path / 't.json').read_text())['runs']
  assert [
    (r['commit'], r['passed'], r['skipped'], r['pytest_seconds']) for r in runs
  ] == [(a, 2, 0, 0.1), (b, 3, 1, 0.2)]
  for run in runs:  # make test slept 0.3 s before pytest's 0.1 or 0.2 s.
    assert run['whole_seconds'] >= 0.3
    assert run['setup_seconds'] == run['whole_seconds'] - run['pytest_seconds']
  # Each ran in its own clone beside the repository, with caches of its
  # own, all removed afterwards.
  seen = [line.split() for line in (tmp_path / 'seen').read_text().splitlines()]
  assert len({folder for *_, folder in seen}) == 2
  for pip_cache, uv_cache, folder in seen:
    assert folder.startswith(f'{tmp_path}/suite_time_')
    assert pip_cache.endswith('/pip') and uv_cache.endswith('/uv')
    assert not pathlib.Path(pip_cache).parent.exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == [
    'project',
    'seen',
    't.json',
  ]


def test_repeated_versions_run_in_turn_and_end_with_their_medians(tmp_path):
  repo, (a, b) = _repo(
    tmp_path, ['2 passed in 0.10s', '3 passed in 0.30s (0:00:00)']
  )
  result = _suite_time(
    tmp_path, repo, a, b, '--repeat=2', f'--json={tmp_path}/t.json'
  )
  assert result.returncode == 0, result.stderr
  report = json.loads((tmp_path / 't.json').read_text())
  assert [r['commit'] for r in report['runs']] == [a, b, a, b]
  assert report['repeat'] == 2
  seen = (tmp_path / 'seen').read_text().splitlines()
  assert len({line.split()[-1] for line in seen}) == 4  # A clone each.
  # Each version's median comes after the turns, in the versions' order.
  medians = result.stdout.split('\n\n')[-1]
  assert medians.index(a[:7]) < medians.index(b[:7])


def test_a_failing_suite_is_an_error_naming_the_version(tmp_path):
  repo, (a, bad) = _repo(
    tmp_path, ['2 passed in 0.10s', '1 failed, 1 passed in 0.10s']
  )
  result = _suite_time(tmp_path, repo, a, bad)
  assert result.returncode == 1 and not result.stdout
  # The version measured before stays on record.
  assert f'{a[:7]}: 2 passed, 0 skipped; pytest 0.1 s, in all 0 min' in (
    result.stderr
  )
  (log,) = tmp_path.glob(f'suite_time_{bad[:7]}_*.log')
  assert result.stderr.splitlines()[-1] == (
    f'suite_time.py: error: make test of {bad[:7]} exited 2 (its output: '
    f'{log}): make: *** [Makefile:5: test] Error 3'
  )
  assert log.read_text().splitlines()[0] == '1 failed, 1 passed in 0.10s'
  assert sorted(p.name for p in tmp_path.iterdir()) == [
    'project',
    'seen',
    log.name,
  ]


@pytest.mark.fast
def test_an_unknown_version_or_json_folder_is_one_line_exit_2(tmp_path):
  repo, (a,) = _repo(tmp_path, ['2 passed in 0.10s'])
  for args, message in (
    (['nosuchrev'], f"'nosuchrev' is not a commit of {repo}"),
    ([a, f'--json={tmp_path}/no/t.json'], f'--json: no folder {tmp_path}/no'),
    ([a, '--repeat=0'], '--repeat must be at least 1, not 0'),
  ):
    result = _suite_time(tmp_path, repo, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f'suite_time.py: error: {message}']
  assert not (tmp_path / 'seen').exists()  # Nothing ran.
