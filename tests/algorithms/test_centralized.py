"""The centralized SGD baseline (FedAvg's Table 3): minibatch SGD on all
clients' data pooled, a round a block of updates."""

import collections

import numpy as np
import pytest

import helpers
import tasks
from tff_algos.simulation import client_inputs
from tff_algos.simulation import sampling
from tff_algos.simulation import trainer
from tff_algos.simulation.config import Config
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve


def test_a_round_is_fedavg_on_one_client_holding_all_the_data():
  """With updates_per_round·B = n, a centralized round is one epoch of
  minibatch SGD over the pooled data: FedAvg (K = 1, E = 1, the same B) on
  a task whose one client holds those data, from the same permutation."""
  task, arrays = helpers.task_and_arrays()
  n = sum(len(a['y']) for a in arrays)
  batch = next(b for b in (7, 9, 11, 3) if n % b == 0)
  pooled = collections.OrderedDict(
    (k, np.concatenate([a[k] for a in arrays])) for k in arrays[0]
  )
  one = tasks.from_arrays(
    'one_client',
    {'all': pooled},
    {'all': tasks.client_arrays(task.test)[0]},
    task.model_fn,
  )
  centralized = trainer.train(
    None,
    task,
    algo='centralized',
    rounds=2,
    batch_size=batch,
    client_lr=0.05,
    hparams={'updates_per_round': n // batch},
  )
  fedavg = trainer.train(
    None,
    one,
    algo='fedavg',
    rounds=2,
    clients_per_round=1,
    epochs=1,
    batch_size=batch,
    client_lr=0.05,
    client_weighting='uniform',
  )
  assert helpers.max_abs_diff(centralized.weights, fedavg.weights) == 0
  assert [r['local_steps'] for r in centralized.rows[1:]] == [n // batch] * 2


@pytest.mark.fast
def test_a_block_is_sent_only_the_examples_it_reads():
  """The pooled client's input holds the block's examples in its order
  (CIFAR-10 pooled would exceed TFF's 100 MB limit on a dataset), and its
  minibatches are those of the whole pooled data under the schedule."""
  n, steps, batch = 1000, 7, 10
  data = collections.OrderedDict(
    x=np.arange(n * 3, dtype=np.float32).reshape(n, 3), y=np.arange(n) % 5
  )
  sampler = sampling.ClientSampler(1, 1, 1, seed=3, steps_per_round=steps)
  plans = sampler.participants(2, sampling.StragglerPolicy.DROP)
  ((element,),) = client_inputs.round_inputs(sampler, plans, [data], 2, batch)
  order, ends = sampler.minibatch_schedule(2, 0, n, 1, batch)
  assert len(element['data']['y']) == steps * batch
  np.testing.assert_array_equal(element['data']['x'], data['x'][order])
  np.testing.assert_array_equal(
    element['example_order'], np.arange(steps * batch)
  )
  np.testing.assert_array_equal(element['batch_ends'], ends)


@pytest.mark.fast
def test_its_summary_states_the_updates_to_the_target(tmp_path):
  _, rows = helpers.run(
    tmp_path,
    'sgd',
    algo='centralized',
    rounds=3,
    clients_per_round=1,
    epochs=None,
    hparams={'updates_per_round': 5},
  )
  assert [r['participants'] for r in rows[1:]] == ['1'] * 3
  from tff_algos.simulation import results

  summary = results.summarize(tmp_path / 'sgd', target_accuracy=0.2)
  assert summary['updates_per_round'] == 5
  assert summary['updates_to_target'] == pytest.approx(
    summary['rounds_to_target'] * 5
  )


@pytest.mark.fast
@pytest.mark.parametrize(
  'flags, message',
  [
    (dict(straggler_fraction=0.5), 'centralized has straggler_fraction=0'),
    (dict(client_sampling='poisson'), 'centralized has client_sampling=unif'),
    (dict(aggregator='dp'), '--aggregator=dp: centralized has aggregator='),
    (dict(clients_per_round=5), '--clients_per_round=5: centralized has '),
    (dict(clients_per_round=None), '--client_fraction: centralized has cl'),
    (dict(hparams={'updates_per_round': 2.5}), 'whole number'),
    (dict(epochs=3), 'centralized has epochs=1'),
  ],
)
def test_settings_it_does_not_have_are_refused(flags, message):
  with pytest.raises(ConfigError, match=message):
    resolve(
      helpers.quick_config(
        algo='centralized', **{'epochs': None, 'clients_per_round': 1, **flags}
      )
    )


@pytest.mark.fast
def test_one_client_is_its_default_and_its_header_says_pooled():
  settings = resolve(Config.create(algo='centralized'))
  assert settings.sampling.clients_per_round == 1
  assert settings.entry.clients.header(3400, 1, settings.algorithm) == [
    '3400 clients pooled into one',
    'B=100',
  ]
