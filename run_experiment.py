"""Runs one federated training experiment, or a sweep of them: the command
`python -m tff_algos`, from the repository's root (`tff_algos/run.py`
holds it; `--help` lists the tasks, algorithms and flags).

  python run_experiment.py --algo=fedprox --task=synthetic_1_1 --rounds=200
  python run_experiment.py --flagfile=configs/fedprox/fig1_synthetic_1_1.flags
"""

import sys

from tff_algos import run

if __name__ == '__main__':
  sys.exit(run.main())
