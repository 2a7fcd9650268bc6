"""A run's folder: its settings, metrics, checkpoints and summary.

    OUTPUT_DIR/
      config.json          the resolved settings (`Settings.to_json`) and
                           what the numbers come from (`provenance`: the
                           code, computation and data, with the round each
                           version trained from)
      metrics.csv          a row per round (`columns.COLUMNS`), rewritten
                           atomically each round (as TFF's
                           CSVFileReleaseManager writes it)
      tensorboard/         the same per round (as TFF's
                           TensorBoardReleaseManager writes it),
                           and the settings in TensorBoard's HPARAMS tab
      checkpoints/round_N/ the program state (FileProgramStateManager's
                           versions, each a NumPy file): the two latest
                           are kept
      worker.log           the TFF worker's output (for when it dies)
      client_accuracy.csv  each test client's accuracy at the last
                           evaluated round (for models that allow it)
      summary.json         written when the run has finished

A folder holding the same run (same resolved settings, code, computation
and data) is resumed from its latest intact checkpoint, or left alone once
finished; one holding another run or unknown results is never overwritten
unless asked (`remove_outputs`). A run killed under one version of the
package may resume under another only when asked (`accept_package_change`):
config.json then records both. One process at a time holds a folder (`hold`, an OS
lock that dies with its holder). Imports TensorFlow only in the methods
that write or read TFF program state, releases or TensorBoard's events.
"""

import contextlib
import errno
import fcntl
import glob
import itertools
import json
import os
import shutil
import socket
import sys
import time

from tff_algos.simulation import provenance as provenance_lib
from tff_algos.simulation import results
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
  results.CONFIG_FILE,
  results.METRICS_FILE,
  results.SUMMARY_FILE,
)
CHECKPOINT_DIR, TENSORBOARD_DIR, WORKER_LOG, LABEL_HISTOGRAM = (
  'checkpoints',
  'tensorboard',
  'worker.log',
  'label_histogram.csv',
)
CLIENT_ACCURACY = results.CLIENT_ACCURACY_FILE
STATE_FILE = 'state.npz'  # A checkpoint's values (`_array_state_manager`).
OUTPUTS = (
  CONFIG_FILE,
  METRICS_FILE,
  SUMMARY_FILE,
  CHECKPOINT_DIR,
  TENSORBOARD_DIR,
  WORKER_LOG,
  LABEL_HISTOGRAM,
  CLIENT_ACCURACY,
)


class OutputDirError(ConfigError):
  """The folder cannot be used: it holds another run (or unknown results),
  is in use by another process, or is not a writable folder."""


def check_usable(path: str, flag: str = '--output_dir'):
  """OutputDirError unless `path` is, or can be created under, a folder
  this process can write in (checked before anything is loaded, without
  writing): not a file, a symbolic link that leads nowhere (or in a
  loop), or under either. What only creating it can tell (a name too long,
  a read-only file system, /proc) is `hold`'s one line."""
  existing = os.path.abspath(path)
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  where = (
    '' if existing == os.path.abspath(path) else f' is under {existing}, which'
  )
  if os.path.islink(existing) and not os.path.exists(existing):
    raise OutputDirError(
      f'{flag}={path}{where} is a symbolic link that '
      'leads nowhere (or in a loop), not a folder'
    )
  if not os.path.isdir(existing):
    raise OutputDirError(f'{flag}={path}{where} is a file, not a folder')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise OutputDirError(
      f'{flag}={path}: cannot write in {existing} (permission denied)'
    )


class _Made:
  """The folders that creating `path` makes: `undo` removes them (with
  what is in them) and gives the folder they were made in its times back."""

  def __init__(self, path):
    top = os.path.abspath(path)
    while not os.path.lexists(os.path.dirname(top)) and (
      os.path.dirname(top) != top
    ):
      top = os.path.dirname(top)
    self._top = None if os.path.lexists(top) else top
    parent = os.path.dirname(top)
    self._times = None
    if self._top is not None and os.path.isdir(parent):
      stat = os.stat(parent)
      self._times = (parent, (stat.st_atime_ns, stat.st_mtime_ns))

  def undo(self):
    if self._top is None or not os.path.isdir(self._top):
      return
    shutil.rmtree(self._top, ignore_errors=True)
    if self._times is not None:
      with contextlib.suppress(OSError):
        os.utime(self._times[0], ns=self._times[1])


