"""A run folder's files, read and checked in one place, and what a finished
run says: rounds to a target accuracy, last-half accuracy.

Reads a run folder (metrics.csv, config.json, summary.json) without
TensorFlow, for run summaries, sweep tables and plots. A file that is not
what it should be (cut short, bytes flipped, the right format with the
wrong structure) is a `DamagedFile` naming it and what is wrong; what
happens then is the reader's caller's (a run rebuilds metrics.csv from its
TensorBoard events and rewrites a damaged summary; a plot or sweep says so
in one line).
"""

import csv
import hashlib
import io
import json
import math
import os

from tff_algos import algorithms  # noqa: F401  (registers the algorithms)
from tff_algos.algorithms import registry
from tff_algos.simulation import columns

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
  'config.json',
  'metrics.csv',
  'summary.json',
)
CLIENT_ACCURACY_FILE = 'client_accuracy.csv'


def read_client_accuracy(run_dir):
  """client_accuracy.csv's accuracies of the clients with test data (a
  list of floats); DamagedFile if it is not such a file."""
  path = os.path.join(run_dir, CLIENT_ACCURACY_FILE)
  lines = list(csv.reader(io.StringIO(_text(path))))
  if not lines or lines[0] != ['client', 'round', 'counted', 'accuracy']:
    raise DamagedFile(
      f'{path} is damaged: its header is not client, round, counted, accuracy'
    )
  accuracies = []
  for number, cells in enumerate(lines[1:], 2):
    if len(cells) != 4 or (cells[3] and _number(cells[3]) is None):
      raise DamagedFile(f'{path} is damaged: line {number} is not a client row')
    if cells[3]:
      accuracies.append(float(cells[3]))
  return accuracies


class DamagedFile(ValueError):
  """A run-folder file that cannot be read as what it should be."""


def _text(path):
  """The file's text; DamagedFile if it is not UTF-8."""
  try:
    with open(path, encoding='utf-8', newline='') as f:
      return f.read()
  except UnicodeDecodeError as e:
    raise DamagedFile(
      f'{path} is damaged: not UTF-8 text (byte {e.start})'
    ) from None


def _number(text):
  try:
    return float(text)
  except ValueError:
    return None


def read_rows(run_dir):
  """metrics.csv as a list of {column: str} (one per round, round 0 first).

  Checked: a header that starts with `round`, names no column twice; every
  row with a cell per column, its round a whole number larger than the
  previous row's, every other cell empty or a number. DamagedFile
  otherwise."""
  path = os.path.join(run_dir, METRICS_FILE)
  lines = list(csv.reader(io.StringIO(_text(path))))
  if not lines or not lines[0] or lines[0][0] != 'round':
    raise DamagedFile(
      f'{path} is damaged: its header does not start with "round"'
    )
  header = lines[0]
  if len(set(header)) < len(header) or '' in header:
    raise DamagedFile(
      f'{path} is damaged: its header {header} repeats or lacks a column name'
    )
  rows, previous = [], -1
  for number, cells in enumerate(lines[1:], 2):
    if not cells:
      continue
    where = f'{path} is damaged: line {number}'
    if len(cells) != len(header):
      raise DamagedFile(
        f'{where} has {len(cells)} cells for {len(header)} columns'
      )
    row = dict(zip(header, cells))
    round_num = row['round']
    if not round_num.isdigit() or int(round_num) <= previous:
      raise DamagedFile(
        f'{where}: round {round_num!r} does not follow round {previous}'
      )
    bad = [k for k, v in row.items() if v != '' and _number(v) is None]
    if bad:
      raise DamagedFile(f'{where}: {bad[0]} = {row[bad[0]]!r} is not a number')
    previous = int(round_num)
    rows.append(row)
  return _renamed(run_dir, rows)


