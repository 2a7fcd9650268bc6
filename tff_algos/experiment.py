"""One federated training run: rounds, evaluation, metrics.csv, progress.

Shared by run_experiment.py, the notebooks and the tests. Knows the four
algorithms by name and nothing about any particular dataset.
"""

import collections
import csv
import dataclasses
import json
import math
import os
import sys
import time

import numpy as np
import tensorflow_federated as tff
import tqdm

import tasks as tasks_lib
from tff_algos import composition
from tff_algos import evaluation
from tff_algos import fedavg
from tff_algos import fedisgd
from tff_algos import fedprox
from tff_algos import fedsgd
from tff_algos.config import Config
from tff_algos.sampling import ClientSampler

COLUMNS = ('round', 'train_loss', 'train_accuracy', 'test_loss',
           'test_accuracy', 'mu', 'participants', 'local_steps',
           'grad_variance', 'B', 'vlg')


class NonFiniteLoss(RuntimeError):
  """The global training loss became NaN or infinite."""


def build_process(config: Config,
                  model_fn) -> tff.learning.templates.LearningProcess:
  """The algorithm named by config.algo, with the config's hyper-parameters."""
  weighting = tff.learning.ClientWeighting[config.weighting.upper()]
  if config.algo == 'fedavg':
    return fedavg.build_fed_avg(model_fn, config.client_lr,
                                config.server_lr or 1.0, weighting)
  if config.algo == 'fedsgd':
    return fedsgd.build_fed_sgd(model_fn, config.server_lr or config.client_lr,
                                weighting)
  if config.algo == 'fedprox':
    return fedprox.build_fed_prox(model_fn, config.client_lr, config.mu,
                                  config.server_lr or 1.0, weighting)
  return fedisgd.build_fed_isgd(
      model_fn, config.client_lr, lam=config.mu,
      server_learning_rate=config.server_lr or 1.0,
      server_lr_decay=config.server_lr_decay,
      server_lr_decay_every=config.server_lr_decay_every,
      client_weighting=weighting)


def effective_mu(config: Config) -> float:
  return 0.0 if config.algo in ('fedavg', 'fedsgd') else config.mu


def round_inputs(sampler, plans, arrays, round_num, batch_size):
  """Each participant's training input: its data and minibatch schedule."""
  inputs = []
  for plan in plans:
    data = arrays[plan.client]
    order, ends = sampler.minibatch_schedule(
        round_num, plan.client, len(next(iter(data.values()))), plan.epochs,
        batch_size)
    inputs.append([collections.OrderedDict(
        data=data, example_order=order, batch_ends=ends)])
  return inputs


def _format(value):
  if value is None:
    return ''
  if isinstance(value, (float, np.floating)):
    return repr(float(value))
  return str(value)


def run(config: Config, task: tasks_lib.FederatedTask, output_dir: str,
        show_progress: bool = True):
  """Trains for config.rounds rounds, writing output_dir/metrics.csv.

  A row per round: the global objective f(w) = Σ p_k F_k(w) and accuracy over
  ALL clients' training data and over all test data (on eval rounds, and
  round 0 = the initial model), μ, the number of participating clients and
  local steps, and when asked the dissimilarity (grad_variance, B) and
  FedISGD's VLG. Returns the rows as dicts.
  """
  train_arrays = tasks_lib.client_arrays(task.train)
  test_arrays = tasks_lib.client_arrays(task.test)
  config = dataclasses.replace(config, task=task.name)
  config.validate(num_clients=len(train_arrays))
  process = build_process(config, task.model_fn)
  evaluate = evaluation.build_evaluation(task.model_fn)
  dissimilarity = (evaluation.build_dissimilarity(task.model_fn)
                   if config.dissimilarity_every else None)
  sampler = ClientSampler(len(train_arrays), config.clients_per_round,
                          config.epochs, config.seed, config.straggler_fraction)
  adaptive_mu = fedprox.AdaptiveMu(config.mu) if config.adaptive_mu else None
  mu = effective_mu(config)

  state = process.initialize()
  state = process.set_model_weights(
      state, composition.initial_model_weights(task.model_fn, config.seed))

  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, 'config.json'), 'w') as f:
    json.dump(dataclasses.asdict(config), f, indent=2, sort_keys=True)
  rows, round_seconds = [], []
  progress = tqdm.tqdm(total=config.rounds, file=sys.stderr, unit='round',
                       disable=not show_progress, dynamic_ncols=True)
  metrics_path = os.path.join(output_dir, 'metrics.csv')
  with open(metrics_path, 'w', newline='') as f, progress:
    writer = csv.DictWriter(f, COLUMNS)
    writer.writeheader()
    for round_num in range(config.rounds + 1):
      start = time.perf_counter()
      row = dict(round=round_num, mu=mu)
      if round_num > 0:
        plans = sampler.participants(round_num, config.policy)
        row.update(participants=len(plans), local_steps=0)
        if plans:  # All K may be dropped stragglers: w_{t+1} = w_t.
          output = process.next(state, round_inputs(
              sampler, plans, train_arrays, round_num, config.batch_size))
          state = output.state
          client_metrics = output.metrics['client_work']
          row['local_steps'] = client_metrics['local_steps']
          if 'update_spread' in client_metrics:
            row['vlg'] = mu**2 * client_metrics['update_spread']
      weights = process.get_model_weights(state)
      if round_num % config.eval_every == 0 or adaptive_mu or (
          round_num == config.rounds):
        train = evaluate(weights, train_arrays)
        test = evaluate(weights, test_arrays)
        row.update(train_loss=train['loss'], train_accuracy=train['accuracy'],
                   test_loss=test['loss'], test_accuracy=test['accuracy'])
        if not math.isfinite(train['loss']):
          writer.writerow({k: _format(v) for k, v in row.items()})
          raise NonFiniteLoss(f'training loss is {train["loss"]} at round '
                              f'{round_num}; metrics so far are in '
                              f'{metrics_path}')
      if dissimilarity and round_num % config.dissimilarity_every == 0:
        row.update(dissimilarity(weights, train_arrays))
      if adaptive_mu and round_num > 0:
        mu = adaptive_mu.update(row['train_loss'])
        hparams = process.get_hparams(state)
        hparams['client_work']['mu'] = np.float32(mu)
        state = process.set_hparams(state, hparams)
      writer.writerow({k: _format(v) for k, v in row.items()})
      f.flush()
      rows.append(row)
      if 'train_loss' in row:
        progress.set_postfix(loss=f'{row["train_loss"]:.4f}',
                             test_acc=f'{row["test_accuracy"]:.4f}',
                             mu=f'{mu:g}', refresh=False)
      if round_num > 0:
        round_seconds.append(time.perf_counter() - start)
        progress.update()
  last = [r for r in rows if 'train_loss' in r][-1]
  summary = dict(
      rounds=config.rounds, final_train_loss=float(last['train_loss']),
      final_test_accuracy=float(last['test_accuracy']),
      median_seconds_per_round=float(np.median(round_seconds)),
      total_seconds=float(np.sum(round_seconds)))
  with open(os.path.join(output_dir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  return rows
