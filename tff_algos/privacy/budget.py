"""The noise budget of TFF's adaptive clipping, the argument checks it
shares, and which neighbouring datasets each sampling scheme's ε is for:
no TensorFlow (nor dp_accounting), so that the DP aggregator
(`privacy.mechanisms`), the accountant (`privacy.accounting`) and the DP
settings' resolution (`simulation.config`) agree on them.
"""

import math
import numbers

# TFF's default stddev of the clipped-count noise, per expected client
# (`DifferentiallyPrivateFactory.gaussian_adaptive`: 0.05·clients_per_round).
CLIPPED_COUNT_STDDEV_PER_CLIENT = 0.05
# TFF's adaptive clipping targets the median update norm by default.
TARGET_UNCLIPPED_QUANTILE = 0.5

# The neighbouring relation each client-sampling scheme's guarantee holds
# for (None: none is certified), as config.json and the docs state it.
REPLACE_ONE, ADD_OR_REMOVE_ONE = 'replace-one', 'add-or-remove-one'
ADJACENCY = {
  'uniform': REPLACE_ONE,
  'poisson': ADD_OR_REMOVE_ONE,
  'proportional': None,
}


def adaptive_noise_multipliers(
  noise_multiplier: float,
  clients_per_round: float,
  clipped_count_stddev: float | None = None,
) -> tuple[float, float]:
  """TFF's split of adaptive clipping's budget: (value noise multiplier z_v,
  clipped-count stddev σ_b), as `gaussian_adaptive(noise_multiplier,
  clients_per_round, clipped_count_stddev=...)` computes them.

  σ_b defaults to 0.05·clients_per_round; z_v = (z⁻² − (2σ_b)⁻²)^(−1/2), so
  that 1/z_v² + 1/(2σ_b)² = 1/z². z = 0 gives (0, 0) (TFF: no noise).

  Raises:
    ValueError: z ≥ 2σ_b (TFF refuses it: the count alone would need more
      than the whole budget), or a negative or non-finite argument.
  """
  z = nonnegative(noise_multiplier, 'noise_multiplier')
  clients = positive(clients_per_round, 'clients_per_round')
  if clipped_count_stddev is not None:
    clipped_count_stddev = nonnegative(
      clipped_count_stddev, 'clipped_count_stddev'
    )
  if z == 0:
    return 0.0, (0.0 if clipped_count_stddev is None else clipped_count_stddev)
  if clipped_count_stddev is None:
    clipped_count_stddev = CLIPPED_COUNT_STDDEV_PER_CLIENT * clients
  if z >= 2 * clipped_count_stddev:
    raise ValueError(
      f'noise_multiplier {z} needs clipped_count_stddev > {z / 2} '
      f'(adaptive clipping spends 1/(2·{clipped_count_stddev})² of the '
      'budget 1/z² on the clipped count; TFF refuses this too): raise '
      'clipped_count_stddev or the cohort, or lower noise_multiplier'
    )
  return (
    z**-2 - (2 * clipped_count_stddev) ** -2
  ) ** -0.5, clipped_count_stddev


def real(value, name):
  """`value` as a float; ValueError unless a finite number."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f'{name} must be a number, got {value!r}')
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'{name} must be finite, got {value}')
  return value


def nonnegative(value, name):
  value = real(value, name)
  if value < 0:
    raise ValueError(f'{name} must be >= 0, got {value}')
  return value


def positive(value, name):
  value = real(value, name)
  if value <= 0:
    raise ValueError(f'{name} must be > 0, got {value}')
  return value
