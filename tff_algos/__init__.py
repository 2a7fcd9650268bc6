"""Federated optimization algorithms on TensorFlow Federated.

Layers, top to bottom, each importing only those below it
(tests/commands/test_layers.py checks it):

    analysis/     results, sweeps and plots (no TensorFlow), FedAvg's Figure 1
    program/      TFF's program layer on our tasks: a task's clients as a
                  tff.program data source for train_model
    simulation/   the research harness: sampling, evaluation, the round loop,
                  run folders
    algorithms/   one module per paper: a typed builder and its registry entry
    tasks         (beside the package) the datasets and models
    learning/     the blocks a production port takes (public tff.* API only)
    runtime/      TFF's worker processes (the only user of TFF internals)
    privacy/      differential privacy: the DP aggregators and their checks
                  (what a production port takes), the accountant and the
                  DP flags (what a simulation adds)

and the command lines above them all, `python -m tff_algos.export |
interpolate | plot | worker` (and run_experiment.py at the repository
root).

The builders are importable from here: `tff_algos.build_fed_prox(...)`;
importing this package loads no TensorFlow.
"""

from tff_algos import logs

logs.quiet()  # Before anything imports TensorFlow.

from tff_algos.algorithms import build_fed_avg  # noqa: E402
from tff_algos.algorithms import build_fed_isgd  # noqa: E402
from tff_algos.algorithms import build_fed_prox  # noqa: E402
from tff_algos.algorithms import build_fed_sgd  # noqa: E402
