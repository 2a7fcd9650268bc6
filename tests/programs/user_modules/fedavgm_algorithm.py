"""An algorithm of a user's own, from this file alone: FedAvg with server
momentum (Hsu et al. 2019) and a server learning-rate warm-up, with a
metric of its own and a per-round hook.

  python -m tff_algos --import=tests/programs/user_modules/fedavgm_algorithm.py \\
      --algo=fedavgm --hparam=server_momentum=0.9 ...
"""

import collections
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import learning
from tff_algos.algorithms import registry


def _mean_update_norm(mean):
  """The aggregator's measurement: ‖the clients' mean update‖."""

  @tff.tensorflow.computation(mean.type_signature.member)
  def norm(update):
    return collections.OrderedDict(mean_update_norm=tf.linalg.global_norm(
        tf.nest.flatten(update)))

  return tff.federated_map(norm, mean)


def build_fed_avg_m(model_fn, config, client_input):
  """FedAvg's client work; the server's SGD with momentum on the mean."""
  return learning.build_process(
      model_fn,
      functools.partial(learning.build_proximal_sgd_client_work, mu=0.0,
                        optimizer=tff.learning.optimizers.build_sgdm(
                            config.client_lr)),
      tff.learning.optimizers.build_sgdm(
          config.server_lr, momentum=config.hparams['server_momentum']),
      client_weighting=config.client_weighting, client_input=client_input,
      model_aggregator=tff.aggregators.add_measurements(
          tff.aggregators.MeanFactory(),
          server_measurement_fn=_mean_update_norm))


class ServerWarmup:
  """Raises the server's learning rate linearly to --server_lr over the
  first `warmup_rounds` rounds (a hook: it sets the finalizer's rate in the
  process state before each round) and records the rate a round used."""
  name = 'server_warmup'

  def __init__(self, learning_rate, rounds):
    self._learning_rate, self._rounds = learning_rate, rounds

  def rate(self, round_num):
    return self._learning_rate * min(1.0, round_num / self._rounds)

  def state(self):
    return collections.OrderedDict()

  def restore(self, state):
    del state

  def after_round(self, round_num, row, process, state):
    if round_num > 0:
      row['server_lr_now'] = self.rate(round_num)
    hparams = process.get_hparams(state)
    hparams['finalizer']['learning_rate'] = np.float32(self.rate(
        round_num + 1))
    return process.set_hparams(state, hparams)


registry.register(registry.Algorithm(
    name='fedavgm', label='FedAvgM', summary='FedAvg with server momentum '
    'and a warm-up of the server learning rate', paper='Hsu et al. 2019',
    build=build_fed_avg_m,
    hparams=('epochs', 'batch_size', 'client_lr', 'server_lr',
             'client_weighting', 'straggler_policy'),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='drop'),
    fixed=dict(mu=0.0),
    extra_hparams=dict(server_momentum=0.9, warmup_rounds=2),
    metrics=dict(mean_update_norm='‖mean client update‖ (its aggregator\'s '
                                  'measurement)',
                 server_lr_now='the server learning rate of the round '
                               '(warm-up)'),
    hooks=lambda config: [ServerWarmup(config.server_lr,
                                       config.hparams['warmup_rounds'])]))
