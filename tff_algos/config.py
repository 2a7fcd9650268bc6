"""The settings of one run, validated without importing TensorFlow."""

import dataclasses

from tff_algos.sampling import StragglerPolicy

ALGORITHMS = ('fedavg', 'fedsgd', 'fedprox', 'fedisgd')
# FedAvg drops stragglers; FedProx (and FedISGD) aggregate partial work.
DEFAULT_STRAGGLER_POLICY = dict(fedavg='drop', fedsgd='drop',
                                fedprox='partial', fedisgd='partial')


class ConfigError(ValueError):
  """An invalid combination of settings (reported as a usage error)."""


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything that defines a run; saved as config.json next to metrics."""
  algo: str = 'fedprox'
  task: str = 'synthetic_1_1'     # a name for tasks.load_task, or any
                                  # name when the caller passes the task
  rounds: int = 200
  clients_per_round: int = 10
  epochs: int = 20
  batch_size: int = 10              # -1: the whole local dataset (B = ∞)
  client_lr: float = 0.01
  server_lr: float | None = None    # None: 1 (FedAvg/FedProx), client_lr
                                    # (FedSGD's η), 1 (FedISGD's η_gi)
  mu: float = 1.0                   # FedProx μ / FedISGD λ
  adaptive_mu: bool = False
  straggler_fraction: float = 0.0
  straggler_policy: str | None = None  # None: the algorithm's own
  server_lr_decay: float = 1.0
  server_lr_decay_every: int = 1
  client_weighting: str | None = None  # None: num_examples; FedISGD uniform
  dissimilarity_every: int = 0
  eval_every: int = 1
  seed: int = 0
  data_seed: int = 0
  data_dir: str | None = None
  train_fraction: float | None = None  # None: the task's own split

  @property
  def policy(self):
    return StragglerPolicy(self.straggler_policy or
                           DEFAULT_STRAGGLER_POLICY[self.algo])

  @property
  def weighting(self):
    """'uniform' (FedISGD's 1/K mean) or 'num_examples' (n_k weights)."""
    return self.client_weighting or (
        'uniform' if self.algo == 'fedisgd' else 'num_examples')

  def validate(self, num_clients: int | None = None):
    """Raises ConfigError for values no run can use (before anything runs).

    With `num_clients` (the task's N), also checks K <= N.
    """
    checks = [
        (num_clients is None or self.clients_per_round <= num_clients,
         f'--clients_per_round={self.clients_per_round} is more than the '
         f'{num_clients} clients of {self.task}'),
        (self.algo in ALGORITHMS,
         f'unknown --algo={self.algo!r}; choose from {", ".join(ALGORITHMS)}'),
        (self.rounds >= 1, f'--rounds must be >= 1, got {self.rounds}'),
        (self.clients_per_round >= 1,
         f'--clients_per_round must be >= 1, got {self.clients_per_round}'),
        (self.epochs >= 1, f'--epochs must be >= 1, got {self.epochs}'),
        (self.batch_size == -1 or self.batch_size >= 1,
         f'--batch_size must be >= 1 or -1 (B = ∞), got {self.batch_size}'),
        (self.client_lr > 0, f'--client_lr must be > 0, got {self.client_lr}'),
        (self.server_lr is None or self.server_lr > 0,
         f'--server_lr must be > 0, got {self.server_lr}'),
        (self.mu >= 0, f'--mu must be >= 0, got {self.mu}'),
        (0 <= self.straggler_fraction <= 1,
         f'--straggler_fraction must be in [0, 1], '
         f'got {self.straggler_fraction}'),
        (self.straggler_policy in (None, 'drop', 'partial'),
         f'--straggler_policy must be drop or partial, '
         f'got {self.straggler_policy!r}'),
        (self.client_weighting in (None, 'uniform', 'num_examples'),
         f'--client_weighting must be uniform or num_examples, '
         f'got {self.client_weighting!r}'),
        (0 < self.server_lr_decay <= 1,
         f'--server_lr_decay must be in (0, 1], got {self.server_lr_decay}'),
        (self.server_lr_decay_every >= 1,
         '--server_lr_decay_every must be >= 1'),
        (self.eval_every >= 1, '--eval_every must be >= 1'),
        (self.train_fraction is None or 0 < self.train_fraction < 1,
         f'--train_fraction must be in (0, 1), got {self.train_fraction}'),
        (self.dissimilarity_every >= 0, '--dissimilarity_every must be >= 0'),
        (not self.adaptive_mu or self.algo == 'fedprox',
         '--adaptive_mu needs --algo=fedprox'),
        (self.algo != 'fedsgd' or (self.epochs, self.batch_size) == (1, -1),
         'fedsgd is defined by E=1, B=∞: use --epochs=1 --batch_size=-1'),
        (self.algo != 'fedsgd' or self.policy == StragglerPolicy.DROP,
         'fedsgd runs one gradient per client: only --straggler_policy=drop'),
    ]
    for ok, message in checks:
      if not ok:
        raise ConfigError(message)
