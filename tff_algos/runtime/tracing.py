"""Tracing that is faster (`install`) and deterministic (`deterministic`).

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
