"""The loss along the line between two models' weights (FedAvg, Figure 1).

FedAvg averages models in parameter space, which for a non-convex loss can
give a model worse than either parent. McMahan et al. 2017 (§2, Figure 1)
show when it does not: two MNIST 2NN models w and w′ trained with plain SGD
on different small datasets, and the loss on the full MNIST training set of
the mixture θ·w + (1 − θ)·w′ for 50 evenly spaced θ ∈ [−0.2, 1.2]. From
different random initializations ('independent') the average θ = 0.5 is
much worse than either parent; from one shared initialization ('shared',
as every round of FedAvg starts its clients from one model w_t) it is
better than either.

Training settings, from the paper's text ("the parent models w and w′ were
each trained on non-overlapping IID samples of 600 examples from the MNIST
training set. Training was via SGD with a fixed learning rate of 0.1 for
240 updates on minibatches of size 50 (or E = 20 passes over the
mini-datasets of size 600)"): `PAPER_SGD`. What the paper does not state,
chosen here (`CHOICES` lists them for the command's output):
  * the initialization: the model's own (Keras: Glorot-uniform kernels,
    zero biases), from seeds drawn from the run's seed;
  * the minibatch order: each pass a fresh random permutation of the
    model's examples, cut into minibatches of 50 (`sampling.ClientSampler.
    minibatch_schedule`, the simulation's own);
  * both cases use the same two datasets and the same minibatch orders, so
    that only the initialization differs between them; w starts from the
    same initialization in both, so it is the same model in both;
  * "loss" is the model's: mean cross-entropy over the 60,000 examples, on
    pixels scaled to [0, 1].
Everything random is a function of one seed.

Runs in this process as plain TensorFlow (the training loop here and
`evaluation.build_evaluation`): no TFF computation, so no TFF worker.
"""

import collections
import dataclasses
import enum
import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos import learning
from tff_algos.learning import model_ops
from tff_algos.simulation import evaluation as evaluation_lib
from tff_algos.simulation import sampling

THETA_LOW, THETA_HIGH = -0.2, 1.2
POINTS = 50
# θ = 1 is w, θ = 0 is w′, θ = 0.5 their average: always evaluated, on the
# grid or not (50 points over [−0.2, 1.2] put 0 and 1 on the grid, not 0.5).
KEY_THETAS = (0.0, 0.5, 1.0)
INDEPENDENT, SHARED = 'independent', 'shared'
# The paper's panel titles.
TITLES = {
  INDEPENDENT: 'Independent initialization',
  SHARED: 'Common initialization',
}


@dataclasses.dataclass(frozen=True)
class SgdSettings:
  """Plain minibatch SGD of one parent model.

  Attributes:
    examples: training examples of each model (disjoint between the two).
    updates: SGD steps.
    batch_size: examples per step.
    learning_rate: the fixed step size.
  """

  examples: int
  updates: int
  batch_size: int
  learning_rate: float

  def __post_init__(self):
    if self.examples < 1 or self.updates < 1 or self.batch_size < 1:
      raise ValueError(f'examples, updates and batch_size must be >= 1: {self}')
    if self.batch_size > self.examples:
      raise ValueError(
        f'batch_size {self.batch_size} is larger than the '
        f'{self.examples} examples of a model'
      )
    if not self.learning_rate > 0:
      raise ValueError(f'learning_rate must be > 0, got {self.learning_rate}')

  @property
  def epochs(self) -> int:
    """Passes over the model's examples the updates need (the last may be
    partial)."""
    batches_per_epoch = math.ceil(self.examples / self.batch_size)
    return math.ceil(self.updates / batches_per_epoch)


PAPER_SGD = SgdSettings(
  examples=600, updates=240, batch_size=50, learning_rate=0.1
)
# What the paper's text fixes, in its words, and what it leaves to us.
FROM_PAPER = (
  '600 examples per model: "non-overlapping IID samples of 600 examples '
  'from the MNIST training set"',
  'SGD, learning rate 0.1, 240 updates, batch size 50: "Training was via '
  'SGD with a fixed learning rate of 0.1 for 240 updates on minibatches '
  'of size 50 (or E = 20 passes over the mini-datasets of size 600)"',
  'model: "the 2NN multi-layer perceptron described in Section 3" (two '
  '200-unit ReLU layers)',
  'θ: "50 evenly spaced values θ ∈ [−0.2, 1.2]"; loss "on the full MNIST '
  'training set"',
)
CHOICES = (
  "initialization: the model's own (Glorot-uniform kernels, zero "
  'biases), seeds drawn from --seed',
  'minibatches: each pass a fresh random permutation of the 600 '
  'examples, cut into batches of 50',
  'both panels train on the same two datasets with the same minibatch '
  'orders; only the initialization differs (w is the same model in both)',
  'loss: mean cross-entropy of the model over all 60,000 training '
  'examples, pixels scaled to [0, 1]',
  'θ = 0.5 is evaluated too (not on the 50-point grid)',
)


