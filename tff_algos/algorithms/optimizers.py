"""Client and server optimizers by name, with learning-rate schedules.

Every optimizer is one of `tff.learning.optimizers`; the settings of a run
name it and give its parameters (`--client_optimizer=adam
--client_beta2=0.99`, `--server_optimizer=fedyogi`). The default, `sgd`, is
the papers' plain SGD. Reddi et al. 2021's FedOpt family are server presets
(their Algorithm 2): `fedadam`, `fedyogi`, `fedadagrad` with β1 = 0.9,
β2 = 0.99, τ = ε = 10⁻³ and v₋₁ = τ² (Flower's FedOpt defaults; the paper
tunes τ and η per task, so tune them too), and a server learning rate of
10⁻² unless one is given (ours).

Schedules (`--client_lr_schedule`, `--server_lr_schedule`) give the
learning rate of round t (t = 0 for the first step) from the initial η:
  constant      η
  step          η · decay^⌊t / decay_every⌋      (FedISGD's η_g, §2.2)
  inverse_time  η / (1 + decay · ⌊t / decay_every⌋)
The server's is TFF's `schedule_learning_rate` in the process; the
client's is set in the process state before each round
(`ClientLearningRateSchedule`, a hook of the round loop).

Settings resolve without TensorFlow (`resolve`); `build` makes the
optimizer.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Mapping

from tasks.validate import FLOAT32_MAX  # The optimizers run in float32.
from tff_algos import lazy

np = lazy.module('numpy')
tf = lazy.module('tensorflow')
tff = lazy.module('tensorflow_federated')

# Config field suffix → the TFF builder's argument.
PARAMETERS = {'momentum': 'momentum', 'beta1': 'beta_1', 'beta2': 'beta_2',
              'epsilon': 'epsilon'}
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
    'adam': Spec('build_adam', {'beta1': 0.9, 'beta2': 0.999,
                                'epsilon': 1e-7}),
    'adagrad': Spec('build_adagrad', {'epsilon': 1e-7}),
    'yogi': Spec('build_yogi', {'beta1': 0.9, 'beta2': 0.999,
                                'epsilon': 1e-3}),
    'fedadam': Spec('build_adam', {'beta1': 0.9, 'beta2': 0.99,
                                   'epsilon': _TAU}, learning_rate=1e-2),
    'fedyogi': Spec('build_yogi', {'beta1': 0.9, 'beta2': 0.99,
                                   'epsilon': _TAU},
                    fixed={'initial_preconditioner_value': _TAU**2},
                    learning_rate=1e-2),
    'fedadagrad': Spec('build_adagrad', {'epsilon': _TAU},
                       fixed={'initial_preconditioner_value': _TAU**2},
                       learning_rate=1e-2),
}
CLIENT_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'adagrad', 'yogi')
SERVER_OPTIMIZERS = tuple(OPTIMIZERS)


def fields(role: str) -> tuple[str, ...]:
  """The Config fields of `role`'s ('client' or 'server') optimizer and
  schedule (the learning rate aside)."""
  return (f'{role}_optimizer', *(f'{role}_{p}' for p in PARAMETERS),
          f'{role}_lr_schedule', f'{role}_lr_decay', f'{role}_lr_decay_every')


class SettingsError(ValueError):
  """Optimizer settings that do not fit together."""


def resolve(values: Mapping[str, Any], role: str, used: bool,
            default_schedule: str = 'constant') -> dict[str, Any]:
  """`role`'s optimizer fields with defaults filled in: the optimizer's
  parameters (None for those it does not take), the schedule and its
  decay (None for a constant rate). All None when the algorithm has no
  such optimizer (`used` False). SettingsError for a parameter the
  optimizer does not take, or one given for an unused optimizer."""
  names = fields(role)
  if not used:
    given = [n for n in names if values.get(n) is not None]
    if given:
      raise SettingsError(f'--{given[0]}: the algorithm has no {role} '
                          'optimizer')
    return dict.fromkeys(names)
  kind = values.get(f'{role}_optimizer') or 'sgd'
  choices = CLIENT_OPTIMIZERS if role == 'client' else SERVER_OPTIMIZERS
  if kind not in choices:
    raise SettingsError(f'--{role}_optimizer must be one of '
                        f'{", ".join(choices)}, got {kind!r}')
  spec = OPTIMIZERS[kind]
  resolved = {f'{role}_optimizer': kind}
  for parameter in PARAMETERS:
    name, given = f'{role}_{parameter}', values.get(f'{role}_{parameter}')
    if given is not None and parameter not in spec.defaults:
      raise SettingsError(f'--{name}: {kind} has no {parameter} (it takes '
                          f'{", ".join(spec.defaults) or "no parameters"})')
    resolved[name] = (given if given is not None else
                      spec.defaults.get(parameter))
  schedule = values.get(f'{role}_lr_schedule') or default_schedule
  if schedule not in SCHEDULES:
    raise SettingsError(f'--{role}_lr_schedule must be one of '
                        f'{", ".join(SCHEDULES)}, got {schedule!r}')
  resolved[f'{role}_lr_schedule'] = schedule
  for name, default in ((f'{role}_lr_decay', 1.0),
                        (f'{role}_lr_decay_every', 1)):
    given = values.get(name)
    if schedule == 'constant':
      if given is not None:
        raise SettingsError(f'--{name} needs --{role}_lr_schedule=step or '
                            'inverse_time')
      resolved[name] = None
    else:
      resolved[name] = given if given is not None else default
  return resolved


def check(values: Mapping[str, Any], role: str) -> None:
  """SettingsError for parameter values no optimizer can use."""
  for parameter in ('beta1', 'beta2', 'momentum'):
    value = values.get(f'{role}_{parameter}')
    if value is not None and not 0 <= value < 1:
      raise SettingsError(f'--{role}_{parameter} must be in [0, 1), got '
                          f'{value}')
  epsilon = values.get(f'{role}_epsilon')
  if epsilon is not None and not 0 < epsilon < FLOAT32_MAX:
    raise SettingsError(f'--{role}_epsilon must be a positive number, got '
                        f'{epsilon}')
  decay = values.get(f'{role}_lr_decay')
  if decay is not None and not 0 < decay < FLOAT32_MAX:
    raise SettingsError(f'--{role}_lr_decay must be a positive number, got '
                        f'{decay}')
  if values.get(f'{role}_lr_schedule') == 'step' and decay is not None and (
      decay > 1):
    raise SettingsError(f'--{role}_lr_decay must be in (0, 1] for a step '
                        f'schedule, got {decay}')
  every = values.get(f'{role}_lr_decay_every')
  if every is not None and every < 1:
    raise SettingsError(f'--{role}_lr_decay_every must be >= 1, got {every}')


def default_learning_rate(values: Mapping[str, Any], role: str):
  """The learning rate the optimizer takes when a run gives none."""
  return OPTIMIZERS[values.get(f'{role}_optimizer') or 'sgd'].learning_rate


def _rate(kind: str, initial, decay, steps):
  """η after `steps` decays (a Python number or a float32 tensor)."""
  if kind == 'step':
    return initial * decay**steps
  return initial / (1.0 + decay * steps)


def schedule_fn(kind: str, initial: float, decay: float | None,
                decay_every: int | None):
  """η(t) as a TF function of the step t (see the module docstring)."""

  def schedule(t):
    steps = tf.cast(tf.math.floordiv(tf.cast(t, tf.int32), decay_every),
                    tf.float32)
    return _rate(kind, initial, tf.constant(decay, tf.float32), steps)

  return schedule


def learning_rate(kind: str, initial: float, decay, decay_every, t: int):
  """η(t) in Python (the client's schedule, set between rounds)."""
  if kind == 'constant':
    return initial
  return _rate(kind, initial, decay, t // decay_every)


def build(settings, role: str, learning_rate: float, scale: float = 1.0):
  """The `tff.learning.optimizers.Optimizer` of resolved `settings` (a
  resolved Config, or any object with its optimizer fields) for `role`,
  at `learning_rate` (times `scale`, e.g. FedISGD's λ; 0 allowed), with the
  server's schedule for role 'server' (the client's is applied between
  rounds)."""
  def setting(name):
    return getattr(settings, f'{role}_{name}')

  spec = OPTIMIZERS[setting('optimizer')]
  arguments = {PARAMETERS[p]: setting(p) for p in spec.defaults}
  arguments.update(spec.fixed)
  builder = getattr(tff.learning.optimizers, spec.builder)
  optimizer = builder(learning_rate * scale, **arguments)
  kind = setting('lr_schedule')
  if role == 'server' and kind != 'constant':
    rate = schedule_fn(kind, learning_rate, setting('lr_decay'),
                       setting('lr_decay_every'))
    optimizer = tff.learning.optimizers.schedule_learning_rate(
        optimizer, lambda t: scale * rate(t))
  return optimizer


class ClientLearningRateSchedule:
  """A round-loop hook: sets the client optimizer's learning rate of round
  t + 1 (in the process state) after round t, by the run's client
  schedule. Stateless: the rate is a function of the round."""
  name = 'client_lr_schedule'

  def __init__(self, settings):
    self._settings = settings  # A resolved Config.

  def state(self):
    return collections.OrderedDict()

  def restore(self, state):
    del state

  def after_round(self, round_num, row, process, state):
    del row
    s = self._settings
    hparams = process.get_hparams(state)
    hparams['client_work']['learning_rate'] = np.float32(learning_rate(
        s.client_lr_schedule, s.client_lr, s.client_lr_decay,
        s.client_lr_decay_every, round_num))
    return process.set_hparams(state, hparams)
