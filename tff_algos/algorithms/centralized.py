"""Centralized SGD: the baseline of FedAvg's Table 3 and Figure 9 (McMahan
et al. 2017, §3: "standard SGD training on the full training set (no user
partitioning), using minibatches of size 100").

The clients' training data are pooled into one dataset and trained with
minibatch SGD (B = 100 as the paper, or --batch_size). To share the round
loop, metrics.csv, plots and rounds to target with the federated
algorithms, a "round" is a block of `updates_per_round` minibatch updates
(fresh permutations of the pooled data); each is a round of communication
in the federated setting, so the summary also states the updates to the
target (rounds × updates_per_round), which is what Table 3 compares. As a
process it is FedAvg on the one pooled client (its update the whole
block's, the server's step of 1 taking it as it is: weight 1, so the mean
of one update is that update exactly). The client is sent only the
examples its block reads.
"""

import numpy as np

from tff_algos.algorithms import core
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import registry

UPDATES_PER_ROUND = registry.HyperParameter(
  'updates_per_round',
  100,
  help='The centralized baseline: minibatch updates in a "round" (a block '
  'of SGD steps on the pooled data).',
  minimum=1,
)


class Pooled(registry.ClientPlan):
  """One client of every client's training data, client after client; a
  round is a block of `updates_per_round` minibatch steps."""

  def header(self, num_clients, clients_per_round, settings):
    del clients_per_round  # One.
    return [
      f'{num_clients} clients pooled into one',
      f'B={settings.batch_size}',
    ]

  def training(self, ids, arrays):
    del ids
    pooled = {
      name: np.concatenate([a[name] for a in arrays]) for name in arrays[0]
    }
    return ['pooled'], [pooled]

  def steps_per_round(self, hparams):
    steps = hparams.get(UPDATES_PER_ROUND.name)
    return None if steps is None else int(steps)


ALGORITHM = registry.register(
  registry.Algorithm(
    name='centralized',
    label='SGD (centralized)',
    summary="minibatch SGD on all clients' data pooled (B = 100), a round "
    'a block of --updates_per_round updates: the baseline',
    paper='McMahan et al., AISTATS 2017, §3 (Table 3, Figure 9)',
    build=fedavg.ALGORITHM.build,  # FedAvg's process on the pooled client.
    # Its server step of 1 takes the block's update as it is: no server
    # optimizer of the run's.
    uses=('batch_size', 'client_lr', 'client_optimizer'),
    defaults=dict(
      batch_size=100, client_lr=registry.LOCAL_SGD_DEFAULTS['client_lr']
    ),
    hparams=(core.MU.fixed_at(0.0), UPDATES_PER_ROUND),
    fixed=dict(
      epochs=1,
      server_lr=1.0,
      straggler_policy='drop',
      client_weighting='uniform',
      # One client of all the data: no sampling, stragglers or aggregator.
      clients_per_round=1,
      straggler_fraction=0.0,
      client_sampling='uniform',
      aggregator='mean',
    ),
    describe=lambda settings: (
      f'SGD (centralized), {settings.hparams["updates_per_round"]:g} '
      'updates a round'
    ),
    clients=Pooled(),
  )
)
