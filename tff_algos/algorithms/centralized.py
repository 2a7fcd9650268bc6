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

from tff_algos.algorithms import core
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import registry

UPDATES_PER_ROUND = registry.HyperParameter(
  registry.POOLED_STEPS,
  100,
  help='The centralized baseline: minibatch updates in a "round" (a block '
  'of SGD steps on the pooled data).',
  minimum=1,
)

ALGORITHM = registry.register(
  registry.Algorithm(
    name='centralized',
    label='SGD (centralized)',
    summary="minibatch SGD on all clients' data pooled (B = 100), a round "
    'a block of --updates_per_round updates: the baseline',
    paper='McMahan et al., AISTATS 2017, §3 (Table 3, Figure 9)',
    build=fedavg.ALGORITHM.build,  # FedAvg's process on the pooled client.
    uses=('batch_size', 'client_lr'),
    defaults=dict(
      batch_size=100, client_lr=registry.LOCAL_SGD_DEFAULTS['client_lr']
    ),
    hparams=(core.MU.fixed_at(0.0), UPDATES_PER_ROUND),
    fixed=dict(
      epochs=1,
      server_lr=1.0,
      straggler_policy='drop',
      client_weighting='uniform',
    ),
    describe=lambda settings: (
      f'SGD (centralized), {settings.hparams["updates_per_round"]:g} '
      'updates a round'
    ),
    pooled=True,
  )
)
