"""The algorithms by name: what the CLI, run folders and plots know of each.

An algorithm is one module (one per paper) holding a typed builder and one
`register(Algorithm(...))` call; `tff_algos.algorithms` imports this
package's four. A module of your own registers the same way and is then an
`--algo` of `run_experiment.py` (tests/algorithms/test_registry.py adds
FedAvg with server momentum from its test file alone).

Imports no TensorFlow: `run_experiment.py --help` lists the algorithms and
configs are validated before anything heavy loads.
"""

import dataclasses
from typing import Any, Callable, Mapping, Sequence

# Run settings whose meaning or default depends on the algorithm. A Config
# leaves them None ("the algorithm's default"); `Config.resolved()` fills
# them in from the algorithm's entry.
ALGORITHM_FIELDS = ('epochs', 'batch_size', 'client_lr', 'server_lr', 'mu',
                    'adaptive_mu', 'straggler_policy', 'client_weighting')

# FedProx's settings for its synthetic data (Li et al. 2020, §5.2 and
# Appendix C.2), the default run: E = 20, B = 10, learning rate 0.01, and
# FedAvg's n_k-weighted mean with a server step of 1 (model averaging).
LOCAL_SGD_DEFAULTS = dict(epochs=20, batch_size=10, client_lr=0.01,
                          server_lr=1.0, client_weighting='num_examples')


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """One algorithm's entry.

  Attributes:
    name: its `--algo` value.
    label: its name in tables and plot legends.
    summary: one line for `--help`.
    paper: where it is defined (paper, algorithm or equation).
    build: `build(model_fn, config, client_input)` -> a
      `tff.learning.templates.LearningProcess`, given a resolved Config and
      a `tff_algos.learning` client input (simulation or production).
    hparams: the ALGORITHM_FIELDS it reads; giving it another one is an
      error.
    defaults: its values for those fields when a run does not give them
      (a value, or a function of the Config for a derived default).
    fixed: fields whose value the algorithm implies (FedSGD: E = 1, B = ∞;
      FedAvg: μ = 0); giving another value is an error.
    extra_hparams: hyper-parameters of its own (`--hparam NAME=VALUE`)
      with their defaults.
    describe: its legend entry for a run's resolved Config (default: the
      label and its extra hyper-parameters).
    round_metrics: columns of a round's row it derives from the others
      (FedISGD's VLG), or None.
    metrics: the columns it adds to metrics.csv, name → what it holds:
      the metrics its process reports (found by name in a round's
      metrics, e.g. metrics['client_work'][name]) and those `round_metrics`
      derives. They reach metrics.csv, TensorBoard, summary.json (their
      final values) and plots, described like the built-in columns.
    hooks: `hooks(resolved Config)` → the round-loop hooks of a run
      (`simulation.loop.Hook`: e.g. FedProx's adaptive μ), or None.
    client_optimizer: whether its clients run an optimizer (a
      `--client_optimizer`); FedSGD's compute a gradient.
    server_lr_schedule: the server learning rate's default schedule
      (`algorithms.optimizers`; FedISGD's η_g decays in steps).
  """
  name: str
  label: str
  summary: str
  paper: str
  build: Callable[..., Any]
  hparams: tuple[str, ...]
  defaults: Mapping[str, Any]
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  extra_hparams: Mapping[str, float] = dataclasses.field(default_factory=dict)
  describe: Callable[[Any], str] | None = None
  round_metrics: Callable[[dict], dict] | None = None
  metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
  hooks: Callable[[Any], Sequence[Any]] | None = None
  client_optimizer: bool = True
  server_lr_schedule: str = 'constant'

  def __post_init__(self):
    unknown = (set(self.hparams) | set(self.defaults) | set(self.fixed)) - set(
        ALGORITHM_FIELDS)
    if unknown:
      raise ValueError(f'{self.name}: {sorted(unknown)} are not settings an '
                       f'algorithm can own ({", ".join(ALGORITHM_FIELDS)}); '
                       'declare its own in extra_hparams')
    if set(self.hparams) & set(self.fixed):
      raise ValueError(f'{self.name}: a setting is either a hyper-parameter '
                       'or fixed')
    missing = set(self.hparams) - set(self.defaults)
    if missing:
      raise ValueError(f'{self.name}: no default for {sorted(missing)}')
    bad = [m for m in self.metrics if not m.isidentifier()]
    if bad:
      raise ValueError(f'{self.name}: metric names must be identifiers '
                       f'(letters, digits, _), got {bad}')

  def legend(self, config) -> str:
    """The line's name in a plot: label and hyper-parameters that vary."""
    if self.describe is not None:
      return self.describe(config)
    extras = ' '.join(f'{k}={v:g}' for k, v in (config.hparams or {}).items())
    return f'{self.label} {extras}'.strip()


_ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
  """Adds (or, under the same name, replaces) an algorithm; returns it."""
  _ALGORITHMS[algorithm.name] = algorithm
  return algorithm


def unregister(name: str) -> None:
  _ALGORITHMS.pop(name, None)


def get(name: str) -> Algorithm:
  """The algorithm `name`; ValueError naming the known ones otherwise."""
  if name not in _ALGORITHMS:
    raise ValueError(f'unknown algorithm {name!r}; choose from '
                     f'{", ".join(_ALGORITHMS)}')
  return _ALGORITHMS[name]


def names() -> tuple[str, ...]:
  return tuple(_ALGORITHMS)
