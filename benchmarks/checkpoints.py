"""What a checkpoint of `make run`'s program state costs to save and load:
a run folder's state manager (`RunDir.state_manager`, one NumPy file a
version) against TFF's `tff.program.FileProgramStateManager` (a SavedModel
a version), on the same state, in one process, alternating.

  .venv/bin/python benchmarks/checkpoints.py [--repeat=20]

The state is `make run`'s program state as its checkpoints hold it (the
process's state and the round callbacks'), from the seeded initial model:
the values change as a run trains, the structure and sizes do not. Prints
the median CPU-seconds (the process's clock) of a save and of a load for
each, and each as a multiple of ours; a manager that loads back other
values than it saved stops the benchmark.
"""

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tasks  # noqa: E402
from tff_algos import learning  # noqa: E402
from tff_algos.simulation import run_dir  # noqa: E402
from tff_algos.simulation import trainer  # noqa: E402
from tff_algos.simulation.config import Config  # noqa: E402
from tff_algos.simulation.config import resolve  # noqa: E402


def make_run_state():
  """`make run`'s program state at round 0 (`--algo=fedprox`'s defaults)."""
  task = tasks.load_task('synthetic_1_1')
  arrays = tasks.client_arrays(task.train)
  settings = resolve(Config(algo='fedprox'), num_clients=len(arrays))
  loop = trainer.loop_for(settings, task.model_fn, arrays)
  weights = learning.initial_model_weights(task.model_fn, settings.run.seed)
  return loop.program_state(loop.initial_state(weights))


def managers(parent):
  """name → a new state manager in a folder of its own under `parent`."""
  import tensorflow_federated as tff

  def ours():
    folder = run_dir.RunDir(tempfile.mkdtemp(dir=parent))
    os.makedirs(os.path.join(folder.path, run_dir.CHECKPOINT_DIR))
    return folder.state_manager()

  def tffs():
    return tff.program.FileProgramStateManager(
      tempfile.mkdtemp(dir=parent),
      prefix='round_',
      keep_total=2,
      keep_first=False,
    )

  return {'ours': ours, "TFF's": tffs}


def _cpu(call):
  start = time.process_time()
  result = asyncio.run(call)
  return time.process_time() - start, result


def _check_same(state, loaded, name):
  """A manager that loads back other values has no cost worth reporting."""
  import numpy as np
  import tensorflow as tf

  saved, back = tf.nest.flatten(state), tf.nest.flatten(loaded)
  if len(saved) != len(back) or not all(
    np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(saved, back)
  ):
    raise AssertionError(f'{name} loaded other values than it saved')


def measure(state, repeat):
  """name → (save CPU-seconds, load CPU-seconds), one of each per repeat."""
  seconds = {}
  with tempfile.TemporaryDirectory() as parent:
    makers = managers(parent)
    for _ in range(repeat):
      for name, make in makers.items():
        manager = make()
        save, _ = _cpu(manager.save(state, 1))
        load, loaded = _cpu(manager.load(1, state))
        _check_same(state, loaded, name)
        saves, loads = seconds.setdefault(name, ([], []))
        saves.append(save)
        loads.append(load)
  return seconds


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--repeat', type=int, default=20)
  args = parser.parse_args()
  if args.repeat < 1:
    parser.error('--repeat must be at least 1')
  seconds = measure(make_run_state(), args.repeat)
  medians = {
    name: (statistics.median(saves), statistics.median(loads))
    for name, (saves, loads) in seconds.items()
  }
  ours = medians['ours']
  for name, (save, load) in medians.items():
    print(
      f'{name}: save {save:.4f} CPU-s ({save / ours[0]:.1f}x ours), '
      f'load {load:.4f} CPU-s ({load / ours[1]:.1f}x ours); '
      f'median of {args.repeat}'
    )


if __name__ == '__main__':
  main()
