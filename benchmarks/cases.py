"""The cohort benchmarks' cases (benchmarks/cohort.py, step_cost.py): a task,
its model, the algorithm, the cohort K and the local work, as the papers
set them."""

import collections

Case = collections.namedtuple(
  'Case',
  'task model algo clients_per_round epochs batch_size client_lr sampling',
)
CASES = {
  # `make run`: FedProx on Synthetic(1,1) (Li et al. 2020, §5.2).
  'mlr_synthetic_10': Case(
    'synthetic_1_1', 'MLR', 'fedprox', 10, 20, 10, 0.01, 'uniform'
  ),
  # FedProx's MNIST (MLR, 1,000 power-law devices), E = 1.
  'mlr_mnist_10': Case(
    'mnist_powerlaw', 'MLR', 'fedavg', 10, 1, 10, 0.1, 'uniform'
  ),
  'mlr_mnist_100': Case(
    'mnist_powerlaw', 'MLR', 'fedavg', 100, 1, 10, 0.1, 'uniform'
  ),
  'mlr_mnist_1000': Case(
    'mnist_powerlaw', 'MLR', 'fedavg', 1000, 1, 10, 0.1, 'poisson'
  ),  # q = 1: every client.
  # FedAvg's MNIST 2NN, IID (100 clients of 600), E = 1, B = 10.
  '2nn_mnist_10': Case(
    'mnist_iid_2nn', '2NN', 'fedavg', 10, 1, 10, 0.05, 'uniform'
  ),
  '2nn_mnist_100': Case(
    'mnist_iid_2nn', '2NN', 'fedavg', 100, 1, 10, 0.05, 'uniform'
  ),
  # FedAvg's CNN, IID, E = 5, B = 10 (Table 2's setting).
  'cnn_mnist_10': Case(
    'mnist_iid_cnn', 'CNN', 'fedavg', 10, 5, 10, 0.05, 'uniform'
  ),
  # FedProx's Sent140 LSTM (Appendix C.2: K = 10, E = 20 is the paper's;
  # E = 1 keeps a round short) and Shakespeare's char-LSTM.
  'lstm_sent140_10': Case(
    'sent140', 'LSTM', 'fedprox', 10, 1, 10, 0.3, 'uniform'
  ),
  'lstm_shakespeare_10': Case(
    'shakespeare', 'LSTM', 'fedprox', 10, 1, 10, 0.8, 'uniform'
  ),
}
