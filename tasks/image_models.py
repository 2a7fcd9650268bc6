"""The papers' image models, as no-argument TFF `VariableModel` factories.

All output logits (tasks.models._classifier applies
SparseCategoricalCrossentropy(from_logits=True) and an 'accuracy' metric).

- `mlr(784, C)`: FedProx's multinomial logistic regression (MNIST, FEMNIST).
- `mnist_2nn()`: FedAvg's 2NN, two 200-unit ReLU layers: 199,210 parameters.
- `mnist_cnn(C)`: FedAvg's CNN, 5×5 conv 32 → 2×2 max-pool → 5×5 conv 64 →
  2×2 max-pool → FC 512 ReLU → linear C, 'same' padding: 1,663,370
  parameters for C = 10 (1,690,046 for FEMNIST's C = 62).
- `cifar_cnn()`: the TensorFlow CIFAR-10 tutorial CNN FedAvg used, with its
  preprocessing inside the model (`CifarPreprocessing`): 1,068,298
  parameters.

`mlr`, `mnist_2nn` and `mnist_cnn` take float32 images in [0, 1], or with
`pixels=True` the raw uint8 pixels, scaled to [0, 1] inside the model
(`scale_pixels`, bit for bit the same values), so that the MNIST and
FEMNIST tasks keep their images as uint8: a quarter of float32's memory.
"""

import collections
import functools

import tensorflow as tf

from tasks import base
from tasks import models

CIFAR_CNN_PARAMS = 1_068_298
CIFAR_CROP = 24


# A task before wrapping: train/test are {client: OrderedDict(x=, y=)}.
Splits = collections.namedtuple(
  'Splits', 'name train test model_fn description'
)


def as_task(splits: Splits) -> base.FederatedTask:
  return base.FederatedTask(
    name=splits.name,
    train=base.client_data_from_arrays(splits.train),
    test=base.client_data_from_arrays(splits.test),
    model_fn=splits.model_fn,
    description=splits.description,
  )


def tasks_from_splits(splits_loaders):
  """{name: loader(data_dir, seed, **options) -> FederatedTask} from
  Splits loaders (the options a Splits loader takes pass through)."""

  def wrap(load):
    @functools.wraps(load)
    def loader(data_dir, seed, **options):
      return as_task(load(data_dir, seed, **options))

    return loader

  return collections.OrderedDict(
    (name, wrap(load)) for name, load in splits_loaders.items()
  )


def _spec(x_shape, x_dtype=tf.float32):
  return collections.OrderedDict(
    x=tf.TensorSpec([None] + list(x_shape), x_dtype),
    y=tf.TensorSpec([None], tf.int32),
  )


def scale_pixels(x):
  """uint8 pixels k → float32 k / 255 in [0, 1], bit for bit NumPy's
  `x.astype(np.float32) / 255`. In a graph TensorFlow's optimizer rewrites
  x / 255.0 as x * (1 / 255), which rounds differently for some k; it
  leaves `divide_no_nan` a division."""
  return tf.math.divide_no_nan(tf.cast(x, tf.float32), 255.0)


def _image_classifier(layers_fn, shape, pixels):
  """A classifier over images of `shape`: float32 in [0, 1], or with
  `pixels` their uint8 values 0-255, scaled inside the model
  (`scale_pixels`). Raw pixels keep a task's data at a quarter of the
  memory in the process and on the wire, with the same numbers."""

  def keras_model():
    if pixels:
      first = [
        tf.keras.Input(shape, dtype=tf.uint8),
        tf.keras.layers.Lambda(scale_pixels),
      ]
    else:
      first = [tf.keras.Input(shape)]
    return tf.keras.Sequential(first + layers_fn())

  return models._classifier(
    keras_model,
    _spec(shape, tf.uint8 if pixels else tf.float32),
  )


def mlr(num_features: int = 784, num_classes: int = 10, pixels: bool = False):
  """softmax(Wx + b) on flattened images (x float32 [num_features], or
  uint8 pixels with `pixels`)."""
  if not pixels:
    return models.multinomial_logistic_regression(num_features, num_classes)
  return _image_classifier(
    lambda: [tf.keras.layers.Dense(num_classes)], [num_features], pixels
  )


