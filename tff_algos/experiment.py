"""One federated training run: rounds, evaluation, metrics.csv, progress.

Shared by run_experiment.py, the notebooks and the tests. Knows the four
algorithms by name and nothing about any particular dataset.
"""

import asyncio
import collections
import concurrent.futures
import dataclasses
import json
import math
import os
import shutil
import sys
import time

import numpy as np
from tensorboard.plugins.hparams import api as hparams_api
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

import tasks as tasks_lib
from tff_algos import composition
from tff_algos import evaluation
from tff_algos import fedavg
from tff_algos import fedisgd
from tff_algos import fedprox
from tff_algos import fedsgd
from tff_algos import results
from tff_algos.config import Config
from tff_algos.config import ConfigError
from tff_algos.sampling import ClientSampler

COLUMNS = ('round', 'train_loss', 'train_accuracy', 'test_loss',
           'test_accuracy', 'mu', 'participants', 'local_steps',
           'grad_variance', 'B', 'vlg')
# One round's release (a namedtuple keeps the columns' order; a dict's keys
# would be sorted). None: not measured this round.
RoundMetrics = collections.namedtuple('RoundMetrics', COLUMNS[1:])


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


CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = (
    results.CONFIG_FILE, results.METRICS_FILE, results.SUMMARY_FILE)
CHECKPOINT_DIR, TENSORBOARD_DIR = 'checkpoints', 'tensorboard'
_OUTPUTS = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, CHECKPOINT_DIR,
            TENSORBOARD_DIR)


class OutputDirError(ConfigError):
  """output_dir holds another run (or unknown results) and is kept as is."""


def _config_dict(config: Config):
  return json.loads(json.dumps(dataclasses.asdict(config)))


def output_dir_status(output_dir: str, config: Config) -> str:
  """'new', 'resume' (same config, unfinished) or 'finished' (same config).

  Raises OutputDirError when output_dir holds a run with another config, or
  results without a config.json: those are never overwritten implicitly.
  """
  saved = results.read_json(output_dir, CONFIG_FILE)
  if saved is None:
    if any(os.path.exists(os.path.join(output_dir, name))
           for name in _OUTPUTS):
      raise OutputDirError(f'{output_dir} already holds results; pass '
                           '--overwrite to replace them or choose another '
                           '--output_dir')
    return 'new'
  current = _config_dict(config)
  # A setting added after the run was written counts as its default there.
  saved = {**_config_dict(Config()), **saved}
  differences = [f'{key}={saved.get(key)!r} there, {current.get(key)!r} here'
                 for key in sorted(set(saved) | set(current))
                 if saved.get(key) != current.get(key)]
  if differences:
    raise OutputDirError(
        f'{output_dir} holds a run with another config '
        f'({"; ".join(differences)}); pass --overwrite to replace it or '
        'choose another --output_dir')
  return ('finished' if os.path.exists(os.path.join(output_dir, SUMMARY_FILE))
          else 'resume')


def remove_outputs(output_dir: str):
  """Deletes what run() writes in output_dir (for --overwrite), nothing else."""
  for name in _OUTPUTS:
    path = os.path.join(output_dir, name)
    if os.path.isdir(path):
      shutil.rmtree(path)
    elif os.path.exists(path):
      os.remove(path)


def _write_json_atomically(path, value):
  results.write_atomically(path, json.dumps(value, indent=2, sort_keys=True))


def _wait(coroutine):
  """Runs a tff.program coroutine to its end, from any thread: in its own
  thread, since a notebook's thread already runs an event loop."""
  with concurrent.futures.ThreadPoolExecutor(1) as thread:
    return thread.submit(asyncio.run, coroutine).result()


def _program_state(state, adaptive_mu):
  """What a checkpoint holds besides the round number (its version)."""
  return collections.OrderedDict(
      process=state,
      adaptive_mu=collections.OrderedDict(
          (k, np.asarray(v, np.float64)) for k, v in
          dataclasses.asdict(adaptive_mu or fedprox.AdaptiveMu(0.0)).items()))


