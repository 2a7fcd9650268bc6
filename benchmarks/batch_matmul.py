"""The lanes' matrix product, kernel by kernel: what one lockstep step's
batched product of tiny matrices costs in each way TensorFlow can compute
it, and whether each gives the bits of the one the lockstep step uses.

  .venv/bin/python benchmarks/batch_matmul.py [--lanes=3] [--rows=10]
      [--inner=60] [--cols=10] [--iterations=2000]

Times a `tf.function` whose while-loop computes a [lanes, rows, inner] ×
[lanes, inner, cols] product --iterations times (each iteration's input
depends on the last, so none is skipped), for: `BatchMatMulV2` (what
`tf.vectorized_map` makes of a layer's `MatMul`, and what TensorFlow's
oneDNN build runs as `_MklBatchMatMulV2`), `BatchMatMul`, `BatchMatMulV3`,
`tf.einsum` and one `tf.matmul` per lane. Prints µs an iteration (the
loop's own ops included) of the second of two runs, and whether each
result is bit-identical to BatchMatMulV2's. Run it with
`TF_ENABLE_ONEDNN_OPTS=0` to see TensorFlow's own (Eigen) kernels
throughout. The defaults are `make run`'s lockstep step: 3 lanes, B = 10
rows, Synthetic(1,1)'s 60 features and 10 classes.
"""

import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

FLAGS = flags.FLAGS
flags.DEFINE_integer('lanes', 3, 'Lanes (the batch of products).')
flags.DEFINE_integer('rows', 10, 'Rows of each left matrix (B).')
flags.DEFINE_integer('inner', 60, 'The inner dimension (features).')
flags.DEFINE_integer('cols', 10, 'Columns of each right matrix.')
flags.DEFINE_integer('iterations', 2000, 'Products a timed call computes.')

KERNELS = {
  'BatchMatMulV2': lambda a, b: tf.raw_ops.BatchMatMulV2(x=a, y=b),
  'BatchMatMul': lambda a, b: tf.raw_ops.BatchMatMul(x=a, y=b),
  'BatchMatMulV3': lambda a, b: tf.raw_ops.BatchMatMulV3(
    x=a, y=b, Tout=tf.float32
  ),
  'einsum': lambda a, b: tf.einsum('lij,ljk->lik', a, b),
  'matmul per lane': lambda a, b: tf.stack(
    [tf.matmul(a[i], b[i]) for i in range(a.shape[0])]
  ),
}


def _loop(product, lanes, rows, cols, iterations):
  @tf.function(autograph=False)
  def loop(x, w):
    def body(i, total):
      # x + 0·total: each product waits for the last.
      return i + 1, total + product(x + 0.0 * total[0, 0, 0], w)

    zeros = tf.zeros([lanes, rows, cols])
    return tf.while_loop(lambda i, _: i < iterations, body, (0, zeros))[1]

  return loop


def main(argv):
  del argv
  tf.get_logger().setLevel('ERROR')  # Each kernel's loop is a new function.
  rng = np.random.default_rng(0)
  x = tf.constant(
    rng.normal(size=(FLAGS.lanes, FLAGS.rows, FLAGS.inner)).astype(np.float32)
  )
  w = tf.constant(
    rng.normal(size=(FLAGS.lanes, FLAGS.inner, FLAGS.cols)).astype(np.float32)
  )
  print(
    f'{FLAGS.lanes} lanes of [{FLAGS.rows} × {FLAGS.inner}] × '
    f'[{FLAGS.inner} × {FLAGS.cols}], TF_ENABLE_ONEDNN_OPTS='
    f'{os.environ.get("TF_ENABLE_ONEDNN_OPTS", "(unset)")}'
  )
  reference = None
  for name, product in KERNELS.items():
    loop = _loop(product, FLAGS.lanes, FLAGS.rows, FLAGS.cols, FLAGS.iterations)
    loop(x, w)  # Traces and warms up.
    start = time.perf_counter()
    result = loop(x, w).numpy()
    seconds = time.perf_counter() - start
    reference = result if reference is None else reference
    same = np.array_equal(result, reference)
    print(
      f'{name:16s} {seconds / FLAGS.iterations * 1e6:8.1f} µs an iteration'
      f'   bits {"the same as" if same else "differ from"} BatchMatMulV2'
    )


if __name__ == '__main__':
  app.run(main)
