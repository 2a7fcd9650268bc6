"""The algorithms, one module per paper, and their registry.

`registry.get(name)` gives an algorithm's entry (its builder, the settings
it uses and their defaults); importing this package registers FedAvg,
FedSGD, FedProx, FedISGD and the centralized SGD baseline without loading
TensorFlow.
"""

from tff_algos.algorithms import centralized
from tff_algos.algorithms import fedavg
from tff_algos.algorithms import fedisgd
from tff_algos.algorithms import fedprox
from tff_algos.algorithms import fedsgd
from tff_algos.algorithms import registry
from tff_algos.algorithms.fedavg import build_fed_avg
from tff_algos.algorithms.fedisgd import build_fed_isgd
from tff_algos.algorithms.fedprox import AdaptiveMu
from tff_algos.algorithms.fedprox import build_fed_prox
from tff_algos.algorithms.fedsgd import build_fed_sgd
from tff_algos.algorithms.registry import Algorithm
from tff_algos.algorithms.registry import register
