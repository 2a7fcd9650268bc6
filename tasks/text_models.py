"""The papers' text models as TFF `VariableModel` factories.

* `char_lstm`: FedAvg's Shakespeare model (McMahan et al. 2017, §3), as in
  TFF's `simulation.baselines.shakespeare`: an 8-d character embedding, two
  LSTM layers of 256 units and a dense layer giving a logit per vocabulary
  symbol at each of the 80 positions (next-character prediction).
  `units=100` is FedProx's (Li et al. 2020, App. C.1: two LSTM layers of
  100 units after the same 8-d embedding).
  Padding (id `pad_id`, 0) is masked in BOTH the loss and the accuracy: the
  loss is the mean cross-entropy over non-pad target positions, and
  'accuracy' counts non-pad target positions only (TFF's baseline masks pad in
  accuracy only; masking it in the loss too keeps the objective from
  rewarding trivially predicted padding).
* `sent140_lstm`: FedProx's Sent140 model (Li et al. 2020, §5.1; LEAF's
  `stacked_lstm`): word embedding (frozen GloVe vectors when given, else a
  trainable embedding), two LSTM layers of 256 units, and a dense layer on the
  last output giving 2 logits (sparse categorical cross-entropy).

Metric names are 'loss' and 'accuracy', as in `tasks/models.py`.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import model_ops


class MaskedSparseCategoricalAccuracy(
  tf.keras.metrics.SparseCategoricalAccuracy
):
  """Sparse categorical accuracy that ignores targets equal to `pad_id`."""

  def __init__(self, name='accuracy', dtype=None, pad_id=0):
    super().__init__(name=name, dtype=dtype)
    self.pad_id = pad_id

  def update_state(self, y_true, y_pred, sample_weight=None):
    mask = tf.cast(tf.not_equal(y_true, self.pad_id), self._dtype)
    if sample_weight is not None:
      mask *= tf.cast(sample_weight, self._dtype)
    return super().update_state(y_true, y_pred, sample_weight=mask)

  def get_config(self):
    config = super().get_config()
    config['pad_id'] = self.pad_id
    return config


class MaskedSparseCategoricalCrossentropy(tf.keras.losses.Loss):
  """Mean cross-entropy (from logits) over the targets that are not `pad_id`.

  A batch whose targets are all padding has loss 0.
  """

  def __init__(self, pad_id=0, name='masked_sparse_categorical_crossentropy'):
    super().__init__(name=name)
    self.pad_id = pad_id

  def __call__(self, y_true, y_pred, sample_weight=None):
    y_true = tf.cast(y_true, tf.int32)
    mask = tf.cast(tf.not_equal(y_true, self.pad_id), tf.float32)
    if sample_weight is not None:
      mask *= tf.cast(sample_weight, tf.float32)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y_true, logits=tf.cast(y_pred, tf.float32)
    )
    return tf.reduce_sum(losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

  def call(self, y_true, y_pred):  # Unused: __call__ does the reduction.
    raise NotImplementedError

  def get_config(self):
    return dict(pad_id=self.pad_id, name=self.name)


def char_lstm_keras(
  vocab_size: int, sequence_length: int = 80, units: int = 256
):
  """Embedding(vocab, 8) → LSTM(units) → LSTM(units) → Dense(vocab) per
  step."""
  lstm = lambda: tf.keras.layers.LSTM(
    units, return_sequences=True, kernel_initializer='he_normal'
  )
  return tf.keras.Sequential(
    [
      tf.keras.layers.Embedding(vocab_size, 8, input_length=sequence_length),
      lstm(),
      lstm(),
      tf.keras.layers.Dense(vocab_size),
    ]
  )


def char_lstm_num_params(vocab_size: int, units: int = 256) -> int:
  """Trainable parameters of `char_lstm_keras` (all are trainable)."""
  lstm = lambda n_in: 4 * units * (n_in + units + 1)
  return vocab_size * 8 + lstm(8) + lstm(units) + (units + 1) * vocab_size


def char_lstm(
  vocab_size: int, sequence_length: int = 80, pad_id: int = 0, units: int = 256
):
  """No-arg model_fn: the char-LSTM for x, y int32[None, sequence_length]."""
  input_spec = collections.OrderedDict(
    x=tf.TensorSpec([None, sequence_length], tf.int32),
    y=tf.TensorSpec([None, sequence_length], tf.int32),
  )

  def model_fn():
    return tff.learning.models.from_keras_model(
      char_lstm_keras(vocab_size, sequence_length, units),
      loss=MaskedSparseCategoricalCrossentropy(pad_id=pad_id),
      input_spec=input_spec,
      metrics=[MaskedSparseCategoricalAccuracy(name='accuracy', pad_id=pad_id)],
    )

  # Its loss metric is a mean over each batch's non-pad characters: batches
  # mixing clients would weigh them differently, so evaluate per client.
  model_fn.per_client_metrics = True
  return model_fn


def sent140_lstm_keras(
  vocab_size: int,
  sequence_length: int = 25,
  embedding_dim: int = 100,
  embeddings: np.ndarray | None = None,
):
  """Embedding → LSTM(256) → LSTM(256) → Dense(2) on the last output.

  With `embeddings` (a [vocab_size, d] matrix), the embedding is fixed to it
  and frozen; otherwise it is a trainable `embedding_dim`-d embedding. Id 0
  (padding) is masked, so the LSTMs skip the padding after a tweet.
  """
  if embeddings is not None:
    embedding = tf.keras.layers.Embedding(
      vocab_size,
      embeddings.shape[1],
      input_length=sequence_length,
      embeddings_initializer=tf.keras.initializers.Constant(embeddings),
      trainable=False,
      mask_zero=True,
    )
  else:
    embedding = tf.keras.layers.Embedding(
      vocab_size, embedding_dim, input_length=sequence_length, mask_zero=True
    )
  return tf.keras.Sequential(
    [
      embedding,
      tf.keras.layers.LSTM(256, return_sequences=True),
      tf.keras.layers.LSTM(256),
      tf.keras.layers.Dense(2),
    ]
  )


def sent140_lstm_num_params(vocab_size: int, embedding_dim: int, frozen: bool):
  """(trainable, non-trainable) parameter counts of `sent140_lstm_keras`."""
  lstm = lambda n_in: 4 * 256 * (n_in + 256 + 1)
  body = lstm(embedding_dim) + lstm(256) + 256 * 2 + 2
  table = vocab_size * embedding_dim
  return (body, table) if frozen else (body + table, 0)


def sent140_lstm(
  vocab_size: int,
  sequence_length: int = 25,
  embedding_dim: int = 100,
  embeddings: np.ndarray | None = None,
):
  """No-arg model_fn: the Sent140 LSTM for x int32[None, 25], y int32[None]."""
  input_spec = collections.OrderedDict(
    x=tf.TensorSpec([None, sequence_length], tf.int32),
    y=tf.TensorSpec([None], tf.int32),
  )
  if embeddings is not None:
    embeddings = np.asarray(embeddings, np.float32)

  return model_ops.KerasModelFn(
    lambda: sent140_lstm_keras(
      vocab_size, sequence_length, embedding_dim, embeddings
    ),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True
    ),
    input_spec=input_spec,
    metrics_fn=lambda: [
      tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')
    ],
  )
