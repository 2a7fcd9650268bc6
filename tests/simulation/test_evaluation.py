"""In-process evaluation and dissimilarity = the TFF computations (issue 6)."""

import collections

import numpy as np
import pytest

import helpers
from tasks import text_models
from tff_algos import learning
from tff_algos.simulation import evaluation


def _perturbed_weights(model_fn, scale=0.01):
  """Initial weights plus noise, so that no gradient or loss is degenerate."""
  weights = learning.initial_model_weights(model_fn, 0)
  rng = np.random.default_rng(1)
  return type(weights)(
      [w + scale * rng.standard_normal(w.shape).astype(w.dtype)
       for w in weights.trainable], weights.non_trainable)


def _assert_same(got, want, ignore=()):
  assert list(got) == list(want)
  for key in want:
    assert type(got[key]) is type(want[key]), key
    if key not in ignore:
      np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=key)


def _char_lstm_task():
  """The char-LSTM (masked loss and accuracy) on 3 tiny random clients."""
  rng = np.random.default_rng(0)
  arrays = []
  for n, length in ((3, 60), (1, 10), (5, 75)):
    tokens = rng.integers(1, 90, size=(n, 81)).astype(np.int32)
    tokens[:, length:] = 0  # Padding, which loss and accuracy both mask.
    arrays.append(collections.OrderedDict(x=tokens[:, :-1], y=tokens[:, 1:]))
  return text_models.char_lstm(90), arrays


def test_in_process_evaluation_equals_the_tff_computation():
  task, arrays = helpers.task_and_arrays()
  weights = _perturbed_weights(task.model_fn)
  evaluate = evaluation.build_evaluation(task.model_fn)
  reference = evaluation.build_federated_evaluation(task.model_fn)
  for clients in (arrays, arrays[3:9], [arrays[0]] * 4, arrays):
    got, want = evaluate(weights, clients), reference(weights, clients)
    # Forward passes across clients: fewer of them, the same sums.
    _assert_same(got, want, ignore=('num_batches',))
    assert got['num_batches'] < want['num_batches']
  assert evaluate(weights, arrays[:1]) != evaluate(weights, arrays[1:2])


def test_in_process_evaluation_of_a_masked_char_lstm():
  """Its loss is a per-batch mean over non-pad characters: evaluated client
  by client, as the TFF computation does; across clients it would differ."""
  model_fn, arrays = _char_lstm_task()
  weights = _perturbed_weights(model_fn)
  result = evaluation.build_evaluation(model_fn)(weights, arrays)
  _assert_same(result, evaluation.build_federated_evaluation(model_fn)(
      weights, arrays))
  assert result['num_examples'] == 9
  def mixed():
    return model_fn()
  pooled = evaluation.build_evaluation(mixed)(weights, arrays)
  assert abs(pooled['loss'] - result['loss']) > 1e-5 * result['loss']
  np.testing.assert_allclose(pooled['accuracy'], result['accuracy'],
                             rtol=1e-6)  # Accuracy counts characters.


def test_in_process_dissimilarity_equals_the_tff_computation():
  task, arrays = helpers.task_and_arrays()
  weights = _perturbed_weights(task.model_fn)
  dissimilarity = evaluation.build_dissimilarity(task.model_fn)
  reference = evaluation.build_federated_dissimilarity(task.model_fn)
  for clients in (arrays, arrays[:7]):
    _assert_same(dissimilarity(weights, clients), reference(weights, clients))


def test_evaluation_needs_clients():
  task, _ = helpers.task_and_arrays()
  weights = learning.initial_model_weights(task.model_fn, 0)
  with pytest.raises(ValueError, match='at least one client'):
    evaluation.build_evaluation(task.model_fn)(weights, [])


def test_dissimilarity_is_one_for_identical_devices():
  task, arrays = helpers.task_and_arrays()
  dissimilarity = evaluation.build_dissimilarity(task.model_fn)
  weights = learning.initial_model_weights(task.model_fn, 0)
  result = dissimilarity(weights, [arrays[0]] * 5)
  assert result['grad_dissimilarity'] == pytest.approx(1.0, abs=1e-4)
  assert result['grad_variance'] == pytest.approx(0.0, abs=1e-6)


def test_gradient_variance_is_larger_for_non_iid_data():
  variances = {}
  for name in ('synthetic_1_1', 'synthetic_iid'):
    task, arrays = helpers.task_and_arrays(name)
    weights = learning.initial_model_weights(task.model_fn, 0)
    result = evaluation.build_dissimilarity(task.model_fn)(weights, arrays)
    assert result['grad_dissimilarity'] > 1
    variances[name] = result['grad_variance']
  assert variances['synthetic_1_1'] > 2 * variances['synthetic_iid']
