"""The settings of one simulated run, validated without importing TensorFlow."""

import dataclasses
import json
import types
import typing
from typing import Any

from tasks import partitions
from tasks.validate import FLOAT32_MAX  # Rates and weights run in float32.
from tff_algos.algorithms import optimizers
from tff_algos.algorithms import registry
from tff_algos.simulation.sampling import StragglerPolicy

MAX_SEED = 2**32 - 1  # numpy's seeds are unsigned 32-bit.


def _of_type(value, hint) -> bool:
  """Whether a JSON value fits a field's annotation (int, float, str, bool,
  their `| None`, dict[str, float], tuple[str, ...])."""
  origin, args = typing.get_origin(hint), typing.get_args(hint)
  if origin in (types.UnionType, typing.Union):
    return any(_of_type(value, a) for a in args)
  if hint is type(None):
    return value is None
  if hint is bool:
    return isinstance(value, bool)
  if hint is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if hint is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if hint is str:
    return isinstance(value, str)
  if origin is dict:
    return isinstance(value, dict) and all(
        isinstance(k, str) and _of_type(v, args[1]) for k, v in value.items())
  if origin is tuple:
    return isinstance(value, (list, tuple)) and all(
        _of_type(v, args[0]) for v in value)
  return True


class ConfigError(ValueError):
  """An invalid combination of settings (reported as a usage error)."""


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything that defines a run; saved, resolved, as config.json.

  The settings of `registry.ALGORITHM_FIELDS` default to None, "the
  algorithm's own" (its registry entry); `resolved()` fills them in.
  """
  algo: str = 'fedprox'
  task: str = 'synthetic_1_1'     # a name for tasks.load_task, or any
                                  # name when the caller passes the task
  rounds: int = 200
  clients_per_round: int | None = 10  # None: from --client_fraction, set
                                      # once the task's clients are known
  straggler_fraction: float = 0.0
  # The algorithm's settings (None: its default, see `resolved`).
  epochs: int | None = None
  batch_size: int | None = None     # -1: the whole local dataset (B = ∞)
  client_lr: float | None = None
  server_lr: float | None = None    # FedSGD's η; FedISGD's η_gi
  mu: float | None = None           # FedProx μ / FedISGD λ
  adaptive_mu: bool | None = None
  straggler_policy: str | None = None  # 'drop' or 'partial'
  client_weighting: str | None = None  # 'num_examples' or 'uniform'
  hparams: dict[str, float] = dataclasses.field(default_factory=dict)
  # Optimizers (algorithms.optimizers; None: the default, plain SGD at a
  # constant rate; the parameters of the optimizer chosen).
  client_optimizer: str | None = None
  client_momentum: float | None = None
  client_beta1: float | None = None
  client_beta2: float | None = None
  client_epsilon: float | None = None
  client_lr_schedule: str | None = None
  client_lr_decay: float | None = None
  client_lr_decay_every: int | None = None
  server_optimizer: str | None = None
  server_momentum: float | None = None
  server_beta1: float | None = None
  server_beta2: float | None = None
  server_epsilon: float | None = None
  server_lr_schedule: str | None = None  # FedISGD's default: step
  server_lr_decay: float | None = None
  server_lr_decay_every: int | None = None
  # Measurements.
  update_spread: bool = False       # (1/K)Σ‖u_k − ū‖² for any algorithm
  dissimilarity_every: int = 0
  eval_every: int = 1
  eval_clients: int | None = None   # None: the training metrics over all
                                    # clients; N: over a fixed seeded subset
  stop_at_accuracy: float | None = None  # Stop once test accuracy reaches it
  # Randomness and data.
  seed: int = 0
  data_seed: int = 0
  data_dir: str | None = None
  train_fraction: float | None = None  # None: the task's own split
  partition: str | None = None  # e.g. 'dirichlet:0.5' (None: the task's)
  imports: tuple[str, ...] = ()  # modules registering the task/algorithm

  @property
  def algorithm(self) -> registry.Algorithm:
    return registry.get(self.algo)

  @property
  def policy(self) -> StragglerPolicy:
    return StragglerPolicy(self.resolved().straggler_policy)

  @property
  def effective_mu(self) -> float:
    """μ of the local objective (0 for algorithms without one)."""
    return self.resolved().mu or 0.0

  def resolved(self) -> 'Config':
    """This config with the algorithm's settings filled in: its fixed
    values, the values given, its defaults for the rest, and None for the
    settings it does not use (their values do not matter to the run).
    ConfigError for optimizer settings that do not fit together."""
    algorithm = self.algorithm
    given = dataclasses.asdict(self)
    try:
      values = {
          **optimizers.resolve(given, 'client', algorithm.client_optimizer),
          **optimizers.resolve(given, 'server', True,
                               algorithm.server_lr_schedule)}
    except optimizers.SettingsError as e:
      raise ConfigError(str(e)) from None
    if self.server_lr is None and optimizers.default_learning_rate(
        values, 'server') is not None and 'server_lr' in algorithm.hparams:
      values['server_lr'] = optimizers.default_learning_rate(values,
                                                              'server')
    for name in registry.ALGORITHM_FIELDS:
      if name in algorithm.fixed:
        values[name] = algorithm.fixed[name]
      elif name in algorithm.hparams:
        if name not in values:
          value = getattr(self, name)
          values[name] = value if value is not None else algorithm.defaults[
              name]
      else:
        values[name] = None
    hparams = {**algorithm.extra_hparams, **self.hparams}
    config = dataclasses.replace(self, hparams=hparams, **{
        k: v for k, v in values.items() if not callable(v)})
    return dataclasses.replace(config, **{
        k: v(config) for k, v in values.items() if callable(v)})

  def to_json(self) -> dict[str, Any]:
    """The resolved settings as config.json holds them."""
    return json.loads(json.dumps(dataclasses.asdict(self.resolved())))

  @classmethod
  def from_json(cls, values: dict[str, Any]) -> 'Config':
    """A Config from config.json (settings it lacks take their defaults);
    ConfigError for settings this version does not know or values of the
    wrong type (checked against the fields' annotations, in one place)."""
    if not isinstance(values, dict):
      raise ConfigError(f'expected an object of settings, got '
                        f'{type(values).__name__}')
    unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
      raise ConfigError(f'unknown settings {sorted(unknown)}')
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
      if not _of_type(value, hints[name]):
        raise ConfigError(f'{name} = {value!r} is not a {hints[name]}')
    if 'imports' in values:
      values = dict(values, imports=tuple(values['imports']))
    return cls(**values)

  def validate(self, num_clients: int | None = None):
    """Raises ConfigError for values no run can use (before anything runs).

    With `num_clients` (the task's N), also checks K <= N.
    """
    try:
      algorithm = self.algorithm
    except ValueError as e:
      raise ConfigError(f'--algo: {e}') from None
    for name in registry.ALGORITHM_FIELDS:
      value = getattr(self, name)
      if value is None:
        continue
      if name in algorithm.fixed and value != algorithm.fixed[name]:
        raise ConfigError(
            f'--{name}={value}: {self.algo} has {name}='
            f'{algorithm.fixed[name]} ({algorithm.paper})')
      if name not in algorithm.fixed and name not in algorithm.hparams:
        raise ConfigError(f'--{name} is not a {self.algo} hyper-parameter '
                          f'(it has {", ".join(algorithm.hparams)})')
    unknown = set(self.hparams) - set(algorithm.extra_hparams)
    if unknown:
      raise ConfigError(
          f'--hparam {", ".join(sorted(unknown))}: {self.algo} has '
          + (f'only {", ".join(algorithm.extra_hparams)}'
             if algorithm.extra_hparams else 'no hyper-parameters of its own'))
    c = self.resolved()
    try:
      for role in ('client', 'server'):
        optimizers.check(dataclasses.asdict(c), role)
      partitions.parse(self.partition)
    except ValueError as e:
      raise ConfigError(str(e)) from None
    k = self.clients_per_round
    checks = [
        (num_clients is None or k is None or k <= num_clients,
         f'--clients_per_round={k} is more than the {num_clients} clients '
         f'of {self.task}'),
        (self.rounds >= 1, f'--rounds must be >= 1, got {self.rounds}'),
        (k is None or k >= 1, f'--clients_per_round must be >= 1, got {k}'),
        (c.epochs is None or c.epochs >= 1,
         f'--epochs must be >= 1, got {c.epochs}'),
        (c.batch_size is None or c.batch_size == -1 or c.batch_size >= 1,
         f'--batch_size must be >= 1 or -1 (B = ∞), got {c.batch_size}'),
        (c.client_lr is None or 0 < c.client_lr < FLOAT32_MAX,
         f'--client_lr must be a positive number (below 3.4e38, float32\'s '
         f'largest), got {c.client_lr}'),
        (c.server_lr is None or 0 < c.server_lr < FLOAT32_MAX,
         f'--server_lr must be a positive number (below 3.4e38, float32\'s '
         f'largest), got {c.server_lr}'),
        (c.mu is None or 0 <= c.mu < FLOAT32_MAX,
         f'--mu must be a number >= 0 (below 3.4e38, float32\'s largest), '
         f'got {c.mu}'),
        (all(abs(v) < FLOAT32_MAX for v in self.hparams.values()),
         f'--hparam values must be numbers (finite in float32), got '
         f'{self.hparams}'),
        (0 <= self.straggler_fraction <= 1,
         f'--straggler_fraction must be in [0, 1], '
         f'got {self.straggler_fraction}'),
        (c.straggler_policy in (None, 'drop', 'partial'),
         f'--straggler_policy must be drop or partial, '
         f'got {c.straggler_policy!r}'),
        (c.client_weighting in (None, 'uniform', 'num_examples'),
         f'--client_weighting must be uniform or num_examples, '
         f'got {c.client_weighting!r}'),
        (self.eval_every >= 1, '--eval_every must be >= 1'),
        (self.eval_clients is None or self.eval_clients >= 1,
         f'--eval_clients must be >= 1, got {self.eval_clients}'),
        (self.eval_clients is None or num_clients is None or
         self.eval_clients <= num_clients,
         f'--eval_clients={self.eval_clients} is more than the '
         f'{num_clients} clients of {self.task}'),
        (self.train_fraction is None or 0 < self.train_fraction < 1,
         f'--train_fraction must be in (0, 1), got {self.train_fraction}'),
        (self.dissimilarity_every >= 0, '--dissimilarity_every must be >= 0'),
        (self.stop_at_accuracy is None or 0 < self.stop_at_accuracy <= 1,
         f'--stop_at_target needs a --target_accuracy in (0, 1], got '
         f'{self.stop_at_accuracy}'),
        (0 <= self.seed <= MAX_SEED,
         f'--seed must be in 0..{MAX_SEED}, got {self.seed}'),
        (0 <= self.data_seed <= MAX_SEED,
         f'--data_seed must be in 0..{MAX_SEED}, got {self.data_seed}'),
    ]
    for ok, message in checks:
      if not ok:
        raise ConfigError(message)
