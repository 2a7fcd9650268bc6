"""FedProx whose proximal weight decays every round: μ_t = μ · decay^t.

An algorithm of your own in one file: a registry entry (FedProx's builder
with a hyper-parameter of its own, declared once: its flag --mu_decay, its
check, its metrics.csv column and its header entry come from that) and a
round callback that sets μ in the process state between rounds and records
the μ each round used.

  python -m tff_algos --import=examples/fedprox_mu_decay.py \\
      --algo=fedprox_mu_decay --mu_decay=0.9 ...
"""

import numpy as np

from tff_algos.algorithms import callbacks
from tff_algos.algorithms import core
from tff_algos.algorithms import fedprox
from tff_algos.algorithms import registry


class DecayingMu(callbacks.RoundCallback):
  """After round t, sets the client work's μ for round t + 1 to
  μ · decay^(t+1); the row's `mu` is the μ round t used. Its state is the
  round's function: nothing to checkpoint."""

  writes = ('mu',)

  def __init__(self, mu, decay):
    self._mu, self._decay = mu, decay

  def after_round(self, end):
    end.row['mu'] = self._mu * self._decay ** max(end.round_num - 1, 0)
    hparams = end.process.get_hparams(end.state)
    hparams['client_work']['mu'] = np.float32(
      self._mu * self._decay**end.round_num
    )
    end.state = end.process.set_hparams(end.state, hparams)


MU_DECAY = registry.HyperParameter(
  'mu_decay',
  0.9,
  help='The factor μ is multiplied by after each round: μ_t = μ·decay^t.',
  minimum=0.0,
  column='the factor μ is multiplied by after each round',
  symbol='μ decay',
)


def _build(model_fn, settings, client_input):
  return fedprox.build_fed_prox(
    model_fn,
    mu=settings.hparams['mu'],
    **core.arguments(settings, client_input),
  )


registry.register(
  registry.Algorithm(
    name='fedprox_mu_decay',
    label='FedProx μ-decay',
    summary='FedProx whose μ decays by --mu_decay per round',
    paper='FedProx (Li et al. 2020) with an annealed proximal term',
    build=_build,
    uses=(
      'epochs',
      'batch_size',
      'client_lr',
      'server_lr',
      'client_weighting',
      'straggler_policy',
      # FedProx's builder takes the run's optimizers (`core.arguments`):
      # --client_optimizer, --server_optimizer and their parameters.
      'client_optimizer',
      'server_optimizer',
    ),
    defaults=dict(registry.LOCAL_SGD_DEFAULTS, straggler_policy='partial'),
    hparams=(core.MU, MU_DECAY),
    callbacks=lambda settings: [
      DecayingMu(settings.hparams['mu'], settings.hparams['mu_decay'])
    ],
  )
)
