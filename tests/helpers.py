"""Small shared pieces of the tests: a task, runs and model comparisons."""

import functools

import numpy as np

import tasks
from tff_algos import learning
from tff_algos.simulation import experiment
from tff_algos.analysis import results
from tff_algos.simulation.config import Config


@functools.lru_cache(maxsize=None)
def task_and_arrays(name='synthetic_1_1'):
  task = tasks.load_task(name)
  return task, tasks.client_arrays(task.train)


def quick_config(**overrides):
  """A short run: 3 rounds, K=5, E=2 (settings tests override)."""
  values = dict(rounds=3, clients_per_round=5, epochs=2, batch_size=10,
                client_lr=0.01)
  values.update(overrides)
  return Config(**values)


def run(tmp_path, name, **overrides):
  """Runs experiment.run; returns (metrics.csv text, rows as dicts)."""
  config = quick_config(**overrides)
  task, _ = task_and_arrays(config.task)
  out = tmp_path / name
  experiment.run(config, task, str(out), show_progress=False)
  return (out / results.METRICS_FILE).read_text(), results.read_rows(out)


def train(process, model_fn, inputs_by_round, seed=0):
  """Runs `process` from the seeded initial model; returns final weights."""
  state = process.initialize()
  state = process.set_model_weights(
      state, learning.initial_model_weights(model_fn, seed))
  for inputs in inputs_by_round:
    state = process.next(state, inputs).state
  return process.get_model_weights(state)


def max_abs_diff(a, b):
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(a.trainable, b.trainable))
