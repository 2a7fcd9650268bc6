"""Label-skewed partitions of a task's training data (`--partition`).

`dirichlet:α` (Hsu et al. 2019, the non-IID knob of most FL papers and
frameworks): the training examples of all clients are pooled, and each
class's examples are split over the task's N clients in proportions drawn
from Dirichlet(α, …, α), so small α gives each client few classes and
α → ∞ approaches IID. Draws are redone (from the same seeded stream) until
every client has an example. The test data stay as the task splits them:
the evaluation pools every client's test data, so its numbers do not
depend on that split. Everything is a function of the data seed.
"""

import collections
import math

import numpy as np

import tasks

MAX_DRAWS = 1000


def parse(spec: str | None):
  """('dirichlet', α) for 'dirichlet:α', None for None; ValueError else."""
  if spec is None:
    return None
  kind, _, value = spec.partition(':')
  try:
    alpha = float(value)
  except ValueError:
    alpha = math.nan
  if kind != 'dirichlet' or not 0 < alpha < math.inf:
    raise ValueError(
      f'--partition={spec!r}: expected dirichlet:α with a '
      'number α > 0 (e.g. dirichlet:0.5)'
    )
  return kind, alpha


def dirichlet(
  labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
  """Each client's example indices (sorted) under Dirichlet(α) class
  proportions; tasks.DataError when no draw in MAX_DRAWS gives every
  client an example (α very small for this many clients)."""
  classes = np.unique(labels)
  by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
  for _ in range(MAX_DRAWS):
    shares = [[] for _ in range(num_clients)]
    for indices in by_class:
      proportions = rng.dirichlet(np.full(num_clients, alpha))
      cuts = (np.cumsum(proportions)[:-1] * len(indices)).astype(int)
      for client, part in enumerate(np.split(indices, cuts)):
        shares[client].append(part)
    clients = [np.sort(np.concatenate(parts)) for parts in shares]
    if min(len(c) for c in clients) > 0:
      return clients
  raise tasks.DataError(
    f'--partition=dirichlet:{alpha:g}: no draw in {MAX_DRAWS} gave each of '
    f'the {num_clients} clients an example; use a larger α'
  )


def apply(task, spec: str, seed: int):
  """`task` with its training data repartitioned by `spec` (see the module
  docstring): the same number of clients, named client_0000, .... The
  task's train data must be arrays with one integer class label per
  example."""
  from tasks import base

  kind, alpha = parse(spec)
  del kind
  arrays = getattr(task.train, 'arrays', None)
  if arrays is None or any(
    set(a) != {'x', 'y'}
    or np.ndim(a['y']) != 1
    or not np.issubdtype(np.asarray(a['y']).dtype, np.integer)
    for a in arrays.values()
  ):
    raise tasks.DataError(
      f'--partition: {task.name} does not have one '
      'integer class label per training example'
    )
  pooled = [arrays[c] for c in task.train.client_ids]
  x = np.concatenate([a['x'] for a in pooled])
  y = np.concatenate([a['y'] for a in pooled])
  clients = dirichlet(y, len(pooled), alpha, np.random.default_rng([seed, 4]))
  train = collections.OrderedDict(
    (f'client_{k:04d}', collections.OrderedDict(x=x[i], y=y[i]))
    for k, i in enumerate(clients)
  )
  return base.FederatedTask(
    name=task.name,
    train=base.client_data_from_arrays(train),
    test=task.test,
    model_fn=task.model_fn,
    description=f'{task.description}; training data repartitioned '
    f'{spec} over {len(train)} clients (data seed {seed})',
  )


def label_histogram(client_arrays, client_ids) -> list[dict]:
  """Rows {client, label_0, label_1, ...}: each client's examples per
  label."""
  labels = sorted({int(v) for a in client_arrays for v in np.unique(a['y'])})
  rows = []
  for client, a in zip(client_ids, client_arrays):
    counts = collections.Counter(np.asarray(a['y']).tolist())
    rows.append(
      dict(
        client=client,
        **{f'label_{label}': counts.get(label, 0) for label in labels},
      )
    )
  return rows
