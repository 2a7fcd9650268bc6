"""What a finished run says: rounds to a target accuracy, last-half accuracy.

Reads a run folder (metrics.csv, config.json, summary.json) without
TensorFlow, for run summaries, sweep tables and plots.
"""

import csv
import json
import math
import os

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = ('config.json', 'metrics.csv',
                                          'summary.json')


def read_rows(run_dir):
  """metrics.csv as a list of {column: str} (one per round, round 0 first)."""
  with open(os.path.join(run_dir, METRICS_FILE), newline='') as f:
    return list(csv.DictReader(f))


def has_rows(run_dir):
  """Whether run_dir/metrics.csv holds at least one round (a run killed
  before round 0 was released leaves only its header)."""
  return (os.path.exists(os.path.join(run_dir, METRICS_FILE)) and
          bool(read_rows(run_dir)))


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
  return {k: int(v) if k in INTEGER_COLUMNS else float(v)
          for k, v in row.items() if v != ''}


def read_json(run_dir, name):
  """run_dir/name parsed, or None if the file is not there."""
  path = os.path.join(run_dir, name)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


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
      return previous_round + (round_num - previous_round) * (
          target - best) / (accuracy - best)
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


def summarize(run_dir, target_accuracy=None, examples_per_client=None):
  """The numbers a results table shows for one run (a dict).

  updates_per_round (FedAvg's u = E·n/(K·B), §3) needs the mean local
  dataset size: `examples_per_client`, else the one summary.json recorded.
  """
  rows = read_rows(run_dir)
  config = read_json(run_dir, CONFIG_FILE) or {}
  summary = read_json(run_dir, SUMMARY_FILE) or {}
  rounds, accuracy = series(rows, 'test_accuracy')
  _, loss = series(rows, 'train_loss')
  last_round = int(rows[-1]['round']) if rows else 0
  result = dict(
      rounds=last_round,
      finished=bool(summary),
      final_train_loss=loss[-1] if loss else None,
      final_test_accuracy=accuracy[-1] if accuracy else None,
      best_test_accuracy=max(accuracy) if accuracy else None,
      last_half_test_accuracy=last_half_mean(rounds, accuracy, last_round))
  examples_per_client = examples_per_client or summary.get(
      'examples_per_client')
  if examples_per_client and config:
    result['updates_per_round'] = updates_per_round(  # FedAvg's u.
        config['epochs'], config['batch_size'], examples_per_client)
  if target_accuracy is not None:
    result['target_accuracy'] = target_accuracy
    result['rounds_to_target'] = rounds_to_target(rounds, accuracy,
                                                  target_accuracy)
  return result
