"""The research harness: sampling and stragglers, evaluation of f(w) over
all clients, the round loop, run folders and the progress display.

Modules: `config` (the settings of a run; no TensorFlow), `sampling` (who
trains, who straggles, minibatch order; no TensorFlow), `client_inputs`
(each client's round input), `evaluation` (f(w), accuracy, dissimilarity),
`loop` (the one round loop), `run_dir` (a run's folder) and `experiment`
(one run of a Config, wired from the pieces).
"""
