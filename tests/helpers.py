"""Small shared pieces of the tests: a task, runs and model comparisons."""

import functools
import json
import subprocess
import sys

import numpy as np
import tensorflow as tf

import tasks
from tff_algos import learning
from tff_algos.simulation import experiment
from tff_algos.simulation import results
from tff_algos.simulation.config import Config

# A short run: 2 rounds, K=5, E=2 (the execution paths' equivalence tests).
QUICK_RUN = dict(
  rounds=2, clients_per_round=5, epochs=2, batch_size=10, client_lr=0.01
)
# Each dimension of the execution paths' equivalence (compiled clients
# and clients reading their data, against the reference): algorithm,
# aggregator, stragglers, sampling.
EXECUTION_CASES = {
  'fedavg': dict(algo='fedavg'),
  'fedsgd': dict(algo='fedsgd', epochs=None, batch_size=None, client_lr=0.1),
  'fedprox_adaptive_mu': dict(algo='fedprox', mu=0.5, adaptive_mu=True),
  'fedisgd': dict(algo='fedisgd'),
  'centralized': dict(
    algo='centralized',
    clients_per_round=1,
    epochs=None,
    hparams={'updates_per_round': 7},
  ),
  'dp_fixed_poisson': dict(
    algo='fedavg',
    aggregator='dp',
    dp_noise_multiplier=0.5,
    dp_clip=0.5,
    client_sampling='poisson',
  ),
  'dp_adaptive': dict(
    algo='fedprox',
    aggregator='dp',
    dp_noise_multiplier=0.2,
    clients_per_round=10,
  ),
  'compression': dict(algo='fedavg', aggregator='compression'),
  'robust': dict(algo='fedavg', aggregator='robust'),
  # FedAvg's B = ∞ (Table 1): each step on the client's whole dataset.
  'full_batch': dict(algo='fedavg', batch_size=-1, epochs=3),
  'stragglers_drop': dict(algo='fedavg', straggler_fraction=0.5, epochs=3),
  'stragglers_partial': dict(algo='fedprox', straggler_fraction=0.5, epochs=3),
  'proportional': dict(algo='fedprox', client_sampling='proportional'),
  'adam_clients': dict(algo='fedavg', client_optimizer='adam', client_lr=0.001),
}


@functools.cache
def task_and_arrays(name='synthetic_1_1'):
  task = tasks.load_task(name)
  return task, tasks.client_arrays(task.train)


def client_datasets(count, batch_size=10):
  """The first `count` clients' training data of the default task, as
  batched tf.data datasets (a production build's input). Without tf.data's
  static optimizations and autotuning, which the worker otherwise runs each
  time it iterates one (they cannot speed up in-memory data and do not
  change what a dataset yields): test_mechanisms.py took 84 s instead of
  102 s."""
  task = task_and_arrays()[0]
  options = tf.data.Options()
  options.experimental_optimization.apply_default_optimizations = False
  options.autotune.enabled = False
  return [
    task.train.create_tf_dataset_for_client(c)
    .batch(batch_size)
    .with_options(options)
    for c in task.train.client_ids[:count]
  ]


def quick_config(**overrides):
  """A short run: 3 rounds, K=5, E=2 (settings tests override)."""
  values = dict(
    rounds=3, clients_per_round=5, epochs=2, batch_size=10, client_lr=0.01
  )
  values.update(overrides)
  return Config.create(**values)


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
    state, learning.initial_model_weights(model_fn, seed)
  )
  for inputs in inputs_by_round:
    state = process.next(state, inputs).state
  return process.get_model_weights(state)


def final_weights(settings, model_fn, arrays, process=None):
  """(the loop, its model's trainable weights) after `settings`' rounds
  of `process` (else the run's own) from the seeded initial model."""
  from tff_algos.simulation import trainer

  loop = trainer.loop_for(settings, model_fn, arrays, process=process)
  state = loop.run(
    loop.initial_state(
      learning.initial_model_weights(model_fn, settings.run.seed)
    ),
    range(settings.run.rounds + 1),
  )
  return loop, loop.process.get_model_weights(state).trainable


def max_abs_diff(a, b):
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
    for x, y in zip(a.trainable, b.trainable)
  )


_REAPER = r"""
import ctypes, json, os, subprocess, sys, time
import psutil
ctypes.CDLL('libc.so.6', use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
code = subprocess.call(sys.argv[2:])
deadline = time.monotonic() + 5
while True:  # Orphans become our children: reap the dead, list the living.
  try:
    while os.waitpid(-1, os.WNOHANG)[0]:
      pass
  except ChildProcessError:
    pass
  left = [p for p in psutil.Process().children(recursive=True)
          if p.status() != psutil.STATUS_ZOMBIE]
  if not left or time.monotonic() > deadline:
    break
  time.sleep(0.1)
with open(sys.argv[1], 'w') as f:
  json.dump([p.name() for p in left], f)
for p in left:
  p.kill()
sys.exit(code)
"""


def run_and_reap(command, tmp_path, **kwargs):
  """Runs `command` (a list) like subprocess.run, as the child of a
  process that adopts whatever it leaves running (a Linux subreaper);
  returns (CompletedProcess, names of the processes it left, which are
  then killed)."""
  left = tmp_path / 'left_running.json'
  result = subprocess.run(
    [sys.executable, '-c', _REAPER, str(left), *command], **kwargs
  )
  return result, json.loads(left.read_text())