def _lock_holder(fd):
  """The pid holding a flock on the file open as `fd` (/proc/locks), or None."""
  stat = os.fstat(fd)
  wanted = (os.major(stat.st_dev), os.minor(stat.st_dev), stat.st_ino)
  try:
    with open('/proc/locks') as f:
      for line in f:
        fields = line.split()
        if '->' in fields or 'FLOCK' not in fields:
          continue
        pid, device = fields[4], fields[5]
        major, minor, inode = device.split(':')
        if (int(major, 16), int(minor, 16), int(inode)) == wanted:
          return int(pid)
  except (OSError, ValueError, IndexError):
    pass
  return None


class RunDir:
  """The folder of one run."""

  def __init__(self, path: str):
    self.path = path
    self.metrics_path = os.path.join(path, METRICS_FILE)
    self.worker_log = os.path.join(path, WORKER_LOG)

  def _file(self, name):
    return os.path.join(self.path, name)

  @contextlib.contextmanager
  def hold(self):
    """Holds the folder for this process (creating it if needed), or
    OutputDirError naming the process that holds it, or saying what the OS
    refused (any errno: creating or locking it). The lock is the OS's
    (flock): it ends with its holder, even one killed with SIGKILL. Folders
    this call created are removed again if nothing was written in them,
    and the folder they were made in is left as it was (its times too)."""
    check_usable(self.path)
    made = _Made(self.path)
    try:
      os.makedirs(self.path, exist_ok=True)
      fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
      made.undo()
      raise OutputDirError(
        f'cannot create {self.path}: {e.strerror or e}'
      ) from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      held = e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
      holder = _lock_holder(fd) if held else None
      os.close(fd)
      made.undo()
      if not held:
        raise OutputDirError(
          f'cannot lock {self.path}: {e.strerror or e}'
        ) from None
      raise OutputDirError(
        f'{self.path} is in use by '
        f'{f"process {holder}" if holder else "another process"}: one run '
        'writes a folder at a time (wait for it, or choose another '
        '--output_dir)'
      ) from None
    try:
      yield self
    finally:
      if set(os.listdir(self.path)) <= {WORKER_LOG}:
        made.undo()  # Nothing but a log: nothing to keep.
      os.close(fd)

  def saved_config(self):
    """config.json's contents, None if there is none; OutputDirError if it
    cannot be read."""
    try:
      return results.read_json(self.path, CONFIG_FILE)
    except results.DamagedFile as e:
      raise OutputDirError(
        f'{self._file(CONFIG_FILE)} is damaged ({e}), so the settings of '
        'the run in this folder are unknown: pass --overwrite to start it '
        'anew, or choose another --output_dir'
      ) from None

  def provenance(self) -> list:
    """config.json's provenance records, oldest first ([] if none)."""
    saved = self.saved_config() or {}
    records = saved.get('provenance')
    return records if isinstance(records, list) else []

  def status(
    self, settings: dict, provenance: dict, accept_package_change: bool = False
  ) -> str:
    """'new', 'resume' (the same run, unfinished) or 'finished', for a run
    of `settings` (`Settings.to_json()`) and `provenance`
    (`provenance.record`).

    Raises OutputDirError when the folder holds a run with other settings,
    other code, computation or data (only the package's code may differ,
    with `accept_package_change`), results without a config.json, or a
    damaged config.json.
    """
    saved = self.saved_config()
    if saved is None:
      if any(
        os.path.exists(self._file(name))
        for name in OUTPUTS
        if name != WORKER_LOG
      ):  # A worker's log alone: no results.
        raise OutputDirError(
          f'{self.path} already holds results; pass '
          '--overwrite to replace them or choose another '
          '--output_dir'
        )
      return 'new'
    try:
      saved_settings = resolve(Config.from_json(saved)).to_json()
    except (ConfigError, TypeError, ValueError) as e:
      raise OutputDirError(
        f'{self.path} holds a run with settings this '
        f'version cannot read ({e}); pass --overwrite to '
        'replace it or choose another --output_dir'
      ) from None
    differences = [
      f'{key}={saved_settings.get(key)!r} there, {settings.get(key)!r} here'
      for key in sorted(set(saved_settings) | set(settings))
      if saved_settings.get(key) != settings.get(key)
    ]
    if differences:
      raise OutputDirError(
        f'{self.path} holds a run with another config '
        f'({"; ".join(differences)}); pass --overwrite to replace it or '
        'choose another --output_dir'
      )
    self._check_code(provenance, accept_package_change)
    if not os.path.exists(self._file(SUMMARY_FILE)):
      return 'resume'
    try:
      results.read_json(self.path, SUMMARY_FILE)
    except results.DamagedFile:
      return 'resume'  # Its run goes on from its last checkpoint (the
      # last round) and writes the summary again.
    return 'finished'

  def _check_code(self, provenance, accept_package_change):
    """OutputDirError unless the run in the folder is of `provenance`'s
    code, computation and data (or of other package code only, accepted)."""
    records = self.provenance()
    if records:
      differ = provenance_lib.differences(records[-1], provenance)
    else:
      differ = {'package': 'the code (its config.json records none)'}
    if not differ or (
      accept_package_change
      and 'package' in differ
      and set(differ) <= {'package', 'computation'}
    ):
      return
    what = ', '.join(differ.values())
    hint = (
      'pass --accept_package_change to go on under this version of '
      'the package, --overwrite to start it again, or choose another '
      '--output_dir'
      if set(differ) <= {'package', 'computation'} and 'package' in differ
      else 'pass --overwrite to replace it or choose another --output_dir'
    )
    raise OutputDirError(
      f'{self.path} holds a run of other code or data: {what} differ; {hint}'
    )

  def remove_outputs(self):
    """Deletes what a run writes in the folder (--overwrite), nothing else."""
    for name in OUTPUTS:
      path = self._file(name)
      if os.path.isdir(path):
        shutil.rmtree(path)
      elif os.path.exists(path):
        os.remove(path)

  def start(self, settings: dict, provenance: dict):
    """Creates the folder; a new run's settings and provenance go to
    config.json, its settings to TensorBoard's HPARAMS (the summary
    TensorBoard's `hparams` writes, at round 0)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import api as hparams_api

    os.makedirs(self.path, exist_ok=True)
    if self.saved_config() is None:
      self._write_config(settings, [dict(from_round=0, **provenance)])
      summary = hparams_api.hparams_pb(
        {
          k: v
          for k, v in settings.items()
          if isinstance(v, (bool, int, float, str))
        }
      )
      records = _event_file(self._file(TENSORBOARD_DIR), event_pb2)
      records.write(
        event_pb2.Event(
          wall_time=time.time(), step=0, summary=summary
        ).SerializeToString()
      )
      records.close()

  def record_code(self, provenance: dict, first_round: int):
    """Adds `provenance` to config.json's records, from `first_round` on,
    when it differs from the latest (a run resumed under another version
    of the package)."""
    records = self.provenance()
    if records and not provenance_lib.differences(records[-1], provenance):
      return
    saved = self.saved_config()
    self._write_config(
      {k: v for k, v in saved.items() if k != 'provenance'},
      records + [dict(from_round=first_round, **provenance)],
    )

  def _write_config(self, settings, records):
    results.write_atomically(
      self._file(CONFIG_FILE),
      json.dumps(dict(settings, provenance=records), indent=2, sort_keys=True),
    )

  def release_manager(self, first_round: int = 0):
    """metrics.csv and TensorBoard, a row per round. TensorBoard gets each
    round's value of a column once, although a resumed run recomputes the
    rounds after its checkpoint (to the same values), and although a
    killed run's TensorBoard may lack values metrics.csv holds (it is
    written second, and its writer buffers): values its events hold are
    not written again, and those they lack of the rounds before
    `first_round` (which are not recomputed) come from metrics.csv."""
    import tensorflow_federated as tff

    rows = (
      results.read_rows(self.path) if os.path.exists(self.metrics_path) else []
    )
    tensorboard = _tensorboard(
      self._file(TENSORBOARD_DIR),
      held={step: set(values) for step, values in self._logged().items()},
    )
    for row in rows:
      if int(row['round']) < first_round:
        tensorboard.write(
          int(row['round']),
          [(c, _released(v)) for c, v in row.items() if c != 'round'],
        )
    return tff.program.GroupingReleaseManager(
      [_metrics_csv(self.metrics_path, rows), tensorboard]
    )

  def _logged(self, tags=None) -> dict[int, dict[str, float]]:
    """The scalars of `tags` (all of them: None) that the TensorBoard
    events hold, by round; of a file cut short, its complete records."""
    import tensorflow as tf

    logged = {}
    for path in sorted(
      glob.glob(
        os.path.join(self._file(TENSORBOARD_DIR), 'events.out.tfevents.*')
      )
    ):
      try:
        for event in tf.compat.v1.train.summary_iterator(path):
          for value in event.summary.value:
            scalar = value.metadata.plugin_data.plugin_name == 'scalars'
            if scalar and (tags is None or value.tag in tags):
              logged.setdefault(event.step, {})[value.tag] = float(
                tf.make_ndarray(value.tensor)
              )
      except tf.errors.DataLossError:
        continue
    return logged

  def missing_rounds(self, last_round: int) -> list[int]:
    """The rounds 0..last_round (a checkpoint's) that metrics.csv lacks; a
    damaged metrics.csv (results.DamagedFile) is moved aside, to
    metrics.csv.damaged, and lacks them all."""
    if not os.path.exists(self.metrics_path):
      return list(range(last_round + 1))
    try:
      held = {int(row['round']) for row in results.read_rows(self.path)}
    except results.DamagedFile as e:
      os.replace(self.metrics_path, self.metrics_path + '.damaged')
      print(f'{e}: moved to {METRICS_FILE}.damaged', file=sys.stderr)
      return list(range(last_round + 1))
    return [r for r in range(last_round + 1) if r not in held]

  def rebuild_rows(self, rounds, columns) -> list[int]:
    """Writes metrics.csv's `rounds` back from the TensorBoard events (which
    hold the same values, each round's once) and returns the rounds of
    `rounds` the events do not hold either (nothing is written then).
    `columns`: metrics.csv's, round first."""
    logged = self._logged(columns)
    lost = [r for r in rounds if r not in logged]
    if lost:
      return lost
    rows = {
      int(row['round']): row
      for row in (
        results.read_rows(self.path)
        if os.path.exists(self.metrics_path)
        else []
      )
    }
    for r in rounds:
      rows[r] = {
        'round': r,
        **{
          c: (int(v) if c in results.INTEGER_COLUMNS else v)
          for c, v in logged[r].items()
        },
      }
    results.write_atomically(
      self.metrics_path,
      results.csv_text(columns, (rows[r] for r in sorted(rows))),
    )
    return []

  def state_manager(self):
    """The checkpoints (two kept), without saves a kill cut short."""
    import tensorflow_federated as tff

    directory = self._file(CHECKPOINT_DIR)
    manager = _array_state_manager(tff.program.FileProgramStateManager)(
      directory, prefix='round_', keep_total=2, keep_first=False
    )
    for name in os.listdir(directory):
      if '_temp' in name:
        shutil.rmtree(os.path.join(directory, name))
    return manager

  async def load_checkpoint(self, manager, structure):
    """(program state, round) of the latest checkpoint that loads, or
    (None, None). A damaged one (e.g. cut short by a full disk) is
    reported on stderr and removed; the one before it is used."""
    versions = sorted(await manager.get_versions() or [], reverse=True)
    for version in versions:
      try:
        return await manager.load(version, structure), version
      except Exception as e:
        path = os.path.join(self._file(CHECKPOINT_DIR), f'round_{version}')
        print(
          f'{path} is damaged ({type(e).__name__}); resuming from the '
          'checkpoint before it',
          file=sys.stderr,
        )
        shutil.rmtree(path, ignore_errors=True)
    return None, None

  def write_label_histogram(self, rows):
    """label_histogram.csv: each client's training examples per label (a
    --partition run)."""
    results.write_atomically(
      self._file(LABEL_HISTOGRAM), results.csv_text(rows[0], rows)
    )

  def write_client_accuracy(self, client_ids, round_num, clients):
    """client_accuracy.csv: each test client's accuracy at the last
    evaluated round `round_num` (`evaluation.ClientAccuracy`), and what it
    averages over (its examples; the char-LSTM: its characters)."""
    rows = [
      dict(
        client=c,
        round=round_num,
        counted=f'{n:g}',
        accuracy=repr(float(a)) if n > 0 else '',
      )
      for c, n, a in zip(client_ids, clients.counted, clients.accuracy)
    ]
    results.write_atomically(
      self._file(CLIENT_ACCURACY),
      results.csv_text(('client', 'round', 'counted', 'accuracy'), rows),
    )

  def finish(self, summary: dict):
    """Writes summary.json: the run is finished."""
    results.write_atomically(
      self._file(SUMMARY_FILE), json.dumps(summary, indent=2, sort_keys=True)
    )

  def rows(self):
    """metrics.csv as dicts of numbers (the measured columns)."""
    return [results.typed(row) for row in results.read_rows(self.path)]


def _array_state_manager(file_manager):
  """TFF's `FileProgramStateManager` (`file_manager`), each version's
  values as TFF's reads them back from the SavedModel it writes (each
  leaf as the `tf.Variable` it is saved as: a Python float becomes a
  float32), saved instead in one NumPy file, `STATE_FILE`: a SavedModel
  took 0.11–0.22 s to write and 0.11 s to read for `make run`'s five
  tensors (docs/PERFORMANCE.md). A state holding text (a `Serializable`'s
  bytes) is saved as TFF saves it, and versions saved as SavedModels load
  as before."""
  import numpy as np
  import tensorflow as tf
  import tensorflow_federated as tff

  class ArrayStateManager(file_manager):
    async def save(self, program_state, version):
      leaves = [
        _as_saved(leaf)
        for leaf in tf.nest.flatten(
          await tff.program.materialize_value(program_state)
        )
      ]
      if not all(
        isinstance(leaf, (np.ndarray, np.generic))
        and leaf.dtype.kind in 'biufc'
        for leaf in leaves
      ):
        return await super().save(program_state, version)
      path = self._get_path_for_version(version)
      if os.path.exists(path):
        raise tff.program.ProgramStateExistsError(
          version=version, path=os.path.dirname(path)
        )
      temporary = f'{path}_temp'  # Removed if a kill leaves it.
      shutil.rmtree(temporary, ignore_errors=True)
      os.makedirs(temporary)
      with open(os.path.join(temporary, STATE_FILE), 'wb') as file:
        np.savez(file, *leaves)
      os.rename(temporary, path)
      await self._remove_old_program_state()

    async def load(self, version, structure):
      path = os.path.join(self._get_path_for_version(version), STATE_FILE)
      if not os.path.exists(path):
        return await super().load(version, structure)
      with np.load(path, allow_pickle=False) as arrays:
        leaves = [arrays[f'arr_{i}'] for i in range(len(arrays.files))]
      return tf.nest.pack_sequence_as(
        structure,
        # As TFF reads a tensor back: a scalar as NumPy's scalar.
        [leaf[()] if leaf.ndim == 0 else leaf for leaf in leaves],
      )

  def _as_saved(leaf):
    """What `tf.Variable(leaf)` holds, or None if it cannot hold it."""
    try:
      return tf.convert_to_tensor(leaf).numpy()
    except (TypeError, ValueError):
      return None

  return ArrayStateManager


def _metrics_csv(path, rows):
  """metrics.csv's release manager: what TFF's `CSVFileReleaseManager`
  writes in `CSVSaveMode.WRITE` (the same bytes: the whole file rewritten
  and renamed each round, so that a kill never leaves a half row), from
  its rows (`rows`, read and checked, at first) kept here, where TFF's
  reads the file back each round: O(rounds) a round, for `make run`'s 16
  columns 5.6 ms a round at round 10 and 13.0 at round 200, measured alone
  (docs/PERFORMANCE.md)."""
  import csv

  import numpy as np
  import tensorflow_federated as tff

  class MetricsCsv(tff.program.ReleaseManager):
    def __init__(self):
      self._fieldnames = list(rows[0]) if rows else ['round']
      self._rows = list(rows)
      if not os.path.exists(path):
        self._write()

    async def release(self, value, key):
      # A round released again (a resumed run) drops it and those after;
      # with no row left, the header starts again (as TFF's does).
      kept = [r for r in self._rows if int(r['round']) < key]
      if self._rows and not kept:
        self._fieldnames = ['round']
      self._rows = kept
      row = {'round': key}
      for name, item in value._asdict().items():
        row[name] = np.array(item).tolist()
        if name not in self._fieldnames:
          self._fieldnames.append(name)
      self._rows.append(row)
      self._write()

    def _write(self):
      temporary = f'{path}_temp'
      with open(temporary, 'w', newline='') as file:
        writer = csv.DictWriter(file, fieldnames=self._fieldnames)
        writer.writeheader()
        writer.writerows(self._rows)
      os.replace(temporary, path)

  return MetricsCsv()


def _released(cell: str):
  """The value a row released, from its text in metrics.csv (None: empty,
  a value TensorBoard does not take)."""
  if cell in ('', 'True', 'False'):
    return {'': None, 'True': True, 'False': False}[cell]
  try:
    return float(cell)
  except ValueError:
    return cell


def _tensorboard(folder, held):
  """The rows' release manager to TensorBoard: the summaries TFF's
  `TensorBoardReleaseManager` writes (a scalar per number, at the round,
  each value's bytes those of TensorFlow's summary op; the rows hold only
  scalars) but for the values already written (`held`: round → the names
  its events hold). Written with TensorBoard's protos and record writer,
  without TensorFlow: a round's values in one event, handed to the system
  once the round is written, so a kill loses no round written, and nothing
  is traced (TensorFlow's summary ops took 0.10–0.13 s to trace a set of
  columns; docs/PERFORMANCE.md)."""
  import numpy as np
  from tensorboard.compat.proto import event_pb2
  from tensorboard.compat.proto import summary_pb2
  from tensorboard.compat.proto import tensor_pb2
  from tensorboard.compat.proto import types_pb2
  from tensorboard.plugins.scalar import metadata
  import tensorflow_federated as tff

  scalar = metadata.create_summary_metadata(display_name=None, description=None)

  def value(name, number):
    return summary_pb2.Summary.Value(
      tag=name,
      metadata=scalar,
      tensor=tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT,
        tensor_shape={},
        tensor_content=np.float32(number).tobytes(),
      ),
    )

  class TensorBoard(tff.program.ReleaseManager):
    def __init__(self):
      self._records = None  # Opened at the first write.

    async def release(self, value, key):
      self.write(key, value._asdict().items())

    def write(self, key, items):
      """The numbers of `items` ((name, value)) that round `key`'s events
      lack."""
      values = [
        value(name, item)
        for name, item in items
        if np.array(item).dtype.kind in 'biuf' and name not in held.get(key, ())
      ]
      if not values:
        return
      held.setdefault(key, set()).update(v.tag for v in values)
      if self._records is None:
        self._records = _event_file(folder, event_pb2)
      self._records.write(
        event_pb2.Event(
          wall_time=time.time(),
          step=key,
          summary=summary_pb2.Summary(value=values),
        ).SerializeToString()
      )
      self._records.flush()

  return TensorBoard()


def _event_file(folder, event_pb2):
  """A new event file in `folder`, named and begun as TensorFlow's writer
  names and begins its own."""
  from tensorboard.summary.writer import record_writer

  os.makedirs(folder, exist_ok=True)
  prefix = (
    f'events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}'
    f'.{os.getpid()}'
  )
  for n in itertools.count():
    try:
      file = open(os.path.join(folder, f'{prefix}.{n}.v2'), 'xb')
      break
    except FileExistsError:
      continue  # Another writer of this process, this second.
  records = record_writer.RecordWriter(file)
  records.write(
    event_pb2.Event(
      wall_time=time.time(),
      file_version='brain.Event:2',
      source_metadata=event_pb2.SourceMetadata(writer=__name__),
    ).SerializeToString()
  )
  return records
