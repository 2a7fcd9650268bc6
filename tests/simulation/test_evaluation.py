"""In-process evaluation and dissimilarity = the TFF computations (issue 6)."""

import collections
from unittest import mock

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


def _reference_evaluation(model_fn):
  """The in-process evaluation as it was before issue 22: traced with
  AutoGraph through `model_ops.evaluate_client`, finalizers called
  eagerly."""
  from tff_algos.learning import model_ops  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  local = evaluation._InProcess(model_fn)  # pylint: disable=protected-access
  model = local.model
  finalizers = collections.OrderedDict(
      (name, getattr(finalize, 'python_function', finalize))
      for name, finalize in model.metric_finalizers().items())
  per_client = getattr(model_fn, 'per_client_metrics', False)

  def summed_metrics(flat_weights, data, splits):
    weights = local.weights(flat_weights)
    if not per_client:
      local.reset_metrics()
      return model_ops.evaluate_client(model, weights, data)
    total = tf.nest.map_structure(tf.zeros_like,
                                  model.report_local_unfinalized_metrics())
    for k in tf.range(tf.size(splits) - 1):
      local.reset_metrics()
      metrics = model_ops.evaluate_client(
          model, weights, local.client(data, splits, k))
      total = tf.nest.map_structure(tf.add, total, metrics)
    return total

  summed_metrics = local.function(summed_metrics)

  def evaluate(weights, data):
    total = local(summed_metrics, weights, data)
    return collections.OrderedDict(
        (name, tf.convert_to_tensor(finalize(total[name])).numpy())
        for name, finalize in finalizers.items())

  return evaluate


@pytest.mark.parametrize('which', ['mlr', 'char_lstm'])
def test_evaluation_without_autograph_is_bit_identical(which):
  """Issue 22 traces the evaluation without AutoGraph and finalizes in one
  tf.function: the very same numbers, bit for bit."""
  if which == 'mlr':
    task, arrays = helpers.task_and_arrays()
    model_fn = task.model_fn
  else:
    model_fn, arrays = _char_lstm_task()
  weights = _perturbed_weights(model_fn)
  got = evaluation.build_evaluation(model_fn)
  want = _reference_evaluation(model_fn)
  for clients in (arrays, arrays[1:3]):
    a, b = got(weights, clients), want(weights, clients)
    assert list(a) == list(b)
    for key in b:
      assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), key


def test_clients_packed_in_one_array_are_evaluated_without_a_copy():
  """Consecutive slices of one array (tasks.base.packed_clients) are joined
  as a view of it, and handed to TensorFlow without a copy (DLPack)."""
  from tasks import base  # pylint: disable=g-import-not-at-top
  x = np.arange(200 * 6, dtype=np.uint8).reshape(200, 6)
  y = np.arange(200, dtype=np.int64) % 7
  rng = np.random.default_rng(0)
  indices = np.split(rng.permutation(200), [30, 31, 120])
  clients = list(base.packed_clients(collections.OrderedDict(
      x=(x, lambda rows: rows.astype(np.float32) / 255.0),
      y=(y, lambda rows: rows.astype(np.int32))), indices, str).values())
  for client, idx in zip(clients, indices):  # As the loaders had them.
    np.testing.assert_array_equal(client['x'],
                                  x[idx].astype(np.float32) / 255.0)
    assert client['y'].dtype == np.int32
  joined = evaluation._joined([c['x'] for c in clients])  # pylint: disable=protected-access
  assert np.shares_memory(joined, clients[0]['x'])
  np.testing.assert_array_equal(joined,
                                np.concatenate([c['x'] for c in clients]))
  assert joined.ctypes.data % 64 == 0
  with mock.patch.object(evaluation.tf, 'constant',
                         side_effect=AssertionError('copied')):
    tensor = evaluation._tensor(joined)  # pylint: disable=protected-access
  np.testing.assert_array_equal(tensor.numpy(), joined)
  # Not consecutive: a copy, aligned, with numpy's promoted dtype.
  mixed = evaluation._joined([np.ones((2, 3), np.float32),  # pylint: disable=protected-access
                              np.zeros((1, 3), np.float64)])
  assert mixed.dtype == np.float64 and mixed.ctypes.data % 64 == 0
