"""`python -m tff_algos`: the experiment command (`tff_algos.run`)."""

import sys

from tff_algos import run

if __name__ == '__main__':
  sys.exit(run.main(program='python -m tff_algos'))
