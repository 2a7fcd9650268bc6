"""In-process evaluation and dissimilarity = their TFF computations
(tests/simulation/federated_evaluation.py)."""

import collections
import sys
from unittest import mock

import numpy as np
import pytest

from conftest import REPO
import helpers
from tasks import text_models
from tff_algos import learning
from tff_algos.learning import model_ops
from tff_algos.simulation import client_tensors
from tff_algos.simulation import compiled_evaluation
from tff_algos.simulation import evaluation

sys.path.insert(0, str(REPO / 'tests' / 'simulation'))
import federated_evaluation


def _perturbed_weights(model_fn, scale=0.01):
  """Initial weights plus noise, so that no gradient or loss is degenerate."""
  weights = learning.initial_model_weights(model_fn, 0)
  rng = np.random.default_rng(1)
  return type(weights)(
    [
      w + scale * rng.standard_normal(w.shape).astype(w.dtype)
      for w in weights.trainable
    ],
    weights.non_trainable,
  )


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
  reference = federated_evaluation.build_federated_evaluation(task.model_fn)
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
  _assert_same(
    result,
    federated_evaluation.build_federated_evaluation(model_fn)(weights, arrays),
  )
  assert result['num_examples'] == 9

  def mixed():
    return model_fn()

  pooled = evaluation.build_evaluation(mixed)(weights, arrays)
  assert abs(pooled['loss'] - result['loss']) > 1e-5 * result['loss']
  np.testing.assert_allclose(
    pooled['accuracy'], result['accuracy'], rtol=1e-6
  )  # Accuracy counts characters.


@pytest.mark.fast
def test_in_process_dissimilarity_equals_the_tff_computation():
  task, arrays = helpers.task_and_arrays()
  weights = _perturbed_weights(task.model_fn)
  dissimilarity = evaluation.build_dissimilarity(task.model_fn)
  reference = federated_evaluation.build_federated_dissimilarity(task.model_fn)
  for clients in (arrays, arrays[:7]):
    _assert_same(dissimilarity(weights, clients), reference(weights, clients))


@pytest.mark.fast
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
  """The in-process evaluation traced with AutoGraph through
  `model_ops.evaluate_client`, its finalizers called eagerly, finalizer by
  finalizer, as TFF's own evaluation does: the reference for the one built
  without AutoGraph."""
  import tensorflow as tf

  from tff_algos.learning import model_ops

  local = evaluation._InProcess(model_fn)
  model = local.model
  finalizers = collections.OrderedDict(
    (name, getattr(finalize, 'python_function', finalize))
    for name, finalize in model.metric_finalizers().items()
  )
  per_client = getattr(model_fn, 'per_client_metrics', False)

  def summed_metrics(flat_weights, data, splits):
    weights = local.weights(flat_weights)
    if not per_client:
      local.reset_metrics()
      return model_ops.evaluate_client(model, weights, data)
    total = tf.nest.map_structure(
      tf.zeros_like, model.report_local_unfinalized_metrics()
    )
    for k in tf.range(tf.size(splits) - 1):
      local.reset_metrics()
      metrics = model_ops.evaluate_client(
        model, weights, local.client(data, splits, k)
      )
      total = tf.nest.map_structure(tf.add, total, metrics)
    return total

  summed_metrics = local.function(summed_metrics)

  def evaluate(weights, data):
    total = local(summed_metrics, weights, data)
    return collections.OrderedDict(
      (name, tf.convert_to_tensor(finalize(total[name])).numpy())
      for name, finalize in finalizers.items()
    )

  return evaluate


@pytest.mark.parametrize('which', ['mlr', 'char_lstm'])
def test_evaluation_without_autograph_is_bit_identical(which):
  """The evaluation traced without AutoGraph and finalized in one
  tf.function (built in 0.20 s instead of 0.98 s on Synthetic,
  docs/PERFORMANCE.md "Start-up and memory") gives the very same numbers
  as the AutoGraph reference, bit for bit."""
  if which == 'mlr':
    task, arrays = helpers.task_and_arrays()
    model_fn = task.model_fn
  else:
    model_fn, arrays = _char_lstm_task()
  weights = _perturbed_weights(model_fn)
  got = evaluation.build_evaluation(model_fn, across_clients=False)
  want = _reference_evaluation(model_fn)
  for clients in (arrays, arrays[1:3]):
    a, b = got(weights, clients), want(weights, clients)
    assert list(a) == list(b)
    for key in b:
      assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), key


