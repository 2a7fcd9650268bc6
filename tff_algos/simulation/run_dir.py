"""A run's folder: its settings, metrics, checkpoints and summary.

    OUTPUT_DIR/
      config.json          the resolved settings (`Config.to_json`)
      metrics.csv          a row per round (`loop.COLUMNS`), rewritten
                           atomically each round by TFF's CSVFileReleaseManager
      tensorboard/         the same per round (TensorBoardReleaseManager),
                           and the settings in TensorBoard's HPARAMS tab
      checkpoints/round_N/ the program state (FileProgramStateManager): the
                           two latest are kept
      summary.json         written when the run has finished

A folder holding the same run (same resolved settings) is resumed from its
latest checkpoint, or left alone once finished; one holding another run or
unknown results is never overwritten unless asked (`remove_outputs`).
"""

import json
import os
import shutil

from tensorboard.plugins.hparams import api as hparams_api
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.analysis import results
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
    results.CONFIG_FILE, results.METRICS_FILE, results.SUMMARY_FILE)
CHECKPOINT_DIR, TENSORBOARD_DIR = 'checkpoints', 'tensorboard'
OUTPUTS = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, CHECKPOINT_DIR,
           TENSORBOARD_DIR)


class OutputDirError(ConfigError):
  """The folder holds another run (or unknown results) and is kept as is."""


class RunDir:
  """The folder of one run of `config`."""

  def __init__(self, path: str, config: Config):
    self.path = path
    self.config = config
    self.metrics_path = os.path.join(path, METRICS_FILE)

  def _file(self, name):
    return os.path.join(self.path, name)

  def status(self) -> str:
    """'new', 'resume' (same settings, unfinished) or 'finished'.

    Raises OutputDirError when the folder holds a run with other settings,
    or results without a config.json.
    """
    saved = results.read_json(self.path, CONFIG_FILE)
    if saved is None:
      if any(os.path.exists(self._file(name)) for name in OUTPUTS):
        raise OutputDirError(f'{self.path} already holds results; pass '
                             '--overwrite to replace them or choose another '
                             '--output_dir')
      return 'new'
    try:
      saved = Config.from_json(saved).to_json()
    except (ConfigError, TypeError, ValueError) as e:
      raise OutputDirError(f'{self.path} holds a run with settings this '
                           f'version cannot read ({e}); pass --overwrite to '
                           'replace it or choose another --output_dir'
                           ) from None
    current = self.config.to_json()
    differences = [f'{key}={saved.get(key)!r} there, {current.get(key)!r} here'
                   for key in sorted(set(saved) | set(current))
                   if saved.get(key) != current.get(key)]
    if differences:
      raise OutputDirError(
          f'{self.path} holds a run with another config '
          f'({"; ".join(differences)}); pass --overwrite to replace it or '
          'choose another --output_dir')
    return 'finished' if os.path.exists(self._file(SUMMARY_FILE)) else 'resume'

  def remove_outputs(self):
    """Deletes what a run writes in the folder (--overwrite), nothing else."""
    for name in OUTPUTS:
      path = self._file(name)
      if os.path.isdir(path):
        shutil.rmtree(path)
      elif os.path.exists(path):
        os.remove(path)

  def start(self):
    """Creates the folder; a new run's settings go to config.json and to
    TensorBoard's HPARAMS."""
    new = self.status() == 'new'
    os.makedirs(self.path, exist_ok=True)
    if new:
      settings = self.config.to_json()
      results.write_atomically(self._file(CONFIG_FILE),
                               json.dumps(settings, indent=2, sort_keys=True))
      with tf.summary.create_file_writer(
          self._file(TENSORBOARD_DIR)).as_default():
        hparams_api.hparams({k: v for k, v in settings.items()
                             if isinstance(v, (bool, int, float, str))})

  def release_manager(self) -> tff.program.ReleaseManager:
    """metrics.csv and TensorBoard, a row per round."""
    return tff.program.GroupingReleaseManager([
        # WRITE: the whole file is rewritten and renamed each round, so a
        # kill never leaves a half row (O(rounds²) bytes over a run; small).
        tff.program.CSVFileReleaseManager(
            self.metrics_path, tff.program.CSVSaveMode.WRITE,
            key_fieldname='round'),
        tff.program.TensorBoardReleaseManager(self._file(TENSORBOARD_DIR))])

  def state_manager(self) -> tff.program.FileProgramStateManager:
    """The checkpoints (two kept), without saves a kill cut short."""
    directory = self._file(CHECKPOINT_DIR)
    manager = tff.program.FileProgramStateManager(
        directory, prefix='round_', keep_total=2, keep_first=False)
    for name in os.listdir(directory):
      if '_temp' in name:
        shutil.rmtree(os.path.join(directory, name))
    return manager

  def finish(self, summary: dict):
    """Writes summary.json: the run is finished."""
    results.write_atomically(self._file(SUMMARY_FILE),
                             json.dumps(summary, indent=2, sort_keys=True))

  def rows(self):
    """metrics.csv as dicts of numbers (the measured columns)."""
    return [results.typed(row) for row in results.read_rows(self.path)]
