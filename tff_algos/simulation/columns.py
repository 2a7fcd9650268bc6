"""The columns of metrics.csv, one row per round (no TensorFlow).

Round 0 is the initial model; an empty cell was not measured that round
(evaluation every --eval_every rounds, the dissimilarity every
--dissimilarity_every rounds, the update spread with --update_spread or
FedISGD). After `test_accuracy` comes the algorithm's hyper-parameter of
the round (`Algorithm.hparam_column`: `mu`, or FedISGD's `lam`); after the
built-in columns, those its callbacks and process metrics add.
"""

# name → what it holds (also the y-axis label of plots).
DESCRIPTIONS = {
  'round': 'communication round (0: the initial model)',
  'train_loss': 'training loss f(w) = Σ_k p_k F_k(w), all clients',
  'train_accuracy': 'training accuracy, all clients',
  'test_loss': 'test loss, all clients',
  'test_accuracy': 'test accuracy, all clients',
  'mu': 'μ of the local objective (0: none)',
  'lam': 'λ of FedISGD (its proximal weight and server scale)',
  'participants': 'clients whose updates reached the server',
  'local_steps': 'local SGD steps of those clients',
  'grad_variance': 'Σ_k p_k‖∇F_k(w) − ∇f(w)‖² (FedProx §5.3.3)',
  'grad_dissimilarity': 'B(w) = (Σ_k p_k‖∇F_k(w)‖² / ‖∇f(w)‖²)^½ '
  '(FedProx Def. 3)',
  'update_spread': '(1/K)Σ_k‖u_k − ū‖², u_k = w_t − w_k',
  'vlg': 'VLG = λ²·update spread (FedISGD eq. 8)',
}
COLUMNS = tuple(DESCRIPTIONS)
_HPARAM_SLOT = COLUMNS.index('mu')


def names(hparam_column: str = 'mu', more=()) -> tuple[str, ...]:
  """metrics.csv's columns in order: the built-in ones with the
  algorithm's hyper-parameter column (`mu` or `lam`) in its place, then
  `more` (those of the run's callbacks), each once."""
  built_in = [c for c in COLUMNS if c not in ('mu', 'lam')]
  built_in.insert(_HPARAM_SLOT, hparam_column)
  return tuple(built_in) + tuple(
    dict.fromkeys(c for c in more if c not in built_in)
  )
