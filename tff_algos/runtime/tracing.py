"""Tracing that is faster (`install`), deterministic (`deterministic`), and
whose batched products of tiny matrices run on Eigen's kernel
(`batched_products_on_eigen`).

`install`: AutoGraph leaves alone library code that needs no conversion.

Building a learning process traces `tf.function`s, and AutoGraph rewrites
the source of every Python function they call (parsing it, transforming its
AST, compiling the result) unless its module is on AutoGraph's
do-not-convert list (TensorFlow, Keras, NumPy, ... are). It converted 74
functions in a 1-round FedProx run, 5.3 of its 20 s (figures not in
docs/PERFORMANCE.md), most of them TFF library functions whose control flow
is plain Python: type checks and structure helpers (`common_libs`,
`attrs`), the Keras model wrapper's forward pass and metrics, the metric
finalizers, SGD. Converting such a function yields the very same TensorFlow
ops as calling it unconverted (its `if`/`for` run on Python values either
way), so adding their modules to the list changes how long tracing takes,
not what is traced. A function that does branch on a tensor fails loudly
when unconverted (TensorFlow refuses a tensor as a Python bool or
iterable), so a module wrongly listed here is an error at build time, not a
silent difference; the test suite builds every algorithm and TFF's
built-ins with this list. The modules below were read for tensor-dependent
control flow (TFF 0.87): none. Not listed: modules that need AutoGraph,
e.g. TFF's apply-optimizer finalizer (`if should_reject:` on a tensor) and
training loops over datasets, and all of ours.

Measured with the rest of the start-up work, not separately
(docs/PERFORMANCE.md, "Start-up and memory", "Where the time goes", the
default Synthetic run, cold, ff5dc54 against 1a8e451): tracing the
learning process's computations 2.70 → 1.58 s, and building the
in-process evaluation 0.98 → 0.20 s (that one together with the
evaluation's explicit loops in `simulation/evaluation.py`).

`deterministic` exists for the content-addressed cache of compiled
computations (`computation_cache`, whose hits took the default run's
first round from 0.85 s to 0.38 s) and for a run's fingerprint
(`fingerprint`): without it no two builds serialize alike.
"""

import contextlib
import random
import threading

import numpy as np

DO_NOT_CONVERT = (
  'attr',
  'tensorflow_federated.python.common_libs',
  'tensorflow_federated.python.learning.models.keras_utils',
  'tensorflow_federated.python.learning.metrics.keras_finalizer',
  'tensorflow_federated.python.learning.metrics.counters',
  'tensorflow_federated.python.learning.optimizers.optimizer',
  'tensorflow_federated.python.learning.optimizers.sgdm',
  'tensorflow_federated.python.learning.tensor_utils',
  'tensorflow_federated.python.program.file_utils',
)


def install() -> None:
  """Puts DO_NOT_CONVERT first on AutoGraph's rules, once per process (as
  TensorFlow's own converter tests extend that list)."""
  from tensorflow.python.autograph.core import config

  if any(
    getattr(rule, '_tff_algos', False) for rule in config.CONVERSION_RULES
  ):
    return
  rules = tuple(config.DoNotConvert(name) for name in DO_NOT_CONVERT)
  for rule in rules:
    rule._tff_algos = True
  config.CONVERSION_RULES = rules + tuple(config.CONVERSION_RULES)


@contextlib.contextmanager
def deterministic(seed: int = 0):
  """Traces with Python's, NumPy's and Keras's global random generators
  seeded with `seed`, and restores them afterwards.

  Keras draws the seed of every unseeded initializer from those generators
  and freezes it into the traced graph, so without this two builds of the
  same code serialize to different computations (measured: every build of
  FedProx's `initialize` and `next` differed, in the initializers' seed
  constants alone). The values those initializers draw never reach a run,
  whose initial model is set from `--seed`; fixing the seeds makes the
  serialized computation a function of the code, the settings and the
  files the model reads, which is what a run's record of its computation
  and the compiled-computation cache rely on. The caller's random state is
  left as it was.
  """
  import tensorflow as tf

  # isort: split
  from keras.src import backend as keras_backend

  del tf  # Imported first: Keras's backend needs TensorFlow loaded.
  generator = keras_backend._SEED_GENERATOR
  python_state, numpy_state = random.getstate(), np.random.get_state()
  keras_generator = getattr(generator, 'generator', None)
  random.seed(seed)
  np.random.seed(seed)
  generator.generator = random.Random(seed)
  try:
    yield
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    generator.generator = keras_generator