@pytest.mark.parametrize('which', ['mlr', 'char_lstm'])
def test_keras_metrics_are_built_when_traced_not_per_evaluation(which):
  """TFF's Keras finalizers build a new Keras metric, variables and all,
  whenever they run (25 ms of every evaluation of `make run`, profiled);
  the evaluation builds them while it traces, and evaluating creates no
  variable."""
  import tensorflow as tf

  if which == 'mlr':
    task, arrays = helpers.task_and_arrays()
    model_fn = task.model_fn
  else:
    model_fn, arrays = _char_lstm_task()
  evaluate = evaluation.build_evaluation(model_fn)
  weights = _perturbed_weights(model_fn)
  created = []

  def counted(next_creator, **kwargs):
    created.append(kwargs.get('name'))
    return next_creator(**kwargs)

  with tf.variable_creator_scope(counted):
    whole, part = evaluate(weights, arrays), evaluate(weights, arrays[1:3])
  assert created == []
  assert whole['num_examples'] != part['num_examples']


@pytest.mark.parametrize('rows', [7, 512])
def test_inference_predicts_in_parts_bit_identically(rows):
  """A chunk's forward pass predicts `PREDICT_ROWS` rows at a time (a
  CNN's evaluation peaked 0.7 GB higher predicting 4,096 at once): the
  same metrics, bit for bit, as predicting the whole chunk (the reference
  evaluation), with ragged last parts; the gradient passes of the
  dissimilarity are left whole. (The MLR's default evaluation is one
  compiled pass: across_clients=False keeps these passes.)"""
  task, arrays = helpers.task_and_arrays()
  weights = _perturbed_weights(task.model_fn)
  want = _reference_evaluation(task.model_fn)(weights, arrays)
  with (
    mock.patch.object(model_ops, 'PREDICT_ROWS', rows),
    mock.patch.object(
      model_ops, 'predict_in_parts', wraps=model_ops.predict_in_parts
    ) as in_parts,
  ):
    got = evaluation.build_evaluation(task.model_fn, across_clients=False)(
      weights, arrays
    )
    traced = in_parts.call_count
    evaluation.build_dissimilarity(task.model_fn)(weights, arrays)
  assert traced and in_parts.call_count == traced
  assert sum(len(a['y']) for a in arrays) > 2 * rows  # Several parts.
  for key in want:
    assert np.asarray(got[key]).tobytes() == np.asarray(want[key]).tobytes()


@pytest.mark.fast
def test_predict_in_parts_concatenates_nested_predictions():
  import tensorflow as tf

  x = tf.reshape(tf.range(23, dtype=tf.float32), [23, 1])
  calls = []

  def predict(rows, training):
    calls.append(training)
    return {'double': 2 * rows, 'ids': tf.cast(rows, tf.int32)[:, 0]}

  got = model_ops.predict_in_parts(predict, x, False, rows=5)
  np.testing.assert_array_equal(got['double'], 2 * x.numpy())
  np.testing.assert_array_equal(got['ids'], np.arange(23))
  assert len(calls) == 5 and not any(calls)