class _Stream(enum.IntEnum):
  """Independent random streams drawn from the seed, one per kind of draw
  (offset from `sampling`'s streams, whose keys have another length)."""

  DATA = 100
  INITIALIZATION = 101


def theta_grid(
  points: int = POINTS, low: float = THETA_LOW, high: float = THETA_HIGH
) -> np.ndarray:
  """`points` evenly spaced θ from `low` to `high`.

  Rounded to 12 decimals: np.linspace puts the paper's θ = 0 at −2.8e−17,
  and the mixture there must be w′ itself, not a neighbour of it.
  """
  if points < 2:
    raise ValueError(f'points must be >= 2, got {points}')
  return np.round(np.linspace(low, high, points), 12) + 0.0  # No −0.


def evaluated_thetas(points: int = POINTS) -> np.ndarray:
  """The grid with `KEY_THETAS` added where missing, increasing."""
  return np.union1d(theta_grid(points), KEY_THETAS)


def mix(w, w_prime, theta: float):
  """θ·w + (1 − θ)·w′ of every weight (trainable and not), computed in
  float64 and rounded once to the weights' dtype: θ = 1 gives w and θ = 0
  gives w′ bit for bit."""
  theta = float(theta)
  return tf.nest.map_structure(
    lambda a, b: (
      theta * np.asarray(a, np.float64)
      + (1.0 - theta) * np.asarray(b, np.float64)
    ).astype(np.asarray(a).dtype),
    w,
    w_prime,
  )


class SgdTrainer:
  """Plain minibatch SGD of a model in this process: w ← w − η·∇(mean loss
  over the minibatch), the step of FedAvg's ClientUpdate (and of the
  package's client work with μ = 0 and the plain SGD client optimizer),
  over a given minibatch schedule.

  The model is built once and its training function traced at once (Keras
  changes its model classes when a model is built in a graph, as TFF
  computations build theirs; an eager model traced after that fails).
  """

  def __init__(self, model_fn):
    self._model = model_ops.variable_model_fn(model_fn)()
    self._template = tff.learning.models.ModelWeights.from_model(self._model)
    weight_specs = [
      tf.TensorSpec(v.shape, v.dtype) for v in tf.nest.flatten(self._template)
    ]
    self._train = tf.function(
      self._train_steps,
      input_signature=[
        weight_specs,
        model_ops.batched_spec(self._model.input_spec),
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([], tf.float32),
      ],
    )
    self._train.get_concrete_function()

  def _train_steps(
    self, flat_weights, data, example_order, batch_ends, learning_rate
  ):
    model = self._model
    model_ops.assign_weights(
      model, tf.nest.pack_sequence_as(self._template, flat_weights)
    )
    start = tf.constant(0)
    for end in batch_ends:
      batch = model_ops.take(data, example_order[start:end])
      with tf.GradientTape() as tape:
        loss = model.forward_pass(batch, training=True).loss
      gradients = tape.gradient(loss, model.trainable_variables)
      for variable, gradient in zip(model.trainable_variables, gradients):
        variable.assign_sub(learning_rate * tf.convert_to_tensor(gradient))
      start = end
    return [
      tf.identity(v)
      for v in tf.nest.flatten(
        tff.learning.models.ModelWeights.from_model(model)
      )
    ]

  def __call__(
    self, initial_weights, data, example_order, batch_ends, learning_rate: float
  ):
    """The weights after one SGD step per minibatch: minibatch i is
    `data[example_order[batch_ends[i-1]:batch_ends[i]]]` (from 0 for the
    first). Returns a `tff.learning.models.ModelWeights` of numpy arrays."""
    flat = self._train(
      [tf.constant(w) for w in tf.nest.flatten(initial_weights)],
      data,
      tf.constant(example_order, tf.int32),
      tf.constant(batch_ends, tf.int32),
      tf.constant(learning_rate, tf.float32),
    )
    return tf.nest.pack_sequence_as(self._template, [t.numpy() for t in flat])


def sgd_schedule(settings: SgdSettings, seed: int, model_index: int):
  """(example_order, batch_ends) of `settings.updates` minibatches for
  parent model `model_index` (0: w, 1: w′): the simulation's minibatch
  schedule of a client (each pass a fresh permutation, minibatches of
  `batch_size`, the last of a pass smaller when it does not divide),
  cut after the last update."""
  sampler = sampling.ClientSampler(
    num_clients=2, clients_per_round=2, epochs=settings.epochs, seed=seed
  )
  order, ends = sampler.minibatch_schedule(
    0, model_index, settings.examples, settings.epochs, settings.batch_size
  )
  ends = ends[: settings.updates]
  return order[: ends[-1]], ends


def disjoint_subsets(pool_size: int, count: int, size: int, seed: int):
  """`count` disjoint sets of `size` row indices of a pool of `pool_size`
  rows, drawn uniformly without replacement (each sorted)."""
  if count * size > pool_size:
    raise ValueError(
      f'{count} disjoint sets of {size} examples need '
      f'{count * size}, but the training set has {pool_size}'
    )
  rng = np.random.default_rng([seed, int(_Stream.DATA)])
  drawn = rng.choice(pool_size, count * size, replace=False)
  return [np.sort(part) for part in np.split(drawn, count)]


