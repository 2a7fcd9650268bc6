"""Client work shared by every algorithm: proximal minibatch SGD and gradients.

A client's input to one round is its whole local training set plus the
minibatch schedule the server-side sampler drew for it (see `sampling.py`):

    OrderedDict(data=<the model's input_spec, batch dim None>,
                example_order=int32[None],  # indices into data, all epochs
                batch_ends=int32[None])     # end offset of each minibatch

so the number of local examples n_k (the papers' aggregation weight) is known
regardless of how many epochs the client ran, and the order of every minibatch
is fixed by (seed, round, client) outside the computation.
"""

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import statistics

ModelFn = Callable[[], tff.learning.models.VariableModel]
EVAL_CHUNK_SIZE = 4096  # Examples per forward pass when a client's data is
                        # processed "as one batch" (gradients, evaluation).


def batched_spec(input_spec):
  """The TensorSpecs of a client's whole dataset, given the model's batch
  spec (any number of examples)."""
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec([None] + list(s.shape[1:]), s.dtype),
      input_spec)


def _batched_spec_type(input_spec):
  """The TFF type of a client's whole dataset, given the model's batch spec."""
  return tff.types.tensorflow_to_type(batched_spec(input_spec))


def client_data_type(input_spec):
  """The TFF type of one client's training input (see the module docstring).

  TFF's ClientWorkProcess requires client data to be a sequence, so the
  input is a sequence holding exactly one element, the struct above.
  """
  return tff.SequenceType(collections.OrderedDict(
      data=_batched_spec_type(input_spec),
      example_order=tff.TensorType(np.int32, [None]),
      batch_ends=tff.TensorType(np.int32, [None])))


def dataset_type(input_spec):
  """The TFF type of a client's data for evaluation and gradients."""
  return _batched_spec_type(input_spec)


def num_examples(data):
  return tf.shape(tf.nest.flatten(data)[0])[0]


def _take(data, indices):
  return tf.nest.map_structure(lambda t: tf.gather(t, indices), data)


def _chunk(data, start):
  end = tf.minimum(start + EVAL_CHUNK_SIZE, num_examples(data))
  return tf.nest.map_structure(lambda t: t[start:end], data)


def assign_weights(model, weights):
  tf.nest.map_structure(lambda v, t: v.assign(t),
                        tff.learning.models.ModelWeights.from_model(model),
                        weights)


def _full_batch_gradient(model, data):
  """∇F_k(w) = gradient of the mean loss over all of `data` (in chunks)."""
  trainable = model.trainable_variables
  total = tf.nest.map_structure(tf.zeros_like, trainable)
  n = num_examples(data)
  for start in tf.range(0, n, EVAL_CHUNK_SIZE):
    chunk = _chunk(data, start)
    with tf.GradientTape() as tape:
      loss = model.forward_pass(chunk, training=True).loss
    share = tf.cast(num_examples(chunk), tf.float32) / tf.cast(n, tf.float32)
    total = tf.nest.map_structure(lambda t, g: t + share * g, total,
                                  tape.gradient(loss, trainable))
  return total


@tf.function
def client_gradient(model, weights, data):
  """∇F_k(w) at the given model weights, over all of the client's data."""
  assign_weights(model, weights)
  return _full_batch_gradient(model, data)


@tf.function
def evaluate_client(model, weights, data):
  """The model's metrics over all of `data`, as unfinalized sums."""
  assign_weights(model, weights)
  for start in tf.range(0, num_examples(data), EVAL_CHUNK_SIZE):
    model.forward_pass(_chunk(data, start), training=False)
  return model.report_local_unfinalized_metrics()


def _weight(client_weighting, n):
  if client_weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
    return tf.cast(n, tf.float32)
  if client_weighting == tff.learning.ClientWeighting.UNIFORM:
    return tf.constant(1.0)
  raise ValueError(f'Unsupported client weighting {client_weighting}.')