@pytest.mark.parametrize('chunk_size,rows_per_pass', [(4, 5), (3, 100)])
def test_predictions_across_clients_equal_client_by_client(
  chunk_size, rows_per_pass
):
  """The char-LSTM (metrics by client: its loss is a mean over each batch)
  has its predictions made for several clients at once, each client's
  batches then given to its metrics: the same metrics and clients'
  accuracies as client by client, with clients cut into several chunks
  (a small CHUNK_SIZE), passes that cross clients, and a client without
  examples."""
  model_fn, arrays = _char_lstm_task()
  clients = arrays[:2] + [_no_examples(arrays[2])] + arrays + [arrays[2]]
  weights = _perturbed_weights(model_fn)
  with (
    mock.patch.object(model_ops, 'CHUNK_SIZE', chunk_size),
    mock.patch.object(
      evaluation, '_across_clients', wraps=evaluation._across_clients
    ) as across,
  ):
    got = evaluation.build_evaluation(
      model_fn, rows_per_pass=rows_per_pass
    ).with_clients(weights, clients)
    assert across.called
    want = evaluation.build_evaluation(
      model_fn, across_clients=False
    ).with_clients(weights, clients)
  _assert_same(got[0], want[0])
  for key in ('num_examples', 'num_batches'):
    assert got[0][key] == want[0][key], key
  assert want[0]['num_batches'] > len(clients)  # Clients of several chunks.
  np.testing.assert_array_equal(got[1].counted, want[1].counted)
  np.testing.assert_array_equal(got[1].correct, want[1].correct)
  np.testing.assert_array_equal(got[1].num_examples, want[1].num_examples)


def test_clients_packed_in_one_array_are_evaluated_without_a_copy():
  """Consecutive slices of one array (tasks.base.packed_clients) are joined
  as a view of it, and handed to TensorFlow without a copy (DLPack)."""
  from tasks import base

  x = np.arange(200 * 6, dtype=np.uint8).reshape(200, 6)
  y = np.arange(200, dtype=np.int64) % 7
  rng = np.random.default_rng(0)
  indices = np.split(rng.permutation(200), [30, 31, 120])
  clients = list(
    base.packed_clients(
      collections.OrderedDict(
        x=(x, lambda rows: rows.astype(np.float32) / 255.0),
        y=(y, lambda rows: rows.astype(np.int32)),
      ),
      indices,
      str,
    ).values()
  )
  for client, idx in zip(clients, indices):  # Each its own rows, converted.
    np.testing.assert_array_equal(
      client['x'], x[idx].astype(np.float32) / 255.0
    )
    assert client['y'].dtype == np.int32
  joined = client_tensors._joined([c['x'] for c in clients])
  assert np.shares_memory(joined, clients[0]['x'])
  np.testing.assert_array_equal(
    joined, np.concatenate([c['x'] for c in clients])
  )
  assert joined.ctypes.data % 64 == 0
  with mock.patch.object(
    evaluation.tf, 'constant', side_effect=AssertionError('copied')
  ):
    tensor = client_tensors._tensor(joined)
  np.testing.assert_array_equal(tensor.numpy(), joined)
  # Not consecutive: a copy, aligned, with numpy's promoted dtype.
  mixed = client_tensors._joined(
    [
      np.ones((2, 3), np.float32),
      np.zeros((1, 3), np.float64),
    ]
  )
  assert mixed.dtype == np.float64 and mixed.ctypes.data % 64 == 0


def _mlr_task():
  task, arrays = helpers.task_and_arrays()
  return task.model_fn, arrays


@pytest.mark.parametrize('which', ['mlr', 'char_lstm'])
def test_per_client_accuracy_is_each_client_evaluated_alone(which):
  """Across clients (the MLR: matches summed by client) and client by
  client (the char-LSTM: each client's own metric state), the accuracy of
  every client is the evaluation's accuracy of that client on its own;
  the global metrics are those of the plain call, bit for bit."""
  model_fn, arrays = _mlr_task() if which == 'mlr' else _char_lstm_task()
  weights = _perturbed_weights(model_fn)
  evaluate = evaluation.build_evaluation(model_fn)
  assert evaluate.per_client_accuracy
  clients = arrays[:12]
  metrics, per_client = evaluate.with_clients(weights, clients)
  plain = evaluate(weights, clients)
  assert list(metrics) == list(plain)
  for key in plain:
    assert (
      np.asarray(metrics[key]).tobytes() == np.asarray(plain[key]).tobytes()
    ), key
  assert len(per_client.accuracy) == len(clients)
  np.testing.assert_array_equal(
    per_client.num_examples, [len(c['y']) for c in clients]
  )
  alone = [evaluate(weights, [c])['accuracy'] for c in clients]
  np.testing.assert_allclose(per_client.accuracy, alone, rtol=1e-6)
  assert len(set(per_client.accuracy.tolist())) > 1  # Not one number.
  if which == 'mlr':  # And independently of TensorFlow: argmax(xW + b) = y.
    kernel, bias = weights.trainable
    correct = [
      np.sum(np.argmax(c['x'] @ kernel + bias, axis=1) == c['y'])
      for c in clients
    ]
    np.testing.assert_array_equal(per_client.correct, correct)
    np.testing.assert_array_equal(per_client.counted, per_client.num_examples)
  else:  # Accuracy over the non-pad target characters.
    np.testing.assert_array_equal(
      per_client.counted, [np.sum(c['y'] != 0) for c in clients]
    )