def run(config: Config, task: tasks_lib.FederatedTask, output_dir: str,
        show_progress: bool = True, checkpoint_every: int = 10,
        target_accuracy: float | None = None):
  """Trains for config.rounds rounds, writing output_dir/metrics.csv.

  A row per round: the global objective f(w) = Σ p_k F_k(w) and accuracy over
  ALL clients' training data and over all test data (on eval rounds, and
  round 0 = the initial model), μ, the number of participating clients and
  local steps, and when asked the dissimilarity (grad_variance, B) and
  FedISGD's VLG. Rows are released to metrics.csv (rewritten atomically) and
  TensorBoard (output_dir/tensorboard) by TFF's release managers.

  Every `checkpoint_every` rounds (and after the last) the program state is
  saved with tff.program.FileProgramStateManager; a run that finds its own
  checkpoints in output_dir (same config) continues from the latest one and
  ends exactly as an uninterrupted run would. A finished run is left alone.
  Returns the rows of metrics.csv as dicts of numbers (measured columns).
  """
  train_arrays = tasks_lib.client_arrays(task.train)
  test_arrays = tasks_lib.client_arrays(task.test)
  config = dataclasses.replace(config, task=task.name)
  config.validate(num_clients=len(train_arrays))
  status = output_dir_status(output_dir, config)
  metrics_path = os.path.join(output_dir, METRICS_FILE)
  if status == 'finished':
    return [results.typed(row) for row in results.read_rows(output_dir)]
  process = build_process(config, task.model_fn)
  evaluate = evaluation.build_evaluation(task.model_fn)
  dissimilarity = (evaluation.build_dissimilarity(task.model_fn)
                   if config.dissimilarity_every else None)
  sampler = ClientSampler(len(train_arrays), config.clients_per_round,
                          config.epochs, config.seed, config.straggler_fraction)
  adaptive_mu = fedprox.AdaptiveMu(config.mu) if config.adaptive_mu else None

  state = process.initialize()
  state = process.set_model_weights(
      state, composition.initial_model_weights(task.model_fn, config.seed))
  os.makedirs(output_dir, exist_ok=True)
  if status == 'new':
    hparams = _config_dict(config)
    _write_json_atomically(os.path.join(output_dir, CONFIG_FILE), hparams)
    with tf.summary.create_file_writer(os.path.join(
        output_dir, TENSORBOARD_DIR)).as_default():  # TensorBoard's HPARAMS.
      hparams_api.hparams({k: v for k, v in hparams.items()
                           if isinstance(v, (bool, int, float, str))})
  checkpoint_dir = os.path.join(output_dir, CHECKPOINT_DIR)
  checkpoints = tff.program.FileProgramStateManager(
      checkpoint_dir, prefix='round_', keep_total=2, keep_first=False)
  for name in os.listdir(checkpoint_dir):  # Saves cut short by a kill.
    if '_temp' in name:
      shutil.rmtree(os.path.join(checkpoint_dir, name))
  saved, last_round = _wait(checkpoints.load_latest(
      _program_state(state, adaptive_mu)))
  first_round = 0
  if saved is not None:
    state, first_round = saved['process'], last_round + 1
    if adaptive_mu:
      adaptive_mu = fedprox.AdaptiveMu(**{  # Back to each field's type.
          k: type(getattr(adaptive_mu, k))(v)
          for k, v in saved['adaptive_mu'].items()})
  mu = adaptive_mu.mu if adaptive_mu else effective_mu(config)
  releases = tff.program.GroupingReleaseManager([
      # WRITE: the whole file is rewritten and renamed each round, so a kill
      # never leaves a half row (O(rounds²) bytes over a run; small).
      tff.program.CSVFileReleaseManager(
          metrics_path, tff.program.CSVSaveMode.WRITE, key_fieldname='round'),
      tff.program.TensorBoardReleaseManager(
          os.path.join(output_dir, TENSORBOARD_DIR))])

  round_seconds = []
  progress = tqdm.tqdm(total=config.rounds, initial=max(first_round - 1, 0),
                       file=sys.stderr, unit='round', disable=not show_progress,
                       dynamic_ncols=True)
  with progress:
    for round_num in range(first_round, config.rounds + 1):
      start = time.perf_counter()
      row = dict(mu=mu)
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
      if dissimilarity and round_num % config.dissimilarity_every == 0:
        row.update(dissimilarity(weights, train_arrays))
      if adaptive_mu and round_num > 0:
        mu = adaptive_mu.update(row['train_loss'])
        hparams = process.get_hparams(state)
        hparams['client_work']['mu'] = np.float32(mu)
        state = process.set_hparams(state, hparams)
      _wait(releases.release(RoundMetrics(
          **{column: row.get(column) for column in COLUMNS[1:]}), round_num))
      if 'train_loss' in row and not math.isfinite(row['train_loss']):
        raise NonFiniteLoss(f'training loss is {row["train_loss"]} at round '
                            f'{round_num}; metrics so far are in '
                            f'{metrics_path}')
      if round_num % checkpoint_every == 0 or round_num == config.rounds:
        _wait(checkpoints.save(_program_state(state, adaptive_mu),
                                     round_num))
      if 'train_loss' in row:
        progress.set_postfix(loss=f'{row["train_loss"]:.4f}',
                             test_acc=f'{row["test_accuracy"]:.4f}',
                             mu=f'{mu:g}', refresh=False)
      if round_num > 0:
        round_seconds.append(time.perf_counter() - start)
        progress.update()
  examples_per_client = float(np.mean(
      [len(next(iter(a.values()))) for a in train_arrays]))
  summary = results.summarize(output_dir, target_accuracy, examples_per_client)
  summary.update(
      finished=True, num_clients=len(train_arrays),
      examples_per_client=examples_per_client,
      resumed_from_round=first_round - 1 if first_round else None,
      median_seconds_per_round=(float(np.median(round_seconds))
                                if round_seconds else None),
      seconds=float(np.sum(round_seconds)))
  _write_json_atomically(os.path.join(output_dir, SUMMARY_FILE), summary)
  return [results.typed(row) for row in results.read_rows(output_dir)]
