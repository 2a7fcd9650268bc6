"""Faster tracing: AutoGraph leaves alone library code that needs no
conversion.

Building a learning process traces `tf.function`s, and AutoGraph rewrites
the source of every Python function they call (parsing it, transforming
its AST, compiling the result) unless its module is on AutoGraph's
do-not-convert list (TensorFlow, Keras, NumPy, ... are). It converted 74
functions in a 1-round FedProx run, 5.3 of its 20 s (docs/PERFORMANCE.md,
"Start-up"), most of them TFF library functions whose control flow is
plain Python: type checks and structure helpers (`common_libs`, `attrs`),
the Keras model wrapper's forward pass and metrics, the metric finalizers,
SGD. Converting such a function yields the very same TensorFlow ops as
calling it unconverted (its `if`/`for` run on Python values either way),
so adding their modules to the list changes how long tracing takes, not
what is traced. A function that does branch on a tensor fails loudly when
unconverted (TensorFlow refuses a tensor as a Python bool or iterable), so
a module wrongly listed here is an error at build time, not a silent
difference; the test suite builds every algorithm and TFF's built-ins with
this list. The modules below were read for tensor-dependent control flow
(TFF 0.87): none. Not listed: modules that need AutoGraph, e.g. TFF's
apply-optimizer finalizer (`if should_reject:` on a tensor) and training
loops over datasets, and all of ours.
"""

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
  from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if any(getattr(rule, '_tff_algos', False)
         for rule in config.CONVERSION_RULES):
    return
  rules = tuple(config.DoNotConvert(name) for name in DO_NOT_CONVERT)
  for rule in rules:
    rule._tff_algos = True  # pylint: disable=protected-access
  config.CONVERSION_RULES = rules + tuple(config.CONVERSION_RULES)