@pytest.mark.parametrize('which', ['mlr', 'char_lstm'])
def test_pooled_accuracy_is_the_weighted_mean_of_client_accuracies(which):
  model_fn, arrays = _mlr_task() if which == 'mlr' else _char_lstm_task()
  weights = _perturbed_weights(model_fn)
  metrics, per_client = evaluation.build_evaluation(model_fn).with_clients(
    weights, arrays
  )
  # Weighted by what each accuracy counts: n_k for the MLR (examples), the
  # non-pad characters for the char-LSTM.
  np.testing.assert_allclose(
    metrics['accuracy'],
    np.average(per_client.accuracy, weights=per_client.counted),
    rtol=1e-6,
  )
  if which == 'mlr':
    np.testing.assert_allclose(
      metrics['accuracy'],
      np.average(per_client.accuracy, weights=per_client.num_examples),
      rtol=1e-6,
    )
    assert per_client.counted.sum() == metrics['num_examples']
  # The counts are whole numbers, exactly those behind the global accuracy.
  assert np.all(per_client.correct == np.round(per_client.correct))
  assert per_client.correct.sum() == round(
    float(metrics['accuracy']) * per_client.counted.sum()
  )


def _no_examples(client):
  return collections.OrderedDict(
    (name, value[:0]) for name, value in client.items()
  )


def test_clients_without_test_data_are_excluded():
  model_fn, arrays = _mlr_task()
  weights = _perturbed_weights(model_fn)
  evaluate = evaluation.build_evaluation(model_fn)
  with_data = arrays[:5]
  clients = (
    [_no_examples(arrays[5])]
    + with_data[:3]
    + [_no_examples(arrays[6])]
    + with_data[3:]
  )
  metrics, per_client = evaluate.with_clients(weights, clients)
  want_metrics, want = evaluate.with_clients(weights, with_data)
  for key in want_metrics:  # The empty clients change nothing...
    assert (
      np.asarray(metrics[key]).tobytes()
      == np.asarray(want_metrics[key]).tobytes()
    ), key
  empty = np.array([True, False, False, False, True, False, False])
  np.testing.assert_array_equal(per_client.num_examples == 0, empty)
  np.testing.assert_array_equal(per_client.counted == 0, empty)
  assert np.all(np.isnan(per_client.accuracy[empty]))
  np.testing.assert_array_equal(per_client.accuracy[~empty], want.accuracy)
  # ...and are left out of the spread across clients.
  assert evaluation.client_accuracy_summary(
    per_client.accuracy, per_client.counted
  ) == (evaluation.client_accuracy_summary(want.accuracy, want.counted))


def _percentile_type7(values, q):
  """Hyndman & Fan's type 7: linear between the order statistics at
  h = (n − 1) q."""
  x = sorted(values)
  h = (len(x) - 1) * q
  low = int(np.floor(h))
  high = min(low + 1, len(x) - 1)
  return x[low] + (h - low) * (x[high] - x[low])


