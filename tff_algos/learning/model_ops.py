"""What the client works and the evaluation do to a model and its data.

Plain TensorFlow on a `tff.learning.models.VariableModel`, usable inside a
TFF computation and outside one (the in-process evaluation).
"""

import tensorflow as tf
import tensorflow_federated as tff

CHUNK_SIZE = 4096  # Examples per forward pass when a client's whole data is
                   # processed "as one batch" (gradients, evaluation).


def batched_spec(input_spec):
  """The TensorSpecs of a client's whole dataset, given the model's batch
  spec (any number of examples)."""
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec([None] + list(s.shape[1:]), s.dtype),
      input_spec)


def dataset_type(input_spec):
  """The TFF type of a client's whole dataset, given the model's batch spec."""
  return tff.types.tensorflow_to_type(batched_spec(input_spec))


def num_examples(data):
  return tf.shape(tf.nest.flatten(data)[0])[0]


def take(data, indices):
  return tf.nest.map_structure(lambda t: tf.gather(t, indices), data)


def chunk(data, start):
  """data[start:start + CHUNK_SIZE] (fewer at the end)."""
  end = tf.minimum(start + CHUNK_SIZE, num_examples(data))
  return tf.nest.map_structure(lambda t: t[start:end], data)


def assign_weights(model, weights):
  tf.nest.map_structure(lambda v, t: v.assign(t),
                        tff.learning.models.ModelWeights.from_model(model),
                        weights)


def weighted_gradient(model, batch):
  """(n_b · ∇(mean loss over the batch), n_b) at the model's weights."""
  with tf.GradientTape() as tape:
    loss = model.forward_pass(batch, training=True).loss
  n = num_examples(batch)
  return ([tf.cast(n, tf.float32) * tf.convert_to_tensor(g)  # Embeddings:
           for g in tape.gradient(loss, model.trainable_variables)],  # sparse.
          n)


def full_batch_gradient(model, data):
  """∇F_k(w) = Σ_c n_c ∇F_c(w) / n_k over chunks c of all of `data`."""
  total = [tf.zeros_like(v) for v in model.trainable_variables]
  for start in tf.range(0, num_examples(data), CHUNK_SIZE):
    gradient, _ = weighted_gradient(model, chunk(data, start))
    total = [t + g for t, g in zip(total, gradient)]
  n = tf.cast(num_examples(data), tf.float32)
  return [t / n for t in total]


@tf.function
def client_gradient(model, weights, data):
  """∇F_k(w) at the given model weights, over all of the client's data."""
  assign_weights(model, weights)
  return full_batch_gradient(model, data)


@tf.function
def evaluate_client(model, weights, data):
  """The model's metrics over all of `data`, as unfinalized sums."""
  assign_weights(model, weights)
  for start in tf.range(0, num_examples(data), CHUNK_SIZE):
    model.forward_pass(chunk(data, start), training=False)
  return model.report_local_unfinalized_metrics()
