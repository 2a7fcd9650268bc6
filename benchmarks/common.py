"""What the benchmark scripts share (they run as scripts: `python
benchmarks/NAME.py`, so this folder is on their path)."""

import os
import sys

from tff_algos import runtime

runtime.prepare()  # As a run: before TensorFlow (worker, imports, malloc).
import tasks  # noqa: E402
from tff_algos.simulation.config import Config  # noqa: E402
from tff_algos.simulation.config import resolve  # noqa: E402

runtime.install()  # Our TFF context, before any exit path.


def load_task_or_exit(name, data_dir):
  """`tasks.load_task`, but a missing or bad file is one line on stderr and
  exit code 2, as for run_experiment.py."""
  try:
    return tasks.load_task(name, data_dir=data_dir)
  except tasks.DataError as e:
    print(f'{os.path.basename(sys.argv[0])}: error: {e}', file=sys.stderr)
    sys.exit(2)


def case_settings(case, execution, num_clients, **run):
  """The run settings of a cohort benchmark's `case` (benchmarks/cases.py)
  with --client_execution=`execution`, for a task of `num_clients`
  clients; `run`: more settings (e.g. rounds)."""
  return resolve(
    Config(
      algo=case.algo,
      task=case.task,
      clients_per_round=case.clients_per_round,
      epochs=case.epochs,
      batch_size=case.batch_size,
      client_lr=case.client_lr,
      client_sampling=case.sampling,
      client_execution=execution,
      **run,
    ),
    num_clients=num_clients,
  )