@pytest.mark.fast
def test_client_accuracy_summary():
  rng = np.random.default_rng(3)
  for n in (1, 2, 7, 10, 101):
    accuracy = rng.uniform(0.2, 1.0, n)
    counted = rng.integers(1, 50, n)
    accuracy_with_empty = np.append(accuracy, np.nan)
    summary = evaluation.client_accuracy_summary(
      accuracy_with_empty, np.append(counted, 0), prefix='client_acc'
    )
    mean = sum(accuracy) / n
    want = {
      'client_acc_p10': _percentile_type7(accuracy, 0.1),
      'client_acc_p50': _percentile_type7(accuracy, 0.5),
      'client_acc_p90': _percentile_type7(accuracy, 0.9),
      'client_acc_min': min(accuracy),
      'client_acc_std': np.sqrt(sum((a - mean) ** 2 for a in accuracy) / n),
    }
    assert list(summary) == list(want)
    for key, value in want.items():
      assert summary[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    # Unweighted: the clients' sizes do not matter.
    assert evaluation.client_accuracy_summary(
      accuracy, np.ones(n)
    ) == pytest.approx(evaluation.client_accuracy_summary(accuracy, counted))
  assert list(evaluation.client_accuracy_summary([0.5, 0.7], [3, 4])) == [
    'client_test_accuracy_p10',
    'client_test_accuracy_p50',
    'client_test_accuracy_p90',
    'client_test_accuracy_min',
    'client_test_accuracy_std',
  ]
  assert evaluation.client_accuracy_summary([0.5, 0.7], [3, 4])[
    'client_test_accuracy_p50'
  ] == pytest.approx(0.6)
  nothing = evaluation.client_accuracy_summary([np.nan, np.nan], [0, 0])
  assert all(np.isnan(v) for v in nothing.values())
  with pytest.raises(ValueError, match='one value per client'):
    evaluation.client_accuracy_summary([0.5, 0.7], [3])
  with pytest.raises(ValueError, match='not finite'):
    evaluation.client_accuracy_summary([0.5, np.nan], [3, 4])
  with pytest.raises(ValueError, match='>= 0'):
    evaluation.client_accuracy_summary([0.5, 0.7], [3, -4])


def test_a_model_without_per_client_accuracy_says_so():
  """Matches averaged otherwise than one per target (here: masked), in
  forward passes across clients: the global metrics only."""
  import tensorflow as tf
  import tensorflow_federated as tff

  task, arrays = helpers.task_and_arrays()

  def model_fn():
    return tff.learning.models.from_keras_model(
      tf.keras.Sequential([tf.keras.layers.Dense(10, input_shape=(60,))]),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=task.model_fn().input_spec,
      metrics=[text_models.MaskedSparseCategoricalAccuracy(name='accuracy')],
    )

  evaluate = evaluation.build_evaluation(model_fn)
  assert not evaluate.per_client_accuracy
  weights = learning.initial_model_weights(model_fn, 0)
  assert 0 <= evaluate(weights, arrays[:3])['accuracy'] <= 1
  with pytest.raises(ValueError, match='per-client accuracy'):
    evaluate.with_clients(weights, arrays[:3])


def _dense_task(layers_fn):
  """A Keras classifier of Synthetic's 60 features: `layers_fn()`, then a
  dense layer of its 10 classes; and Synthetic's clients."""
  import tensorflow as tf

  task, arrays = helpers.task_and_arrays()
  model_fn = model_ops.KerasModelFn(
    lambda: tf.keras.Sequential(
      [tf.keras.Input([60]), *layers_fn(), tf.keras.layers.Dense(10)]
    ),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True
    ),
    input_spec=task.model_fn.input_spec,
    metrics_fn=lambda: [
      tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')
    ],
  )
  return model_fn, arrays


