"""FedProx and FedISGD: equivalences, μ, stragglers, metrics."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos.algorithms import fedisgd
from tff_algos.algorithms import fedprox
from tff_algos.simulation import client_inputs
from tff_algos.simulation.sampling import ClientSampler

UNIFORM = tff.learning.ClientWeighting.UNIFORM


def test_fed_prox_with_mu_zero_reproduces_fed_avg(tmp_path):
  fedavg_csv, _ = helpers.run(tmp_path, 'fedavg', algo='fedavg')
  fedprox_csv, _ = helpers.run(tmp_path, 'fedprox', algo='fedprox', mu=0.0)
  assert fedavg_csv == fedprox_csv


def test_fed_isgd_with_unit_server_step_is_uniform_fed_prox():
  task, arrays = helpers.task_and_arrays()
  sampler = ClientSampler(30, 5, epochs=2, seed=1)
  inputs = [
    client_inputs.round_inputs(sampler, sampler.round_plan(r), arrays, r, 10)
    for r in range(1, 4)
  ]
  lam = 0.5
  isgd = helpers.train(
    fedisgd.build_fed_isgd(
      task.model_fn, 0.01, lam=lam, server_learning_rate=1 / lam
    ),
    task.model_fn,
    inputs,
  )
  prox = helpers.train(
    fedprox.build_fed_prox(
      task.model_fn, 0.01, mu=lam, client_weighting=UNIFORM
    ),
    task.model_fn,
    inputs,
  )
  weighted = helpers.train(
    fedprox.build_fed_prox(task.model_fn, 0.01, mu=lam), task.model_fn, inputs
  )
  assert helpers.max_abs_diff(isgd, prox) <= 1e-5
  assert helpers.max_abs_diff(isgd, weighted) > 1e-4  # Weighting matters.


def _client_update_norms(mus):
  """‖w_k − w_t‖ of one client's update for each μ, via set_hparams."""
  task, arrays = helpers.task_and_arrays()
  work = learning.build_proximal_sgd_client_work(
    task.model_fn, tff.learning.optimizers.build_sgdm(0.05)
  )
  sampler = ClientSampler(30, 1, epochs=5, seed=0)
  plan = sampler.round_plan(1)
  inputs = client_inputs.round_inputs(sampler, plan, arrays, 1, 10)
  weights = learning.initial_model_weights(task.model_fn, 0)
  state = work.initialize()
  updates = []
  for mu in mus:
    state = work.set_hparams(
      state, collections.OrderedDict(mu=mu, learning_rate=0.05)
    )
    result = work.next(state, [weights], inputs).result[0]
    updates.append(np.concatenate([np.ravel(u) for u in result.update]))
  return updates


@pytest.mark.fast
def test_mu_changes_the_client_update_and_pulls_it_towards_w_t():
  updates = _client_update_norms([0.0, 0.1, 1.0, 10.0])
  norms = [np.linalg.norm(u) for u in updates]
  assert np.max(np.abs(updates[1] - updates[0])) > 1e-4
  assert norms[0] > norms[1] > norms[2] > norms[3] > 0


def test_with_90_percent_stragglers_drop_keeps_one_in_ten(tmp_path):
  _, rows = helpers.run(
    tmp_path,
    'drop',
    algo='fedavg',
    clients_per_round=10,
    straggler_fraction=0.9,
  )
  assert [int(r['participants']) for r in rows[1:]] == [1, 1, 1]