def _renamed(run_dir, rows):
  """`rows` with the algorithm's hyper-parameter columns under their names:
  older files hold some under the name they had (`HyperParameter.formerly`,
  when the file lacks the new name). config.json, which names the
  algorithm, is read only when a column could be such a name."""
  former = {
    h.formerly
    for name in registry.names()
    for h in registry.get(name).hparams
    if h.formerly
  }
  if not rows or not former & set(rows[0]):
    return rows
  try:
    entry = registry.get((read_json(run_dir, CONFIG_FILE) or {}).get('algo'))
  except (DamagedFile, ValueError):
    return rows
  renames = {
    h.formerly: h.name
    for h in entry.hparams
    if h.formerly in rows[0] and h.name not in rows[0]
  }
  return [{renames.get(k, k): v for k, v in row.items()} for row in rows]


def has_rows(run_dir):
  """Whether run_dir/metrics.csv holds at least one round (a run killed
  before round 0 was released leaves only its header). DamagedFile for a
  damaged one."""
  return os.path.exists(os.path.join(run_dir, METRICS_FILE)) and bool(
    read_rows(run_dir)
  )


def csv_text(columns, rows):
  """`rows` (dicts) as CSV text with the header `columns`."""
  text = io.StringIO()
  writer = csv.DictWriter(text, list(columns))
  writer.writeheader()
  writer.writerows(rows)
  return text.getvalue()


def write_atomically(path, text):
  """path holds `text` in full, or keeps what it held: written to a
  temporary file, synced, then renamed over it."""
  partial = f'{path}.partial'
  with open(partial, 'w', newline='') as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(partial, path)


INTEGER_COLUMNS = ('round', 'participants', 'local_steps')


def typed(row):
  """A metrics.csv row as numbers, without the columns not measured."""
  return {
    k: int(v) if k in INTEGER_COLUMNS else float(v)
    for k, v in row.items()
    if v != ''
  }


def read_json(run_dir, name):
  """run_dir/name, a JSON object (dict), or None if the file is not there;
  DamagedFile if it is not UTF-8, not JSON, or not an object."""
  path = os.path.join(run_dir, name)
  if not os.path.exists(path):
    return None
  try:
    value = json.loads(_text(path))
  except json.JSONDecodeError as e:
    raise DamagedFile(f'{path} is damaged: {e}') from None
  if not isinstance(value, dict):
    raise DamagedFile(
      f'{path} is damaged: a JSON {type(value).__name__}, not an object'
    )
  return value


def read_config(run_dir):
  """(settings, provenance records) of run_dir/config.json ({} and [] if
  there is none); DamagedFile as `read_json`."""
  saved = dict(read_json(run_dir, CONFIG_FILE) or {})
  records = saved.pop('provenance', None)
  return saved, records if isinstance(records, list) else []


def code_id(run_dir) -> str:
  """A short id of what a run's numbers come from besides its settings
  (its latest provenance record: code, computation and data), '' when
  config.json records none: runs with other ids are never averaged. The
  initial state is left out: it holds the seed, which seeds of one
  experiment differ in by design."""
  _, records = read_config(run_dir)
  if not records:
    return ''
  latest = dict(records[-1])
  latest.pop('from_round', None)
  latest.pop('initial_state', None)
  latest['package'] = (latest.get('package') or {}).get('sha256')
  return hashlib.sha256(
    json.dumps(latest, sort_keys=True).encode()
  ).hexdigest()[:8]


def seconds_per_round(run_dir):
  """The median seconds a round of the run took, as its summary.json
  records them (`median_seconds_per_round`; wall time, so never in
  metrics.csv, whose bytes a rerun reproduces); None without a summary,
  or for a run whose last process ran no round."""
  summary = read_json(run_dir, SUMMARY_FILE) or {}
  seconds = summary.get('median_seconds_per_round')
  return float(seconds) if isinstance(seconds, (int, float)) else None


def series(rows, metric):
  """(rounds, values) of the rows where `metric` was measured."""
  kept = [r for r in rows if r.get(metric)]
  return [int(r['round']) for r in kept], [float(r[metric]) for r in kept]


