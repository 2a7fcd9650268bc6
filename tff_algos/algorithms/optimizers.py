"""Client and server optimizers by name, with learning-rate schedules.

Every optimizer is one of `tff.learning.optimizers`; the settings of a run
name it and give its parameters (`--client_optimizer=adam
--client_beta2=0.99`, `--server_optimizer=fedyogi`). The default, `sgd`, is
the papers' plain SGD. Reddi et al. 2021's FedOpt family are server presets
(their Algorithm 2): `fedadam`, `fedyogi`, `fedadagrad` with β1 = 0.9,
β2 = 0.99, τ = ε = 10⁻³ and v₋₁ = τ² (Flower's FedOpt defaults; the paper
tunes τ and η per task, so tune them too), and a server learning rate of
10⁻² unless one is given (ours). A run's optimizer flags reach an algorithm
whose registry entry lists 'client_optimizer' / 'server_optimizer' in
`uses`; another refuses them (`registry.OPTIMIZER_FIELDS`).

Schedules (`--client_lr_schedule`, `--server_lr_schedule`) give the
learning rate of round t (t = 0 for the first step) from the initial η:
  constant      η
  step          η · decay^⌊t / decay_every⌋      (FedISGD's η_g, §2.2)
  inverse_time  η / (1 + decay · ⌊t / decay_every⌋)
The server's is TFF's `schedule_learning_rate` in the process; the
client's is set in the process state before each round
(`ClientLearningRateSchedule`, a round callback).

A run's optimizers are `OptimizerSettings`, resolved from its flags without
TensorFlow (`resolve`); `build` makes the TFF optimizer.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from typing import Any

import numpy as np

from tasks.validate import FLOAT32_MAX  # The optimizers run in float32.
from tff_algos.algorithms import callbacks

# Config field suffix → the TFF builder's argument.
PARAMETERS = {
  'momentum': 'momentum',
  'beta1': 'beta_1',
  'beta2': 'beta_2',
  'epsilon': 'epsilon',
}
SCHEDULES = ('constant', 'step', 'inverse_time')


@dataclasses.dataclass(frozen=True)
class Spec:
  """An optimizer: its `tff.learning.optimizers` builder, the defaults of
  the parameters a run may set, fixed extra arguments, and the learning
  rate it takes when a run gives none (None: the algorithm's)."""

  builder: str
  defaults: Mapping[str, float] = dataclasses.field(default_factory=dict)
  fixed: Mapping[str, float] = dataclasses.field(default_factory=dict)
  learning_rate: float | None = None


_TAU = 1e-3  # Reddi et al.'s adaptivity τ (ε), a value of their grid.
OPTIMIZERS = {
  'sgd': Spec('build_sgdm'),
  'sgdm': Spec('build_sgdm', {'momentum': 0.9}),
  'adam': Spec('build_adam', {'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-7}),
  'adagrad': Spec('build_adagrad', {'epsilon': 1e-7}),
  'yogi': Spec('build_yogi', {'beta1': 0.9, 'beta2': 0.999, 'epsilon': 1e-3}),
  'fedadam': Spec(
    'build_adam',
    {'beta1': 0.9, 'beta2': 0.99, 'epsilon': _TAU},
    learning_rate=1e-2,
  ),
  'fedyogi': Spec(
    'build_yogi',
    {'beta1': 0.9, 'beta2': 0.99, 'epsilon': _TAU},
    fixed={'initial_preconditioner_value': _TAU**2},
    learning_rate=1e-2,
  ),
  'fedadagrad': Spec(
    'build_adagrad',
    {'epsilon': _TAU},
    fixed={'initial_preconditioner_value': _TAU**2},
    learning_rate=1e-2,
  ),
}
CLIENT_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'adagrad', 'yogi')
SERVER_OPTIMIZERS = tuple(OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A learning-rate schedule (see the module docstring)."""

  kind: str = 'constant'
  decay: float | None = None  # None for a constant rate
  decay_every: int | None = None

  def rate(self, initial: float, t: int) -> float:
    """η(t) in Python (the client's schedule, set between rounds)."""
    if self.kind == 'constant':
      return initial
    return _rate(self.kind, initial, self.decay, t // self.decay_every)


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
  """One optimizer, fully resolved: its kind (a key of OPTIMIZERS), its
  learning rate, the parameters its kind takes (None for those it does
  not) and its learning-rate schedule."""

  kind: str
  learning_rate: float
  momentum: float | None = None
  beta1: float | None = None
  beta2: float | None = None
  epsilon: float | None = None
  schedule: Schedule = Schedule()

  def __post_init__(self):
    check(self)


def flag_names(role: str) -> tuple[str, ...]:
  """The flags (and flat config.json keys) of `role`'s ('client' or
  'server') optimizer and schedule, its learning rate aside."""
  return (
    f'{role}_optimizer',
    *(f'{role}_{p}' for p in PARAMETERS),
    f'{role}_lr_schedule',
    f'{role}_lr_decay',
    f'{role}_lr_decay_every',
  )


class SettingsError(ValueError):
  """Optimizer settings that do not fit together."""


def resolve(
  values: Mapping[str, Any],
  role: str,
  default_rate,
  default_schedule: str = 'constant',
) -> OptimizerSettings:
  """`role`'s optimizer from flat flag values (`flag_names(role)` and
  `{role}_lr`; None: not given), the kind's parameters with their defaults
  filled in, at the run's `{role}_lr`, else the kind's own documented rate
  (only the Fed* presets have one), else `default_rate` (the algorithm's).
  SettingsError for a parameter the kind does not take, a bad value, or no
  learning rate."""
  kind = values.get(f'{role}_optimizer') or 'sgd'
  choices = CLIENT_OPTIMIZERS if role == 'client' else SERVER_OPTIMIZERS
  if kind not in choices:
    raise SettingsError(
      f'--{role}_optimizer must be one of {", ".join(choices)}, got {kind!r}'
    )
  spec = OPTIMIZERS[kind]
  parameters = {}
  for parameter in PARAMETERS:
    name, given = f'{role}_{parameter}', values.get(f'{role}_{parameter}')
    if given is not None and parameter not in spec.defaults:
      raise SettingsError(
        f'--{name}: {kind} has no {parameter} (it takes '
        f'{", ".join(spec.defaults) or "no parameters"})'
      )
    parameters[parameter] = (
      given if given is not None else spec.defaults.get(parameter)
    )
  kind_of_schedule = values.get(f'{role}_lr_schedule') or default_schedule
  if kind_of_schedule not in SCHEDULES:
    raise SettingsError(
      f'--{role}_lr_schedule must be one of '
      f'{", ".join(SCHEDULES)}, got {kind_of_schedule!r}'
    )
  decay = values.get(f'{role}_lr_decay')
  every = values.get(f'{role}_lr_decay_every')
  if kind_of_schedule == 'constant':
    for name, given in (
      (f'{role}_lr_decay', decay),
      (f'{role}_lr_decay_every', every),
    ):
      if given is not None:
        raise SettingsError(
          f'--{name} needs --{role}_lr_schedule=step or inverse_time'
        )
    schedule = Schedule()
  else:
    schedule = Schedule(
      kind_of_schedule,
      1.0 if decay is None else decay,
      1 if every is None else every,
    )
  learning_rate = next(
    (
      rate
      for rate in (values.get(f'{role}_lr'), spec.learning_rate, default_rate)
      if rate is not None
    ),
    None,
  )
  try:
    return OptimizerSettings(
      kind, learning_rate, schedule=schedule, **parameters
    )
  except SettingsError as e:
    raise SettingsError(str(e).replace('--', f'--{role}_')) from None


def flags_of(settings: OptimizerSettings | None, role: str) -> dict:
  """`settings` as the flat flag values `resolve` takes (all None for an
  algorithm without that optimizer)."""
  if settings is None:
    return dict.fromkeys(flag_names(role))
  return {
    f'{role}_optimizer': settings.kind,
    **{f'{role}_{p}': getattr(settings, p) for p in PARAMETERS},
    f'{role}_lr_schedule': settings.schedule.kind,
    f'{role}_lr_decay': settings.schedule.decay,
    f'{role}_lr_decay_every': settings.schedule.decay_every,
  }


def check(settings: OptimizerSettings) -> None:
  """SettingsError for parameter values no optimizer can use (the flag
  named without its role: `resolve` adds it)."""
  if settings.learning_rate is None or not (
    0 <= settings.learning_rate < FLOAT32_MAX
  ):
    raise SettingsError(
      f'--lr must be a number >= 0 (below 3.4e38, '
      f"float32's largest), got {settings.learning_rate}"
    )
  for parameter in ('beta1', 'beta2', 'momentum'):
    value = getattr(settings, parameter)
    if value is not None and not 0 <= value < 1:
      raise SettingsError(f'--{parameter} must be in [0, 1), got {value}')
  if settings.epsilon is not None and not 0 < settings.epsilon < FLOAT32_MAX:
    raise SettingsError(
      f'--epsilon must be a positive number, got {settings.epsilon}'
    )
  schedule = settings.schedule
  if schedule.kind not in SCHEDULES:
    raise SettingsError(
      f'--lr_schedule must be one of {", ".join(SCHEDULES)}'
      f', got {schedule.kind!r}'
    )
  if schedule.decay is not None and not 0 < schedule.decay < FLOAT32_MAX:
    raise SettingsError(
      f'--lr_decay must be a positive number, got {schedule.decay}'
    )
  if (
    schedule.kind == 'step'
    and schedule.decay is not None
    and (schedule.decay > 1)
  ):
    raise SettingsError(
      f'--lr_decay must be in (0, 1] for a step schedule, got {schedule.decay}'
    )
  if schedule.decay_every is not None and not (
    isinstance(schedule.decay_every, int) and schedule.decay_every >= 1
  ):
    raise SettingsError(
      f'--lr_decay_every must be an integer >= 1, got {schedule.decay_every!r}'
    )


def _rate(kind: str, initial, decay, steps):
  """η after `steps` decays (a Python number or a float32 tensor)."""
  if kind == 'step':
    return initial * decay**steps
  return initial / (1.0 + decay * steps)


def schedule_fn(
  kind: str, initial: float, decay: float | None, decay_every: int | None
):
  """η(t) as a TF function of the step t (see the module docstring)."""
  import tensorflow as tf

  def schedule(t):
    steps = tf.cast(
      tf.math.floordiv(tf.cast(t, tf.int32), decay_every), tf.float32
    )
    return _rate(kind, initial, tf.constant(decay, tf.float32), steps)

  return schedule


def build(
  settings: OptimizerSettings, scale: float = 1.0, server: bool = False
):
  """The `tff.learning.optimizers.Optimizer` of `settings`, at its
  learning rate times `scale` (e.g. FedISGD's λ; 0 allowed); with `server`,
  its schedule is TFF's `schedule_learning_rate` in the process (a client
  schedule is set between rounds, `ClientLearningRateSchedule`)."""
  import tensorflow_federated as tff

  spec = OPTIMIZERS[settings.kind]
  arguments = {PARAMETERS[p]: getattr(settings, p) for p in spec.defaults}
  arguments.update(spec.fixed)
  builder = getattr(tff.learning.optimizers, spec.builder)
  optimizer = builder(settings.learning_rate * scale, **arguments)
  schedule = settings.schedule
  if server and schedule.kind != 'constant':
    rate = schedule_fn(
      schedule.kind,
      settings.learning_rate,
      schedule.decay,
      schedule.decay_every,
    )
    optimizer = tff.learning.optimizers.schedule_learning_rate(
      optimizer, lambda t: scale * rate(t)
    )
  return optimizer


def describe(
  role: str, settings: OptimizerSettings, built: Mapping[str, Any] | None = None
) -> str:
  """`role`'s optimizer in a run's header: its kind, learning rate and
  schedule, or, where the optimizer hyper-parameters among the built
  process's of that role (`built`: `process.get_hparams(state)[...]`; a
  client work's own, such as μ, are not an optimizer's) show another
  optimizer than `settings` make (an algorithm that builds its own), those
  hyper-parameters, said to be the algorithm's."""
  schedule = settings.schedule
  words = f'{role} {settings.kind} η={settings.learning_rate:g}' + (
    ''
    if schedule.kind == 'constant'
    else f' {schedule.kind} ×{schedule.decay:g}/{schedule.decay_every}'
  )
  found = {
    k: float(v)
    for k, v in (built or {}).items()
    if k in ('learning_rate', *PARAMETERS.values())
  }
  if not found:  # Nothing to compare (e.g. a scheduled server rate).
    return words
  spec = OPTIMIZERS[settings.kind]
  expected = {PARAMETERS[p]: getattr(settings, p) for p in spec.defaults}
  if set(found) == {'learning_rate', *expected} and all(
    np.isclose(found[k], v, rtol=1e-6) for k, v in expected.items()
  ):
    return words
  return (
    f'{role} optimizer as the algorithm built it ('
    + ', '.join(f'{k}={v:g}' for k, v in found.items())
    + ')'
  )


class ClientLearningRateSchedule(callbacks.RoundCallback):
  """Sets the client optimizer's learning rate of round t + 1 (in the
  process state) after round t, by the run's client schedule. Stateless:
  the rate is a function of the round."""

  def __init__(self, settings: OptimizerSettings):
    self._settings = settings

  def after_round(self, end):
    hparams = end.process.get_hparams(end.state)
    hparams['client_work']['learning_rate'] = np.float32(
      self._settings.schedule.rate(self._settings.learning_rate, end.round_num)
    )
    end.state = end.process.set_hparams(end.state, hparams)