def _expected_steps(sampler, round_num, arrays, epochs_of, batch_size):
  return sum(
    epochs_of(p) * -(-len(arrays[p.client]['y']) // batch_size)
    for p in sampler.round_plan(round_num)
  )


def test_partial_stragglers_run_fewer_local_steps(tmp_path):
  _, arrays = helpers.task_and_arrays()
  config = helpers.quick_config(
    algo='fedprox', clients_per_round=10, epochs=4, straggler_fraction=0.5
  )
  _, rows = helpers.run(tmp_path, 'partial', **vars(config))
  sampler = ClientSampler(30, 10, 4, config.seed, 0.5)
  for round_num in (1, 2, 3):
    plans = sampler.round_plan(round_num)
    assert sum(p.straggler for p in plans) == 5
    assert all(1 <= p.epochs <= 4 for p in plans if p.straggler)
    measured = int(rows[round_num]['local_steps'])
    assert int(rows[round_num]['participants']) == 10
    assert measured == _expected_steps(
      sampler, round_num, arrays, lambda p: p.epochs, 10
    )
    full = _expected_steps(sampler, round_num, arrays, lambda p: 4, 10)
    assert measured < full


@pytest.mark.slow
def test_all_algorithms_see_the_same_straggler_draws(tmp_path):
  columns = []
  for algo, extra in (
    ('fedavg', dict(straggler_policy='partial')),
    ('fedprox', {}),
    ('fedisgd', dict(server_lr=0.75)),
  ):
    _, rows = helpers.run(
      tmp_path,
      algo,
      algo=algo,
      clients_per_round=10,
      straggler_fraction=0.5,
      **extra,
    )
    columns.append([(r['participants'], r['local_steps']) for r in rows])
  assert columns[0] == columns[1] == columns[2]
  _, dropped = helpers.run(
    tmp_path,
    'drop',
    algo='fedavg',
    clients_per_round=10,
    straggler_fraction=0.5,
  )
  assert [int(r['participants']) for r in dropped[1:]] == [5, 5, 5]


@pytest.mark.fast
def test_adaptive_mu_rule_on_a_scripted_loss_sequence():
  rule = fedprox.AdaptiveMu(mu=0.0)
  losses = [1.0, 1.2, 1.1, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.25]
  mus = [rule.update(loss) for loss in losses]
  expected = [0.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1]
  np.testing.assert_allclose(mus, expected, atol=1e-12)
  rule = fedprox.AdaptiveMu(mu=1.0)
  mus = [
    rule.update(loss) for loss in [5, 4, 3, 2, 1, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
  ]
  assert mus[5] == pytest.approx(0.9) and mus[10] == pytest.approx(0.8)


def test_adaptive_mu_is_set_in_the_process_between_rounds(tmp_path):
  _, rows = helpers.run(
    tmp_path,
    'adaptive',
    algo='fedprox',
    mu=0.5,
    adaptive_mu=True,
    rounds=6,
    client_lr=0.05,
  )
  losses = [float(r['train_loss']) for r in rows]
  rule = fedprox.AdaptiveMu(0.5)
  expected_mus = [0.5, 0.5] + [rule.update(loss) for loss in losses[1:-1]]
  np.testing.assert_allclose(
    [float(r['mu']) for r in rows], expected_mus[: len(rows)], atol=1e-6
  )


@pytest.mark.fast
def test_fed_isgd_server_learning_rate_decays_by_schedule():
  task, arrays = helpers.task_and_arrays()
  process = fedisgd.build_fed_isgd(
    task.model_fn,
    0.01,
    lam=0.5,
    server_learning_rate=0.8,
    server_lr_decay=0.5,
    server_lr_decay_every=2,
  )
  sampler = ClientSampler(30, 3, epochs=1, seed=0)
  state = process.initialize()
  rates = [state.finalizer['optimizer']['learning_rate']]
  for round_num in range(1, 6):
    inputs = client_inputs.round_inputs(
      sampler, sampler.round_plan(round_num), arrays, round_num, 10
    )
    state = process.next(state, inputs).state
    rates.append(state.finalizer['optimizer']['learning_rate'])
  # The t-th server step (t = 0, 1, …) uses λ·η_gi·0.5^⌊t/2⌋.
  np.testing.assert_allclose(rates, [0.4, 0.4, 0.2, 0.2, 0.1, 0.1], rtol=1e-6)


def test_fed_isgd_logs_vlg(tmp_path):
  _, rows = helpers.run(
    tmp_path, 'isgd', algo='fedisgd', server_lr=0.75, lam=2.0
  )
  vlg = [float(r['vlg']) for r in rows[1:]]
  assert rows[0]['vlg'] == ''
  assert all(v > 0 for v in vlg)