_PRODUCTS = threading.Lock()
# The most multiply-adds a batched product (all of its matrices) may take
# to go to Eigen's kernel (`batched_products_on_eigen`): on the 2-core AMX
# Xeon, of [10 × 60] × [60 × 10] products Eigen's took 17.7 µs for 8
# lanes against oneDNN's 49.0 and 28.0 for 16 lanes against 35.3, and
# oneDNN's was the faster from 32 lanes (33.3 against 54.5 µs) and for
# MNIST's [10 × 784] × [784 × 10] from 4 lanes (58.8 against 87.9; 64
# lanes: 328.9 against 712.5): benchmarks/batch_matmul.py.
EIGEN_PRODUCT_MAX = 128_000


@contextlib.contextmanager
def batched_products_on_eigen(max_multiply_adds: int | None = None):
  """Traces TensorFlow's small batched matrix products (`tf.matmul` of 3-D
  tensors of static shapes, what `tf.vectorized_map` makes of a layer's
  `MatMul`, and their gradients; of at most `max_multiply_adds`, by
  default EIGEN_PRODUCT_MAX as it is when the block starts) as
  `BatchMatMulV3`, which TensorFlow's oneDNN build leaves to Eigen's
  kernel, instead of `BatchMatMulV2`, which it hands to oneDNN; larger
  ones stay oneDNN's, which is faster for them (EIGEN_PRODUCT_MAX).

  For the lockstep clients' steps: on a 2-core AMX Xeon oneDNN's batched
  product of 3 lanes of [10 × 60] × [60 × 10] took 44.5–66.9 µs, Eigen's
  10.2–19.7 (`benchmarks/batch_matmul.py`), and the two such products were
  170–174 of a `make run` lockstep step's 221 µs
  (`benchmarks/client_ops.py --execution=lockstep`, which measures them
  again). The two kernels compute
  the same products with their sums in another order, so the bits of the
  results differ (within float32 rounding); with either, a lockstep run's
  weights came out the same with one thread as with two.

  `math_ops.matmul`, which both `tf.vectorized_map` and the products'
  gradients call, makes a `BatchMatMulV2` through
  `gen_math_ops.batch_mat_mul_v2`: within this block, that function makes
  a `BatchMatMulV3` of the same dtype for a small product. The
  replacement is TensorFlow's module's, so code that another thread traces
  meanwhile gets it too: the same products, the small ones on Eigen's
  kernel. One block at a time.
  """
  from tensorflow.python.ops import gen_math_ops

  if max_multiply_adds is None:
    max_multiply_adds = EIGEN_PRODUCT_MAX

  def small_on_eigen(x, y, adj_x=False, adj_y=False, name=None):
    if _multiply_adds(x, y, adj_x, adj_y) > max_multiply_adds:
      return on_onednn(x, y, adj_x=adj_x, adj_y=adj_y, name=name)
    return gen_math_ops.batch_mat_mul_v3(
      x, y, Tout=x.dtype, adj_x=adj_x, adj_y=adj_y, name=name
    )

  with _PRODUCTS:
    on_onednn = gen_math_ops.batch_mat_mul_v2
    gen_math_ops.batch_mat_mul_v2 = small_on_eigen
    try:
      yield
    finally:
      gen_math_ops.batch_mat_mul_v2 = on_onednn


def _multiply_adds(x, y, adj_x, adj_y) -> float:
  """A batched product's multiply-adds (batch × rows × inner × columns),
  infinite where a shape is not static."""
  if not (x.shape.is_fully_defined() and y.shape.is_fully_defined()):
    return float('inf')
  *x_batch, rows, inner = x.shape.as_list()
  *y_batch, y_rows, y_columns = y.shape.as_list()
  if adj_x:
    rows, inner = inner, rows
  columns = y_rows if adj_y else y_columns
  batch = max(int(np.prod(x_batch)), int(np.prod(y_batch)))
  return float(batch * rows * inner * columns)
