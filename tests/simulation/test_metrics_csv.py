"""metrics.csv's release manager writes the bytes TFF's
CSVFileReleaseManager (CSVSaveMode.WRITE) writes, in a run, a resumed run
and a run started again, without reading the file back each round."""

import collections
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_algos.simulation import outputs
from tff_algos.simulation import results
from tff_algos.simulation import run_dir

Row = collections.namedtuple('Row', ['train_loss', 'mu', 'participants'])


def _row(key):
  rng = np.random.default_rng(key)
  return Row(
    float(np.float32(rng.normal())),
    None if key % 3 else 0.5,
    int(rng.integers(1, 10)) if key else None,
  )


def _tffs(path):
  return tff.program.CSVFileReleaseManager(
    path, tff.program.CSVSaveMode.WRITE, key_fieldname='round'
  )


def _ours(path):
  folder = os.path.dirname(path)
  rows = results.read_rows(folder) if os.path.exists(path) else []
  return run_dir._metrics_csv(path, rows)


@pytest.mark.fast
def test_metrics_csv_has_the_bytes_of_tffs_release_manager(tmp_path):
  written = {}
  for name, manager_for in (('tff', _tffs), ('ours', _ours)):
    path = tmp_path / name / results.METRICS_FILE
    path.parent.mkdir()
    snapshots = []
    # A run of rounds 0-4, killed; resumed from round 2 by a new process
    # (a manager made from the file), to round 6; then started again.
    for keys in (range(5), range(2, 7), range(0, 3)):
      manager = manager_for(str(path))
      for key in keys:
        outputs.wait(manager.release(_row(key), key))
        snapshots.append(path.read_bytes())
    written[name] = snapshots
  assert written['ours'] == written['tff']
  assert b'round,train_loss,mu,participants\r\n0,' in written['ours'][-1]
