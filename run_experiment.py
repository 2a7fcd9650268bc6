"""Runs one federated training experiment, or a sweep of them: the command
`python -m tff_algos`, from the repository's root (`tff_algos/run.py`
holds it; `--help` lists the tasks, algorithms and flags).

  python run_experiment.py --algo=fedprox --task=synthetic_1_1 --rounds=200
  python run_experiment.py --flagfile=configs/fedprox/fig1_synthetic_1_1.flags
"""

import os
import signal
import sys

if __name__ == '__main__':
  # Ctrl-C is one line and exit code 130 (tff_algos/run.py) from the first
  # line on, while the package and TensorFlow are imported too (the run's
  # own handler comes later): installed before any import, and even when
  # SIGINT came ignored (a background job), as the run's handler takes it.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    from tff_algos import run

    sys.exit(run.main())
  except KeyboardInterrupt:
    print(f'{os.path.basename(sys.argv[0])}: interrupted', file=sys.stderr)
    sys.exit(130)
