"""An algorithm of a user's own, from this file alone: FedAvg with server
momentum (Hsu et al. 2019) and a server learning-rate warm-up, with a
metric of its own and a round callback.

  python -m tff_algos --import=tests/commands/user_modules/fedavgm_algorithm.py \\
      --algo=fedavgm --momentum=0.9 ...
"""

import collections
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import learning
from tff_algos.algorithms import callbacks
from tff_algos.algorithms import core
from tff_algos.algorithms import registry


def _mean_update_norm(mean):
  """The aggregator's measurement: ‖the clients' mean update‖."""

  @tff.tensorflow.computation(mean.type_signature.member)
  def norm(update):
    return collections.OrderedDict(
      mean_update_norm=tf.linalg.global_norm(tf.nest.flatten(update))
    )

  return tff.federated_map(norm, mean)


def build_fed_avg_m(model_fn, settings, client_input):
  """FedAvg's client work; the server's SGD with momentum on the mean. The
  run's model aggregator (`--aggregator`: TFF's weighted mean by default)
  measures the mean's norm."""
  return learning.build_process(
    model_fn,
    functools.partial(
      learning.build_proximal_sgd_client_work,
      mu=0.0,
      optimizer=tff.learning.optimizers.build_sgdm(
        settings.client_optimizer.learning_rate
      ),
    ),
    tff.learning.optimizers.build_sgdm(
      settings.server_optimizer.learning_rate,
      momentum=settings.hparams['momentum'],
    ),
    client_weighting=settings.client_weighting,
    client_input=client_input,
    model_aggregator=tff.aggregators.add_measurements(
      core.model_aggregator(settings, client_input)
      or tff.aggregators.MeanFactory(),
      server_measurement_fn=_mean_update_norm,
    ),
  )


class ServerWarmup(callbacks.RoundCallback):
  """Raises the server's learning rate linearly to --server_lr over the
  first `rounds` rounds (it sets the finalizer's rate in the process state
  for the next round) and records the rate a round used."""

  columns = {'server_lr_now': 'the server learning rate of the round (warm-up)'}

  def __init__(self, learning_rate, rounds):
    self._learning_rate, self._rounds = learning_rate, rounds

  def rate(self, round_num):
    return self._learning_rate * min(1.0, round_num / self._rounds)

  def after_round(self, end):
    if end.round_num > 0:
      end.row['server_lr_now'] = self.rate(end.round_num)
    hparams = end.process.get_hparams(end.state)
    hparams['finalizer']['learning_rate'] = np.float32(
      self.rate(end.round_num + 1)
    )
    end.state = end.process.set_hparams(end.state, hparams)


registry.register(
  registry.Algorithm(
    name='fedavgm',
    label='FedAvgM',
    summary='FedAvg with server momentum '
    'and a warm-up of the server learning rate',
    paper='Hsu et al. 2019',
    build=build_fed_avg_m,
    # Its builder makes its own optimizers (the rates are --client_lr and
    # --server_lr): `uses` lists neither client_optimizer nor
    # server_optimizer, so their flags are refused.
    uses=(
      'epochs',
      'batch_size',
      'client_lr',
      'server_lr',
      'client_weighting',
      'straggler_policy',
    ),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='drop'),
    hparams=(
      registry.HyperParameter(
        'momentum',
        0.9,
        help="The server optimizer's momentum β (Hsu et al. 2019).",
        minimum=0.0,
        symbol='β',
      ),
      registry.HyperParameter(
        'warmup_rounds',
        2,
        help='Rounds over which the server learning rate rises to its value.',
        minimum=0,
      ),
    ),
    metrics=dict(
      mean_update_norm="‖mean client update‖ (its aggregator's measurement)"
    ),
    callbacks=lambda settings: [
      ServerWarmup(
        settings.server_optimizer.learning_rate,
        settings.hparams['warmup_rounds'],
      )
    ],
  )
)