def rounds_to_target(rounds, accuracies, target):
  """FedAvg §3: the round at which the best-so-far accuracy reaches `target`.

  The curve is made monotone (best accuracy over all prior evaluations) and
  the crossing is linearly interpolated between evaluated rounds. None if
  the target is never reached.
  """
  previous_round, best = None, -math.inf
  for round_num, accuracy in zip(rounds, accuracies):
    if accuracy >= target:
      if previous_round is None:
        return float(round_num)
      return previous_round + (round_num - previous_round) * (target - best) / (
        accuracy - best
      )
    best, previous_round = max(best, accuracy), round_num
  return None


def last_half_mean(rounds, values, total_rounds):
  """Mean of `values` over rounds T/2 < t <= T (FedISGD Tables 3–4)."""
  kept = [v for r, v in zip(rounds, values) if total_rounds / 2 < r]
  return sum(kept) / len(kept) if kept else None


def updates_per_round(epochs, batch_size, examples_per_client):
  """FedAvg's u = E·n/(K·B): local updates per client per round (B=∞: E)."""
  if batch_size == -1:
    return float(epochs)
  return epochs * examples_per_client / batch_size


# Columns some runs record (DP runs ε; models with a per-client accuracy
# its spread), shown by their last value where they are.
FINAL_WHEN_RECORDED = (
  'epsilon',
  'deployment_epsilon',
  'client_test_accuracy_p10',
  'client_test_accuracy_p50',
  'client_test_accuracy_min',
  'client_test_accuracy_std',
)


def _steps_per_round(config):
  """A run's minibatch steps a round, where its algorithm fixes them
  (`ClientPlan.steps_per_round`), from its config.json; None otherwise,
  or when no algorithm of that name is registered here."""
  try:
    entry = registry.get(config.get('algo', ''))
  except ValueError:
    return None
  hparams = {  # Older files hold them in "hparams".
    h.name: config.get(h.name, (config.get('hparams') or {}).get(h.name))
    for h in entry.hparams
  }
  return entry.clients.steps_per_round(hparams)


def summarize(
  run_dir, target_accuracy=None, examples_per_client=None, rows=None
):
  """The numbers a results table shows for one run (a dict).

  updates_per_round (FedAvg's u = E·n/(K·B), §3) needs the mean local
  dataset size: `examples_per_client`, else the one summary.json recorded.
  `rows`: metrics.csv's `read_rows`, if the caller has read them.
  """
  rows = read_rows(run_dir) if rows is None else rows
  config = read_json(run_dir, CONFIG_FILE) or {}
  summary = read_json(run_dir, SUMMARY_FILE) or {}
  rounds, accuracy = series(rows, 'test_accuracy')
  loss_column = columns.training_loss_column(rows[0] if rows else ())
  _, loss = series(rows, loss_column)
  last_round = int(rows[-1]['round']) if rows else 0
  result = dict(
    rounds=last_round,
    finished=bool(summary),
    **{f'final_{loss_column}': loss[-1] if loss else None},
    final_test_accuracy=accuracy[-1] if accuracy else None,
    best_test_accuracy=max(accuracy) if accuracy else None,
    last_half_test_accuracy=last_half_mean(rounds, accuracy, last_round),
  )
  examples_per_client = examples_per_client or summary.get(
    'examples_per_client'
  )
  block = _steps_per_round(config)
  if block is not None:  # A round is a block of steps, not E epochs.
    result['updates_per_round'] = float(block)
  elif examples_per_client and config:
    result['updates_per_round'] = updates_per_round(  # FedAvg's u.
      config['epochs'], config['batch_size'], examples_per_client
    )
  for column in FINAL_WHEN_RECORDED:
    _, values = series(rows, column)
    if values:
      result[f'final_{column}'] = values[-1]
  if target_accuracy is not None:
    result['target_accuracy'] = target_accuracy
    result['rounds_to_target'] = rounds_to_target(
      rounds, accuracy, target_accuracy
    )
    if block is not None and result['rounds_to_target'] is not None:
      result['updates_to_target'] = result['rounds_to_target'] * block
  return result