def _build_client_work(model_fn, state_value, local_update, client_weighting,
                       report_update_spread=False):
  """Wraps `local_update(state, model, initial_weights, client_input)`.

  The state (hyper-parameters such as μ) lives at the server, is broadcast to
  the clients each round and is exposed through get/set_hparams, so it can be
  changed between rounds without rebuilding the process. Measurements: the
  sampled clients' running training metrics, the local steps and clients
  that took part, and optionally `update_spread` = (1/K)Σ‖u_k − ū‖².
  """
  with tf.Graph().as_default():
    model = model_fn()
    aggregate_metrics = tff.learning.metrics.sum_then_finalize(
        model.metric_finalizers())
    weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = client_data_type(model.input_spec)

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(state_value, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tf.function
  def train(model, state, initial_weights, client_input):
    assign_weights(model, initial_weights)
    update, steps = local_update(state, model, initial_weights, client_input)
    weight = _weight(client_weighting, num_examples(client_input['data']))
    return (tff.learning.templates.ClientResult(update=update,
                                                update_weight=weight),
            model.report_local_unfinalized_metrics(), steps)

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def train_client(state, initial_weights, client_input):
    return train(model_fn(), state, initial_weights,
                 client_input.get_single_element())

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_input):
    result, metrics, steps = tff.federated_map(
        train_client, (tff.federated_broadcast(state), weights, client_input))
    measurements = collections.OrderedDict(
        train=aggregate_metrics(metrics),
        local_steps=tff.federated_sum(steps),
        participants=tff.federated_sum(tff.federated_value(1, tff.CLIENTS)))
    if report_update_spread:
      _, measurements['update_spread'] = statistics.federated_spread(
          result.update)
    measurements = tff.federated_zip(measurements)
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn)


def build_proximal_sgd_client_work(
    model_fn: ModelFn,
    optimizer: tff.learning.optimizers.Optimizer,
    mu: float = 0.0,
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    report_update_spread: bool = False,
) -> tff.learning.templates.ClientWorkProcess:
  """Local solver of h_k(w; w_t) = F_k(w) + μ/2‖w − w_t‖² (FedProx, eq. 2).

  Each minibatch step feeds `optimizer` (the papers': plain SGD,
  `tff.learning.optimizers.build_sgdm(lr)`) the gradient ∇F_k(w) + μ(w − w_t).
  μ = 0 is FedAvg's local solver (McMahan et al. 2017, Algorithm 1). The
  update is w_t − w_k (TFF's convention: a pseudo-gradient for the server
  optimizer), weighted by n_k, the client's number of training examples
  (`NUM_EXAMPLES`), or 1 (`UNIFORM`). Hyper-parameters: `mu` and the
  optimizer's (e.g. `learning_rate`).
  """
  with tf.Graph().as_default():
    optimizer_hparams = optimizer.get_hparams(optimizer.initialize(
        tf.TensorSpec([], tf.float32)))

  def proximal_sgd(state, model, initial_weights, client_input):
    data = client_input['data']
    order, ends = client_input['example_order'], client_input['batch_ends']
    trainable = model.trainable_variables
    anchor = tuple(tf.nest.flatten(initial_weights.trainable))
    optimizer_state = optimizer.set_hparams(
        optimizer.initialize(tuple(tf.TensorSpec.from_tensor(w)
                                   for w in anchor)),
        collections.OrderedDict((k, state[k]) for k in optimizer_hparams))
    start = tf.constant(0)
    for end in ends:
      batch = _take(data, order[start:end])
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      weights = tuple(tf.identity(w) for w in trainable)
      gradients = tuple(tf.convert_to_tensor(g)  # Embeddings: IndexedSlices.
                        for g in tape.gradient(loss, trainable))
      # μ = 0 (FedAvg) skips the proximal term: three elementwise passes
      # over the weights per step, ~15% of a CNN step's CPU time
      # (docs/PERFORMANCE.md). Same values: g + 0·(w − w_t) = g.
      proximal_grads = tf.cond(
          tf.equal(state['mu'], 0.0), lambda: gradients,
          lambda: tuple(g + state['mu'] * (w - w0)  # pylint: disable=g-long-lambda
                        for g, w, w0 in zip(gradients, weights, anchor)))
      optimizer_state, weights = optimizer.next(optimizer_state, weights,
                                                proximal_grads)
      for variable, value in zip(trainable, weights):
        variable.assign(value)
      start = end
    update = [w0 - w for w0, w in zip(anchor, trainable)]
    return (tf.nest.pack_sequence_as(initial_weights.trainable, update),
            tf.size(ends))

  state = collections.OrderedDict(mu=float(mu), **optimizer_hparams)
  return _build_client_work(model_fn, state, proximal_sgd, client_weighting,
                            report_update_spread)


def build_gradient_client_work(
    model_fn: ModelFn,
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
) -> tff.learning.templates.ClientWorkProcess:
  """FedSGD's client work: one full-batch gradient ∇F_k(w_t), weight n_k.

  (McMahan et al. 2017, §2: the C-fraction FedSGD baseline with B = ∞, E = 1.)
  The minibatch schedule is ignored: the gradient is over all local data.
  """

  def gradient(state, model, initial_weights, client_input):
    del state
    gradient = _full_batch_gradient(model, client_input['data'])
    return (tf.nest.pack_sequence_as(initial_weights.trainable, gradient),
            tf.constant(1))

  return _build_client_work(model_fn, collections.OrderedDict(), gradient,
                            client_weighting)
