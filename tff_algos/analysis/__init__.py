"""Analyses of runs and of the papers' claims: sweeps, plots, FedAvg's
Figure 1.

`sweep` (a config expanded into runs, each in a process of its own, then
their tables and figures) and `plot` (a metric of run folders against
rounds or ε) import no TensorFlow, so that the commands that table and
plot start without it. `interpolation` (the loss between two models'
weights, FedAvg's Figure 1, for `python -m tff_algos.interpolate`) trains
and evaluates its models in this process, with TensorFlow. Importing this
package imports none of them.
"""