def _mnist_2nn_layers(num_classes):
  return [
    tf.keras.layers.Dense(200, activation='relu'),
    tf.keras.layers.Dense(200, activation='relu'),
    tf.keras.layers.Dense(num_classes),
  ]


def _mnist_cnn_layers(num_classes):
  return [
    tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
    tf.keras.layers.MaxPool2D(2),
    tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu'),
    tf.keras.layers.MaxPool2D(2),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(512, activation='relu'),
    tf.keras.layers.Dense(num_classes),
  ]


def mnist_2nn(num_classes: int = 10, pixels: bool = False):
  """FedAvg's 2NN (x float32 [784] in [0, 1], or uint8 pixels with
  `pixels`)."""
  return _image_classifier(
    lambda: _mnist_2nn_layers(num_classes), [784], pixels
  )


def mnist_cnn(num_classes: int = 10, pixels: bool = False):
  """FedAvg's CNN (x float32 [28, 28, 1] in [0, 1], or uint8 pixels with
  `pixels`)."""
  return _image_classifier(
    lambda: _mnist_cnn_layers(num_classes), [28, 28, 1], pixels
  )


class CifarPreprocessing(tf.keras.layers.Layer):
  """FedAvg's CIFAR-10 preprocessing (the TF tutorial's), as a layer.

  Input: uint8 [32, 32, 3] (or float in [0, 255]). training=True: per image a
  random 24×24 crop, random left-right flip, random brightness (max delta
  63/255 of the range) and contrast (0.2-1.8), then per-image
  standardization. training=False/None: the centre 24×24 crop, standardized.
  Uses stateful TF random ops only (no variables), so it is safe inside TFF.
  """

  def call(self, inputs, training=None):
    x = tf.cast(inputs, tf.float32) / 255.0
    if training:

      def augment(image):
        image = tf.image.random_crop(image, [CIFAR_CROP, CIFAR_CROP, 3])
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(image, max_delta=63 / 255)
        image = tf.image.random_contrast(image, lower=0.2, upper=1.8)
        return image

      x = tf.map_fn(
        augment,
        x,
        fn_output_signature=tf.TensorSpec(
          [CIFAR_CROP, CIFAR_CROP, 3], tf.float32
        ),
      )
    else:
      offset = (32 - CIFAR_CROP) // 2
      x = x[:, offset : offset + CIFAR_CROP, offset : offset + CIFAR_CROP, :]
    return tf.image.per_image_standardization(x)

  def compute_output_shape(self, input_shape):
    return tf.TensorShape([input_shape[0], CIFAR_CROP, CIFAR_CROP, 3])


def _lrn(x):
  return tf.nn.local_response_normalization(
    x, depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75
  )


def cifar_cnn_keras(num_classes: int = 10):
  """TF tutorial cifar10.py: conv64-pool-LRN, conv64-LRN-pool, 384, 192, 10."""
  inputs = tf.keras.Input([32, 32, 3], dtype=tf.uint8)
  x = CifarPreprocessing()(inputs)
  x = tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu')(x)
  x = tf.keras.layers.MaxPool2D(3, strides=2, padding='same')(x)
  x = tf.keras.layers.Lambda(_lrn)(x)
  x = tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu')(x)
  x = tf.keras.layers.Lambda(_lrn)(x)
  x = tf.keras.layers.MaxPool2D(3, strides=2, padding='same')(x)
  x = tf.keras.layers.Flatten()(x)
  x = tf.keras.layers.Dense(384, activation='relu')(x)
  x = tf.keras.layers.Dense(192, activation='relu')(x)
  outputs = tf.keras.layers.Dense(num_classes)(x)
  return tf.keras.Model(inputs, outputs)


def cifar_cnn(num_classes: int = 10):
  """The CIFAR-10 CNN (x uint8 [32, 32, 3], preprocessing inside)."""
  return models._classifier(
    lambda: cifar_cnn_keras(num_classes),
    _spec([32, 32, 3], tf.uint8),
  )
