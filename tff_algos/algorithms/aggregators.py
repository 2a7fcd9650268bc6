"""Model aggregators by name, for every algorithm (`--aggregator`).

  mean         TFF's weighted mean (the default; the papers' aggregation)
  dp           differential privacy: each client's update clipped to L2
               norm C (`--dp_clip`; without it, adaptive clipping at the
               `--dp_target_quantile` of the update norms, TFF's), Gaussian
               noise of stddev z·C on the sum (`--dp_noise_multiplier`),
               divided by K; in a simulation the noise is seeded from
               (seed, round) and kept in the process state
               (`privacy.mechanisms`), so a run is reproducible and resumes
               to the same numbers; a production build draws it
               unseeded. Unweighted: the mean of the clients' updates
               becomes uniform.
  compression  TFF's `compression_aggregator` (zeroing, clipping and
               8-bit stochastic quantization of the updates)
  robust       TFF's `robust_aggregator` (zeroing and adaptive clipping)

Settings resolve without TensorFlow (`AggregatorSettings`); `build` makes
the `tff.aggregators` factory a builder's `model_aggregator` takes.
"""

from __future__ import annotations

import dataclasses

KINDS = ('mean', 'dp', 'compression', 'robust')


@dataclasses.dataclass(frozen=True)
class AggregatorSettings:
  """A run's model aggregator, resolved.

  Attributes:
    kind: one of KINDS.
    clients_per_round: K (DP: the noised sum's divisor, the expected
      cohort).
    seed: the noise's seed (DP: --dp_noise_seed, else the run's).
    noise_multiplier: z (DP).
    clip: C for fixed clipping, None for adaptive clipping (DP).
    target_quantile: adaptive clipping's target quantile (DP).
    noise_cohort: M ≥ K: noise as if M clients took part, or None (DP).
    initial_clip: adaptive clipping's clip before the first round, or None
      (TFF's 0.1) (DP).
  """

  kind: str = 'mean'
  clients_per_round: int = 1
  seed: int = 0
  noise_multiplier: float | None = None
  clip: float | None = None
  target_quantile: float | None = None
  noise_cohort: int | None = None
  initial_clip: float | None = None


def build(settings: AggregatorSettings | None, seeded: bool = True):
  """The `model_aggregator` of `settings` (None for TFF's default, the
  weighted mean). DP noise is drawn from `settings.seed` when `seeded` (a
  simulation: reproducible, resumable), else from TF's unseeded draws (a
  production build: a seed in the state would let whoever reads it
  subtract the noise)."""
  if settings is None or settings.kind == 'mean':
    return None
  import tensorflow_federated as tff

  seed = settings.seed if seeded else None
  if settings.kind == 'compression':
    return tff.learning.compression_aggregator()
  if settings.kind == 'robust':
    return tff.learning.robust_aggregator()
  from tff_algos.privacy import mechanisms as privacy

  if settings.clip is not None:
    return privacy.gaussian_fixed(
      settings.noise_multiplier,
      settings.clients_per_round,
      settings.clip,
      seed=seed,
      noise_cohort_size=settings.noise_cohort,
    )
  initial_clip = (
    {}
    if settings.initial_clip is None
    else dict(initial_l2_norm_clip=settings.initial_clip)
  )
  return privacy.gaussian_adaptive(
    settings.noise_multiplier,
    settings.clients_per_round,
    seed=seed,
    target_unclipped_quantile=settings.target_quantile,
    noise_cohort_size=settings.noise_cohort,
    **initial_clip,
  )
