"""A damaged-file corpus for every file of ours that is read back:
config.json, metrics.csv, summary.json, a sweep's summary.csv, an
export's manifest.json, and checkpoints. Each is cut at several offsets,
has bytes flipped, or holds the right format with the wrong structure or
values too large for float32; each gives one message naming the file and
what is wrong (results.DamagedFile, a usage error), or the documented
recovery: a damaged summary.json makes its run go on and write it again,
a damaged metrics.csv is moved aside and rebuilt from the TensorBoard
events, a damaged checkpoint is dropped for the one before it, a damaged
summary.csv is written again."""

import json
import math

import pytest

import helpers
from tff_algos import cli
from tff_algos import export
from tff_algos.analysis import sweep
from tff_algos.simulation import results
from tff_algos.simulation import run_dir
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import resolve

CONFIG = Config(
  rounds=3, clients_per_round=5, epochs=2, batch_size=10, client_lr=0.01
)


def _byte_damage(good: bytes):
  """(name, bytes): the file cut at several offsets and with bytes
  flipped."""
  n = len(good)
  for cut in sorted({0, 1, n // 3, n // 2, n - 2, n - 1} - {n}):
    yield f'cut at {cut} of {n}', good[:cut]
  for at in sorted({0, n // 3, n // 2, n - 2}):
    flipped = bytearray(good)
    flipped[at] ^= 0xFF
    yield f'byte {at} flipped', bytes(flipped)


def _json_structures(good: dict):
  """(name, bytes): JSON of the wrong structure."""
  yield 'a list', json.dumps([good]).encode()
  yield 'a number', b'5'
  yield 'a string', json.dumps('config').encode()
  key = sorted(good)[0]
  yield f'{key} a list', json.dumps(dict(good, **{key: [1, 2]})).encode()
  yield f'{key} a map', json.dumps(dict(good, **{key: {'a': 1}})).encode()


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
  """A finished 3-round run's folder (checkpoints every round)."""
  folder = tmp_path_factory.mktemp('run') / 'run'
  from tff_algos.simulation import experiment

  task, _ = helpers.task_and_arrays()
  experiment.run(
    CONFIG, task, str(folder), show_progress=False, checkpoint_every=1
  )
  return folder


def _status(folder, finished_run, config):
  """The status of `folder` for the run `finished_run` holds (its settings
  `config`, its code as config.json recorded it)."""
  (record,) = json.loads((finished_run / 'config.json').read_text())[
    'provenance'
  ]
  record.pop('from_round')
  return run_dir.RunDir(str(folder)).status(resolve(config).to_json(), record)


def _copy(folder, tmp_path):
  import shutil

  copy = tmp_path / 'copy'
  shutil.copytree(folder, copy)
  return copy


def test_a_damaged_config_json_is_one_message_naming_it(finished_run, tmp_path):
  good = (finished_run / 'config.json').read_bytes()
  cases = [
    *_byte_damage(good),
    *_json_structures(json.loads(good)),
    (
      'client_lr beyond float32',
      json.dumps(dict(json.loads(good), client_lr=1e39)).encode(),
    ),
  ]
  config = Config.from_json(json.loads(good))
  refused = 0
  for name, variant in cases:
    folder = _copy(finished_run, tmp_path / name.replace(' ', '_'))
    (folder / 'config.json').write_bytes(variant)
    try:
      status = _status(folder, finished_run, config)
    except run_dir.OutputDirError as e:  # One line, naming it.
      assert str(folder) in str(e) and '\n' not in str(e), name
      assert '--overwrite' in str(e), name
      refused += 1
      continue
    assert status == 'finished', name  # Damage that left it the same.
  assert refused >= len(cases) - 2


def test_a_damaged_metrics_csv_is_one_message_naming_it(finished_run, tmp_path):
  good = (finished_run / 'metrics.csv').read_bytes()
  header, first, *rest = good.decode().splitlines()
  structures = [
    (
      'no round column',
      '\n'.join([header.replace('round', 'rnd'), first, *rest]),
    ),
    ('a cell too many', '\n'.join([header, first + ',1', *rest])),
    (
      'a word for a number',
      '\n'.join([header, first.replace(first.split(',')[1], 'abc', 1), *rest]),
    ),
    ('rounds out of order', '\n'.join([header, *rest, first])),
    (
      'a repeated column',
      '\n'.join([header + ',mu', first + ',1', *[r + ',1' for r in rest]]),
    ),
  ]
  cases = [*_byte_damage(good), *[(n, v.encode()) for n, v in structures]]
  damaged = 0
  for name, variant in cases:
    folder = tmp_path / name.replace(' ', '_')
    folder.mkdir()
    (folder / 'metrics.csv').write_bytes(variant)
    try:
      rows = results.read_rows(folder)
    except results.DamagedFile as e:
      assert 'metrics.csv' in str(e) and '\n' not in str(e), name
      damaged += 1
      continue
    # Read as it is (a cut at a line's end, a flipped digit): typed rows.
    assert all(isinstance(results.typed(r), dict) for r in rows), name
  assert damaged >= len(structures) + 4
  # Values finite in float64 but not in float32 are still numbers.
  big = tmp_path / 'big'
  big.mkdir()
  (big / 'metrics.csv').write_text(
    f'{header}\n' + first.replace(first.split(',')[1], '1e39', 1) + '\n'
  )
  assert math.isclose(
    results.typed(results.read_rows(big)[0])['train_loss'], 1e39
  )


@pytest.mark.fast
def test_a_damaged_summary_json_makes_its_run_write_it_again(
  finished_run, tmp_path
):
  config = Config.from_json(
    json.loads((finished_run / 'config.json').read_bytes())
  )
  good = (finished_run / 'summary.json').read_bytes()
  for name, variant in [
    *_byte_damage(good),
    *_json_structures(json.loads(good)),
  ]:
    folder = _copy(finished_run, tmp_path / name.replace(' ', '_'))
    (folder / 'summary.json').write_bytes(variant)
    try:
      results.read_json(folder, 'summary.json')
      readable = True
    except results.DamagedFile as e:
      assert 'summary.json' in str(e), name
      readable = False
    status = _status(folder, finished_run, config)
    assert status == ('finished' if readable else 'resume'), name


@pytest.mark.fast
def test_a_damaged_summary_json_is_written_again_by_its_run(
  finished_run, tmp_path, capsys
):
  from tff_algos.simulation import experiment

  folder = _copy(finished_run, tmp_path)
  good = json.loads((finished_run / 'summary.json').read_text())
  (folder / 'summary.json').write_bytes(b'{"finished": tr')
  (folder / 'metrics.csv').write_bytes(b'round,train_\xff')
  task, _ = helpers.task_and_arrays()
  experiment.run(
    CONFIG, task, str(folder), show_progress=False, checkpoint_every=1
  )
  err = capsys.readouterr().err
  assert 'metrics.csv is damaged' in err and 'written back from' in err
  assert 'summary.json is damaged: the run writes it again' in err
  again = json.loads((folder / 'summary.json').read_text())
  assert again['final_train_loss'] == good['final_train_loss']
  assert (folder / 'metrics.csv').read_text() == (
    finished_run / 'metrics.csv'
  ).read_text()
  assert (folder / 'metrics.csv.damaged').exists()


def test_a_damaged_checkpoint_falls_back_to_the_one_before(
  finished_run, tmp_path, capsys
):
  from tff_algos import learning
  from tff_algos.simulation import outputs
  from tff_algos.simulation import trainer

  task, arrays = helpers.task_and_arrays()
  loop = trainer.loop_for(resolve(CONFIG), task.model_fn, arrays)
  structure = loop.program_state(
    loop.initial_state(learning.initial_model_weights(task.model_fn, 0))
  )
  newest = sorted((finished_run / 'checkpoints').iterdir())[-1]
  files = [p for p in newest.rglob('*') if p.is_file() and p.stat().st_size]
  for target in files[:3]:
    good = target.read_bytes()
    for name, variant in list(_byte_damage(good))[::3]:
      folder = _copy(
        finished_run, tmp_path / f'{target.name}_{name}'.replace(' ', '_')
      )
      (folder / target.relative_to(finished_run)).write_bytes(variant)
      copy = run_dir.RunDir(str(folder))
      _, version = outputs.wait(
        copy.load_checkpoint(copy.state_manager(), structure)
      )
      assert version in (2, 3), (target, name)  # The newest, or before it.
  assert 'is damaged' in capsys.readouterr().err


def test_a_damaged_sweep_summary_is_written_again(tmp_path, capsys):
  runs = sweep.expand(['A: --mu=0'], [])
  rows = [dict(run='A', variant='A', rounds=3, final_train_loss=0.5)]
  (tmp_path / 'summary.csv').write_bytes(b'run,variant\n\xff\xfe,A\n')
  assert sweep.write_summary(rows, str(tmp_path), None, runs) is not None
  assert 'summary.csv is damaged: written again' in capsys.readouterr().err
  assert 'final_train_loss' in (tmp_path / 'summary.csv').read_text()


@pytest.mark.fast
def test_a_damaged_manifest_is_one_usage_error(tmp_path):
  good = json.dumps(dict(computations={'next': dict(file='next.pb')}))
  damaged = list(_byte_damage(good.encode()))
  structures = [
    *_json_structures(json.loads(good)),
    ('files a list', b'{"computations": []}'),
  ]
  refused = 0
  for name, variant in damaged + structures:
    out = tmp_path / name.replace(' ', '_')
    out.mkdir()
    (out / 'manifest.json').write_bytes(variant)
    (out / 'next.pb').write_bytes(b'x')
    try:
      export.check_holds_an_export(str(out))
    except cli.UsageError as e:
      assert 'not an export' in str(e) or 'not part of' in str(e), name
      refused += 1
      continue
    assert (name, variant) in damaged, name  # Every wrong structure: refused.
  assert refused >= len(damaged) - 2 + len(structures)
