"""A simulation's DP flags (`--aggregator=dp` and the `--dp_*` flags),
checked and resolved: δ 0.1/N unless given, the RDP accountant unless
--dp_accountant, adaptive clipping at the median unless --dp_clip, and the
neighbouring relation the run's ε is under (`budget.ADJACENCY`).

A pure function over plain values (`resolve`), so that the run's settings
(`simulation.config`, which checks --aggregator and --client_sampling
themselves and reports the ValueError as its ConfigError) and anything
else that takes these flags resolve them alike. Imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from typing import Any

from tff_algos.privacy import budget

# The DP flags: given without --aggregator=dp, each is an error.
DP_FLAGS = (
  'dp_noise_multiplier',
  'dp_clip',
  'dp_target_quantile',
  'dp_noise_cohort',
  'dp_initial_clip',
  'dp_noise_seed',
  'dp_delta',
  'dp_accountant',
)
# What `resolve` returns: the DP flags and the relation the ε is under.
RESOLVED = DP_FLAGS + ('dp_adjacency',)
# float32's largest value (noise and clips run in float32):
# float(numpy.finfo(numpy.float32).max), as `tasks.validate.FLOAT32_MAX`.
FLOAT32_MAX = (2 - 2**-23) * 2**127


@dataclasses.dataclass(frozen=True)
class DpSettings:
  """A DP run's privacy settings, resolved (`resolve`): what its
  accountant and its header take (the aggregator takes its own,
  `algorithms.aggregators.AggregatorSettings`).

  Attributes:
    noise_multiplier: z, the noise's standard deviation over the clip.
    clip: the fixed clip norm C; None: adaptive clipping.
    target_quantile: adaptive clipping's target quantile (None: fixed).
    noise_cohort: M >= K: noise as for M clients (None: as for K).
    initial_clip: adaptive clipping's first clip (None: TFF's default).
    noise_seed: the noise's seed (None: the run's --seed).
    delta: δ of the ε reported.
    accountant: 'rdp' or 'pld'.
    adjacency: the neighbouring relation the ε is under.
  """

  noise_multiplier: float
  clip: float | None
  target_quantile: float | None
  noise_cohort: int | None
  initial_clip: float | None
  noise_seed: int | None
  delta: float | None  # None: not known until the task's N is
  accountant: str
  adjacency: str | None

  @classmethod
  def of(cls, resolved: Mapping[str, Any]) -> DpSettings | None:
    """The settings of `resolve`'s values; None for a run without DP."""
    if resolved['dp_noise_multiplier'] is None:
      return None
    return cls(**{name[len('dp_') :]: resolved[name] for name in RESOLVED})

  @property
  def adaptive_clipping(self) -> bool:
    return self.clip is None


def resolve(
  values: Mapping[str, Any], num_clients: int | None, *, max_seed: int
) -> dict[str, Any]:
  """The DP flags of `values` resolved (δ 0.1/N by default, RDP, adaptive
  clipping at the median unless --dp_clip, the adjacency ε is under): a
  dict of `RESOLVED`, all None unless `values['aggregator']` is 'dp'.

  Args:
    values: the run's flags by name: 'aggregator', 'client_sampling' (one
      of `budget.ADJACENCY`), 'clients_per_round' (None: not known yet),
      'task' (named in a message) and the `DP_FLAGS` (absent: None).
    num_clients: the task's N, or None (not known yet: no default δ and
      no check of the noise cohort against N).
    max_seed: the largest seed a run takes (--dp_noise_seed's range).

  Raises:
    ValueError: for values no run can use, its message naming the flag.
  """
  dp = {f: values.get(f) for f in DP_FLAGS}
  given = [f for f in DP_FLAGS if dp[f] is not None]
  if values['aggregator'] != 'dp':
    if given:
      raise ValueError(f'--{given[0]} needs --aggregator=dp')
    return dict.fromkeys(RESOLVED)
  z, clip, quantile = (
    dp['dp_noise_multiplier'],
    dp['dp_clip'],
    dp['dp_target_quantile'],
  )
  if z is None:
    raise ValueError('--aggregator=dp needs --dp_noise_multiplier (z >= 0)')
  for adaptive_only in ('dp_target_quantile', 'dp_initial_clip'):
    if clip is not None and dp[adaptive_only] is not None:
      raise ValueError(
        f"--{adaptive_only} is adaptive clipping's: give it "
        'or --dp_clip (fixed clipping), not both'
      )
  delta = dp['dp_delta']
  if delta is None and num_clients is not None:
    delta = 0.1 / num_clients  # Well below 1/N, as a guarantee needs.
  accountant = dp['dp_accountant'] or 'rdp'
  k, m = values.get('clients_per_round'), dp['dp_noise_cohort']
  initial_clip, seed = dp['dp_initial_clip'], dp['dp_noise_seed']
  sampling = values['client_sampling']
  checks = [
    (
      0 <= z < FLOAT32_MAX,
      f'--dp_noise_multiplier must be a number >= 0, got {z}',
    ),
    (
      clip is None or 0 < clip < FLOAT32_MAX,
      f'--dp_clip must be a positive number, got {clip}',
    ),
    (
      quantile is None or 0 < quantile < 1,
      f'--dp_target_quantile must be in (0, 1), got {quantile}',
    ),
    (
      delta is None or 0 < delta < 1,
      f'--dp_delta must be in (0, 1), got {delta}',
    ),
    (m is None or m >= 1, f'--dp_noise_cohort must be >= 1, got {m}'),
    (
      m is None or k is None or m >= k,
      f'--dp_noise_cohort must be >= --clients_per_round ({k}), got {m}: '
      'the noise of fewer clients than take part is below theirs',
    ),
    (
      m is None or num_clients is None or m <= num_clients,
      f'--dp_noise_cohort={m} is more than the {num_clients} clients of '
      f'{values.get("task")}: a round cannot draw more clients than there '
      'are',
    ),
    (
      initial_clip is None or 0 < initial_clip < FLOAT32_MAX,
      f'--dp_initial_clip must be a positive number, got {initial_clip}',
    ),
    (
      seed is None or 0 <= seed <= max_seed,
      f'--dp_noise_seed must be in 0..{max_seed}, got {seed}',
    ),
    (
      accountant in ('rdp', 'pld'),
      f'--dp_accountant must be rdp or pld, got {accountant!r}',
    ),
    (
      sampling != 'proportional',
      '--client_sampling=proportional '
      'draws clients by their number of examples, which no DP accountant '
      'here certifies: use uniform or poisson with --aggregator=dp',
    ),
    (
      clip is not None or k is None or z < 0.1 * (m or k),
      f'--dp_noise_multiplier={z:g} with adaptive clipping needs more than '
      f'{10 * z:g} clients per round (TFF gives the clipped count noise '
      '0.05·K, which must exceed z/2): give --dp_clip, a larger K or a '
      '--dp_noise_cohort',
    ),
    (
      accountant == 'rdp' or sampling == 'poisson',
      '--dp_accountant=pld needs --client_sampling=poisson (dp_accounting '
      'has no PLD of fixed-size sampling)',
    ),
  ]
  for ok, message in checks:
    if not ok:
      raise ValueError(message)
  return dict(
    dp_noise_multiplier=z,
    dp_clip=clip,
    dp_target_quantile=(
      budget.TARGET_UNCLIPPED_QUANTILE
      if clip is None and quantile is None
      else quantile
    ),
    dp_noise_cohort=m,
    dp_initial_clip=initial_clip,
    dp_noise_seed=seed,
    dp_delta=delta,
    dp_accountant=accountant,
    dp_adjacency=budget.ADJACENCY[sampling],
  )