def test_a_dense_model_is_evaluated_in_one_compiled_pass():
  """A dense model (a hidden ReLU layer) is evaluated in one XLA program:
  the TFF computation's metrics to float32 rounding, and the passes'
  (across_clients=False) per-client accuracies and num_batches exactly,
  with chunks that cross clients, a last chunk past the data's end, and
  clients without examples."""
  import tensorflow as tf

  model_fn, arrays = _dense_task(
    lambda: [tf.keras.layers.Dense(32, activation='relu')]
  )
  weights = _perturbed_weights(model_fn, scale=0.1)
  reference = federated_evaluation.build_federated_evaluation(model_fn)
  with (
    mock.patch.object(model_ops, 'CHUNK_SIZE', 97),
    mock.patch.object(
      compiled_evaluation, 'sums_of', wraps=compiled_evaluation.sums_of
    ) as compiled_sums,
  ):
    evaluate = evaluation.build_evaluation(model_fn)
    assert compiled_sums.called
    passes = evaluation.build_evaluation(model_fn, across_clients=False)
  whole = evaluate(weights, arrays)
  assert 0.1 < whole['accuracy'] < 0.9 and whole['num_batches'] > 1
  empty = _no_examples(arrays[0])
  for clients in (
    arrays,
    [empty] + arrays[3:9] + [empty],
    [arrays[1]] * 4,
    [empty, empty],
  ):
    metrics, per_client = evaluate.with_clients(weights, clients)
    _assert_same(metrics, reference(weights, clients), ignore=('num_batches',))
    want_metrics, want = passes.with_clients(weights, clients)
    assert metrics['num_batches'] == want_metrics['num_batches']
    np.testing.assert_array_equal(per_client.correct, want.correct)
    np.testing.assert_array_equal(per_client.counted, want.counted)
    np.testing.assert_array_equal(per_client.num_examples, want.num_examples)


@pytest.mark.parametrize('which', ['conv', 'no_xla_kernel'])
def test_a_model_xla_runs_slower_or_cannot_compile_keeps_the_passes(which):
  """A convolution (XLA's CPU code runs it slower: `compiled.unpaying`)
  or an op XLA has no kernel for (`compiled.unsupported`): the model is
  evaluated by the passes, bit for bit those of across_clients=False."""
  import tensorflow as tf

  def no_xla_kernel(x):
    y = tf.numpy_function(np.tanh, [x], tf.float32, stateful=False)
    return tf.ensure_shape(y, x.shape)

  model_fn, arrays = _dense_task(
    {
      'conv': lambda: [
        tf.keras.layers.Reshape([60, 1]),
        tf.keras.layers.Conv1D(4, 5, activation='relu'),
        tf.keras.layers.Flatten(),
      ],
      'no_xla_kernel': lambda: [tf.keras.layers.Lambda(no_xla_kernel)],
    }[which]
  )
  weights = _perturbed_weights(model_fn, scale=0.1)
  compiled = compiled_evaluation.compiled
  with (
    mock.patch.object(
      compiled, 'unsupported', wraps=compiled.unsupported
    ) as unsupported,
    mock.patch.object(
      evaluation,
      '_evaluate_with_matches',
      wraps=evaluation._evaluate_with_matches,
    ) as passes,
  ):
    evaluate = evaluation.build_evaluation(model_fn)
  assert passes.called
  # The convolution is refused before XLA is asked.
  assert unsupported.called == (which == 'no_xla_kernel')
  got = evaluate.with_clients(weights, arrays)
  want = evaluation.build_evaluation(
    model_fn, across_clients=False
  ).with_clients(weights, arrays)
  for key in want[0]:
    assert np.asarray(got[0][key]).tobytes() == (
      np.asarray(want[0][key]).tobytes()
    ), key
  np.testing.assert_array_equal(got[1].correct, want[1].correct)


def test_evaluations_of_one_model_share_its_compiled_program(monkeypatch):
  """Two evaluations of the same dense model on data of the same shapes
  in one process (a notebook's runs) share one XLA program, which gives
  what a fresh one gives; another model gets its own."""
  import tensorflow as tf

  from tff_algos.simulation import compiled

  monkeypatch.setattr(compiled, '_ROUNDS', collections.OrderedDict())
  model_fn, arrays = _dense_task(
    lambda: [tf.keras.layers.Dense(32, activation='relu')]
  )
  weights = _perturbed_weights(model_fn, scale=0.1)
  first = evaluation.build_evaluation(model_fn)(weights, arrays)
  assert len(compiled._ROUNDS) == 1
  again = evaluation.build_evaluation(model_fn)(weights, arrays)
  assert len(compiled._ROUNDS) == 1 and again == first
  other, _ = _dense_task(lambda: [tf.keras.layers.Dense(16)])
  evaluation.build_evaluation(other)
  assert len(compiled._ROUNDS) == 2
