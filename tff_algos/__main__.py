"""`python -m tff_algos`: the experiment command (`tff_algos.run`)."""

import signal
import sys

PROGRAM = 'python -m tff_algos'

if __name__ == '__main__':
  # Ctrl-C while TensorFlow is imported: one line and exit code 130, as
  # run_experiment.py (which says why). Python imported this package first.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    from tff_algos import run

    sys.exit(run.main(program=PROGRAM))
  except KeyboardInterrupt:
    print(f'{PROGRAM}: interrupted', file=sys.stderr)
    sys.exit(130)