def initialization_seeds(seed: int) -> tuple[int, int]:
  """Two different seeds of initial weights (w's, and w′'s in the
  independent case), drawn from `seed`."""
  rng = np.random.default_rng([seed, int(_Stream.INITIALIZATION)])
  first, second = rng.choice(2**31 - 1, 2, replace=False)
  return int(first), int(second)


def _rows(clients, indices):
  """OrderedDict of the rows `indices` of the clients' arrays taken as one
  pool (client after client)."""
  sizes = np.asarray([len(next(iter(c.values()))) for c in clients])
  offsets = np.concatenate([[0], np.cumsum(sizes)])
  owner = np.searchsorted(offsets, indices, side='right') - 1
  return collections.OrderedDict(
    (
      name,
      np.concatenate(
        [
          clients[k][name][indices[owner == k] - offsets[k]]
          for k in np.unique(owner)
        ]
      ),
    )
    for name in clients[0]
  )


@dataclasses.dataclass(frozen=True)
class Curve:
  """The loss of θ·w + (1 − θ)·w′ over the full training set, by θ.

  Attributes:
    case: INDEPENDENT or SHARED (how w and w′ were initialized).
    thetas: float64, increasing.
    losses: the loss at each θ (float64 of the evaluation's float32).
    w, w_prime: the parents (`tff.learning.models.ModelWeights`).
    initialization_seeds: of w and of w′.
  """

  case: str
  thetas: np.ndarray
  losses: np.ndarray
  w: object
  w_prime: object
  initialization_seeds: tuple[int, int]

  def loss_at(self, theta: float) -> float:
    """The loss at an evaluated θ (KeyError for another)."""
    where = np.flatnonzero(self.thetas == theta)
    if not where.size:
      raise KeyError(f'θ = {theta} was not evaluated')
    return float(self.losses[where[0]])

  @property
  def minimum(self) -> tuple[float, float]:
    """(θ, loss) of the lowest loss evaluated."""
    i = int(np.argmin(self.losses))
    return float(self.thetas[i]), float(self.losses[i])

  @property
  def best_parent_loss(self) -> float:
    """min(loss(w), loss(w′)): the paper's horizontal line."""
    return min(self.loss_at(0.0), self.loss_at(1.0))


def interpolation_curves(
  model_fn,
  train_clients,
  seed: int,
  points: int = POINTS,
  settings: SgdSettings = PAPER_SGD,
  on_progress=None,
) -> dict:
  """Figure 1 of McMahan et al. 2017: {case: `Curve`} for INDEPENDENT and
  SHARED.

  Args:
    model_fn: the model (a no-argument callable returning a
      `tff.learning.models.VariableModel`; the task's).
    train_clients: the whole training set as a list of client arrays
      (OrderedDicts of equal-length arrays, as `tasks.client_arrays` gives
      them): the two small datasets are drawn from it, and every loss is
      over all of it.
    seed: every random draw derives from it: the two disjoint datasets,
      the initializations, the minibatch orders.
    points: θ values, evenly spaced over [−0.2, 1.2] (θ = 0, 0.5 and 1 are
      evaluated too).
    settings: the SGD of each parent.
    on_progress: called with a line of text as each step finishes.
  """
  say = on_progress or (lambda text: None)
  sizes = [len(next(iter(c.values()))) for c in train_clients]
  subsets = disjoint_subsets(sum(sizes), 2, settings.examples, seed)
  datasets = [_rows(train_clients, s) for s in subsets]
  seed_w, seed_w_prime = initialization_seeds(seed)
  initial = {
    s: learning.initial_model_weights(model_fn, s)
    for s in (seed_w, seed_w_prime)
  }
  trainer = SgdTrainer(model_fn)
  evaluate = evaluation_lib.build_evaluation(model_fn)
  schedules = [sgd_schedule(settings, seed, k) for k in (0, 1)]

  def train(init_seed, k):
    data = collections.OrderedDict(
      (name, tf.constant(array)) for name, array in datasets[k].items()
    )
    return trainer(
      initial[init_seed], data, *schedules[k], settings.learning_rate
    )

  w = train(seed_w, 0)
  parents = {
    INDEPENDENT: (w, train(seed_w_prime, 1), (seed_w, seed_w_prime)),
    SHARED: (w, train(seed_w, 1), (seed_w, seed_w)),
  }
  say(f'trained 3 models ({settings.updates} SGD updates each)')
  thetas = evaluated_thetas(points)
  curves = {}
  for case, (w, w_prime, init_seeds) in parents.items():
    losses = np.asarray(
      [
        float(evaluate(mix(w, w_prime, theta), train_clients)['loss'])
        for theta in thetas
      ]
    )
    curves[case] = Curve(case, thetas, losses, w, w_prime, init_seeds)
    say(f'{case}: {len(thetas)} θ evaluated on {sum(sizes):,} examples')
  return curves
