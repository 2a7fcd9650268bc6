"""A run's header: the line that names the algorithm and every setting
that changes its numbers, the task and where the results go, and the note
under it for a DP run whose ε depends on how clients are sampled. No
TensorFlow at import."""

import math
import sys

from tff_algos.algorithms import optimizers


def announce(prepared, output_dir: str, status: str):
  """The run's header on stderr, and its sampling note if it has one."""
  process = prepared.process
  print(
    header(
      prepared.settings,
      prepared.task,
      output_dir,
      status,
      prepared.mechanism,
      process.get_hparams(process.initialize()),
      prepared.execution,
    ),
    file=sys.stderr,
  )
  note = sampling_note(
    prepared.settings, prepared.mechanism, len(prepared.data.train)
  )
  if note:
    print(note, file=sys.stderr)


def header(
  settings, task, output_dir, status, mechanism=None, built=None, execution=''
):
  """The run's first line: the algorithm and every setting that changes it,
  the task and where the results go (`mechanism`: the DP mechanism the
  process was built with; `built`: its hyper-parameters, which name the
  optimizers it was built with; `execution`: how its clients train)."""
  algorithm = settings.algorithm
  parts = settings.entry.clients.header(
    len(task.client_ids), settings.sampling.clients_per_round, algorithm
  )
  for role, optimizer, part in (
    ('client', algorithm.client_optimizer, 'client_work'),
    ('server', algorithm.server_optimizer, 'finalizer'),
  ):
    if optimizer is not None:
      parts.append(
        optimizers.describe(role, optimizer, (built or {}).get(part))
      )
  parts += settings.entry.describe_hparams(algorithm.hparams)
  parts.append(f'{algorithm.client_weighting} weights')
  if settings.sampling.scheme != 'uniform':
    parts.append(f'{settings.sampling.scheme} client sampling')
  parts.append(aggregation(settings, mechanism))
  if settings.sampling.straggler_fraction:
    parts.append(
      f'{settings.sampling.straggler_fraction:.0%} stragglers '
      f'({algorithm.straggler_policy})'
    )
  if settings.run.partition is not None:
    parts.append(f'repartitioned {settings.run.partition}')
  parts.append(
    f'{settings.run.rounds} rounds, seed {settings.run.seed} (data seed '
    f'{settings.run.data_seed})'
  )
  if settings.measurement.eval_clients is not None:
    parts.append(
      f'train metrics over {settings.measurement.eval_clients} clients'
    )
  if execution:
    parts.append(f'clients trained {execution}')
  return (
    f'{settings.algo} on {task.description}: {", ".join(parts)} → '
    f'{output_dir}' + (' (resuming)' if status == 'resume' else '')
  )


def aggregation(settings, mechanism):
  """The header's words for the model aggregator: DP as the process was
  built (`trainer.accounted_mechanism`), said to differ from the flags
  where it does."""
  from tff_algos.privacy import accounting

  dp = settings.privacy
  if dp is None:
    return f'{settings.aggregation} aggregation'
  clip = (
    f'clip {dp.clip:g}'
    if not dp.adaptive_clipping
    else f'adaptive clip at the {dp.target_quantile:g} quantile'
    + (f' from {dp.initial_clip:g}' if dp.initial_clip else '')
  )
  cohort = ''
  if dp.noise_cohort:
    cohort = (
      f", noise as for {dp.noise_cohort} clients: the model's "
      f'noise multiplier is {mechanism.noise_multiplier:.4g}'
    )
  flags = accounting.mechanism(
    dp.noise_multiplier,
    clients_per_round=settings.sampling.clients_per_round,
    adaptive_clipping=dp.adaptive_clipping,
    noise_cohort_size=dp.noise_cohort,
  )
  accounted = f'ε at δ={dp.delta:.2g}, {dp.adjacency}, {dp.accountant}'
  if mechanism is not None and not mechanism.matches(flags):
    return (
      f'DP as the algorithm built its aggregator (noise multiplier '
      f"{mechanism.noise_multiplier:.4g}, not the flags' "
      f'{flags.noise_multiplier:.4g}: ε is for its own); {accounted}'
    )
  seed = f', noise seed {dp.noise_seed}' if dp.noise_seed is not None else ''
  return (
    f'DP (z={dp.noise_multiplier:g}, {clip}{cohort}{seed}; '
    f'unweighted mean; {accounted})'
  )


def sampling_note(settings, mechanism, num_clients):
  """The line under a DP run's header when its clients are sampled
  uniformly (None otherwise): its ε holds for replace-one neighbours,
  while the usual DP analyses give the add-or-remove-one ε, which Poisson
  sampling certifies; both for `mechanism`, the noise the process was
  built with, after the run's rounds. The one-round RDP computed here is
  the run's own (remembered), so the line costs the run nothing more."""
  from tff_algos.privacy import accounting

  uniform, poisson = accounting.UNIFORM, accounting.POISSON
  dp = settings.privacy
  if dp is None or settings.sampling.scheme != uniform:
    return None
  rounds = settings.run.rounds
  spent = {
    sampling: accounting.epsilon_of(
      mechanism,
      rounds,
      dp.delta,
      num_clients=num_clients,
      clients_per_round=settings.sampling.clients_per_round,
      sampling=sampling,
    )
    for sampling in (uniform, poisson)
  }
  if math.isinf(spent[poisson]):  # No noise: no ε either way.
    return None
  return (
    f'note: uniform sampling gives the {accounting.adjacency(uniform)} ε '
    f'({spent[uniform]:.4g} after {rounds} rounds at δ={dp.delta:.2g}); '
    '--client_sampling=poisson gives the '
    f'{accounting.adjacency(poisson)} ε of the usual DP analyses '
    f'({spent[poisson]:.4g} with this noise)'
  )
