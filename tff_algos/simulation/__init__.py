"""The research harness: a run's settings, sampling and stragglers, the
evaluation of f(w) over all clients, the round loop and its callbacks, the
public trainer, run folders and what they record.

Modules: `config` (a run's flags and their resolution into Settings; no
TensorFlow), `sampling` (who trains, who straggles, minibatch order; no
TensorFlow), `client_inputs` (each client's round input), `evaluation`
(f(w), accuracy, per-client accuracy, dissimilarity), `compiled` (a
round's clients trained one after another in one XLA-compiled loop in this
process, for any client work defined once), `loop` (the one round loop),
`callbacks` and `outputs` (what runs between rounds), `columns`
(metrics.csv's columns), `trainer` (train any process on a task),
`provenance` (a run's code, computation and data), `run_dir` (a run's
folder), `results` (reading a run folder back; no TensorFlow) and
`experiment` (one run into its folder, wired from the pieces). A DP run's ε
is `tff_algos.privacy`'s.
"""
