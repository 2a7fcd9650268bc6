"""tools/suite_builds.py: its recorder gives two builds of the same
process one fingerprint (TensorFlow names each build's functions anew) and
another process another, and a build counts as one a shared cache could
have served only when an earlier build had its fingerprint."""

import importlib.util
import json

import pytest

from conftest import REPO
import helpers
from tff_algos import learning
from tff_algos.algorithms import fedavg

SCRIPT = REPO / 'tools' / 'suite_builds.py'


@pytest.fixture
def suite_builds(monkeypatch):
  """The script as a module, its folder on the path as when it runs."""
  monkeypatch.syspath_prepend(str(SCRIPT.parent))
  spec = importlib.util.spec_from_file_location('suite_builds', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_recorder_gives_the_same_process_the_same_fingerprint(
  suite_builds, tmp_path, monkeypatch
):
  namespace = dict(RECORDS=str(tmp_path), build_process=learning.build_process)
  exec(suite_builds._RECORDER, namespace)
  monkeypatch.setattr(learning, 'build_process', namespace['build_process'])
  model_fn = helpers.task_and_arrays()[0].model_fn
  for learning_rate in (0.5, 0.5, 0.25):
    fedavg.build_fed_avg(model_fn, learning_rate)
  builds = suite_builds._read(str(tmp_path))
  assert len(builds) == 3 and all(b['cpu'] > 0 for b in builds)
  first, second, third = (b['fingerprint'] for b in builds)
  assert first == second != third
  figures = suite_builds.summarize(builds)
  assert (figures['builds'], figures['distinct']) == (3, 2)
  assert figures['repeated_builds'] == 1
  assert figures['repeated_cpu_seconds'] == builds[1]['cpu']
  assert figures['repeated_in_process_cpu_seconds'] == builds[1]['cpu']
  json.dumps(figures)  # What --json writes.


@pytest.mark.fast
def test_only_a_build_after_one_of_the_same_content_is_a_repeat(
  suite_builds,
):
  builds = [
    dict(cpu=1.0, at=1, pid=1, fingerprint='a', test='tests/x.py::t'),
    dict(cpu=2.0, at=2, pid=2, fingerprint='b', test=''),
    dict(cpu=4.0, at=3, pid=2, fingerprint='a', test=''),
    dict(cpu=8.0, at=4, pid=2, fingerprint='b', test=''),
  ]
  figures = suite_builds.summarize(builds)
  assert figures['cpu_seconds'] == 15.0
  assert figures['repeated_cpu_seconds'] == 12.0
  assert figures['repeated_in_process_cpu_seconds'] == 8.0
  assert figures['by_file']['tests/x.py'] == dict(
    builds=1, cpu_seconds=1.0, repeated_cpu_seconds=0.0
  )
  assert figures['by_file']['(commands and notebooks)']['builds'] == 3
