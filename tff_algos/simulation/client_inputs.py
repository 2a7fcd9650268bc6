"""Each simulated client's input to a round (`learning.ScheduledInput`, or
`learning.StoredInput` where the client reads its data itself).

`round_inputs` packs the selected clients' arrays (or their paths in the
run's `client_store.ClientStore`) with the minibatch schedules the sampler
drew; `as_dataset` turns one such input into the
`tf.data.Dataset` of the same minibatches, in order: the client data of the
production builds (`learning.DatasetInput`) and of TFF's built-in
algorithms, for equivalence tests and benchmarks.
"""

import collections

import numpy as np
import tensorflow as tf


def round_inputs(sampler, plans, arrays, round_num, batch_size, store=None):
  """Each participant's training input: its data (or with a `store`, its
  data's path: `learning.StoredInput`) and minibatch schedule.

  Args:
    sampler: the run's `sampling.ClientSampler`.
    plans: the round's participants (`ClientPlan`s).
    arrays: every client's data, an OrderedDict of arrays, by client index.
    round_num: the round.
    batch_size: B (-1: the whole local dataset).
    store: the `client_store.ClientStore` of `arrays`, or None.

  Returns:
    One client input per plan: a one-element list (TFF client data are
    sequences) holding OrderedDict(data, example_order, batch_ends), or
    with a store OrderedDict(path, example_order, batch_ends).
  """
  inputs = []
  for plan, (_, order, ends) in zip(
    plans, schedules(sampler, plans, arrays, round_num, batch_size)
  ):
    if store is not None:
      inputs.append(
        collections.OrderedDict(
          path=store.path(plan.client), example_order=order, batch_ends=ends
        )
      )
      continue
    data = arrays[plan.client]
    if sampler.steps_per_round is not None:
      # A block of steps reads a fraction of the (pooled) data: only that is
      # sent. The whole pooled dataset could not be: TFF refuses to
      # serialize a dataset over 100 MB (CIFAR-10's is 154 MB).
      data = collections.OrderedDict((k, v[order]) for k, v in data.items())
      order = np.arange(len(order), dtype=np.int32)
    inputs.append(
      [collections.OrderedDict(data=data, example_order=order, batch_ends=ends)]
    )
  return inputs


def schedules(sampler, plans, arrays, round_num, batch_size):
  """(client index, example order, batch ends) of each participant: the
  minibatches the sampler drew for it this round (`round_inputs`'
  arguments)."""
  return [
    (
      plan.client,
      *sampler.minibatch_schedule(
        round_num,
        plan.client,
        len(next(iter(arrays[plan.client].values()))),
        plan.epochs,
        batch_size,
      ),
    )
    for plan in plans
  ]


def as_dataset(client_input) -> tf.data.Dataset:
  """The minibatches of one round input (from `round_inputs`), in order:
  per epoch, the epoch's permutation of the data batched by B."""
  (element,) = client_input
  data = element['data']
  order, ends = element['example_order'], element['batch_ends']
  n = len(next(iter(data.values())))
  batch_size = int(ends[0])  # B, or n for B = ∞.
  epochs = [
    tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(
        (k, v[order[e * n : (e + 1) * n]]) for k, v in data.items()
      )
    ).batch(batch_size)
    for e in range(len(order) // n)
  ]
  dataset = epochs[0]
  for more in epochs[1:]:
    dataset = dataset.concatenate(more)
  return dataset
