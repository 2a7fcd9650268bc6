"""Differential privacy: the mechanisms, the accountant and the checks of
the budget, in one place.

What a production port takes (the DP model aggregators and what they
share):

    budget.py      adaptive clipping's noise split, the argument checks,
                   the neighbouring relation of each sampling scheme
                   (`ADJACENCY`); no TensorFlow
    mechanisms.py  the DP model aggregators (TFF's and tensorflow_privacy's
                   Gaussian queries, their noise seeded in a simulation and
                   unseeded in a production build) and the DP events a
                   process state holds; TensorFlow, TFF, tensorflow_privacy

What a simulation adds (the ε it reports, the flags it takes):

    accounting.py  how private a DP run is: ε after every round at δ, of
                   the mechanism that ran (dp_accounting; no TensorFlow)
    flags.py       the --dp_* flags checked and resolved (δ 0.1/N, RDP,
                   adaptive clipping's quantile, the adjacency); no
                   TensorFlow

Importing this package imports none of them: `from tff_algos.privacy
import mechanisms` loads TensorFlow, the others do not (the model
aggregators import mechanisms in the function that builds a DP one).
"""
