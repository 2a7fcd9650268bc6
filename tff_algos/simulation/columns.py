"""The columns of metrics.csv, one row per round (no TensorFlow).

Round 0 is the initial model; an empty cell was not measured that round
(evaluation every --eval_every rounds, the dissimilarity every
--dissimilarity_every rounds, the update spread with --update_spread or
when the algorithm reports it). After `test_accuracy` come the algorithm's
hyper-parameters that are columns (`registry.HyperParameter.column`: the
value each round used); after the built-in columns, those the algorithm's
callbacks add, then those of the other callbacks and process metrics.
"""

# name → what it holds (also the y-axis label of plots).
DESCRIPTIONS = {
  'round': 'communication round (0: the initial model)',
  'train_loss': 'training loss f(w) = Σ_k p_k F_k(w), all clients',
  'train_accuracy': 'training accuracy, all clients',
  'train_loss_sampled': 'training loss over a fixed sample of clients '
  '(--eval_clients, drawn from --seed): an estimate '
  'of f(w)',
  'train_accuracy_sampled': 'training accuracy over a fixed sample of '
  'clients (--eval_clients)',
  'test_loss': 'test loss, all clients',
  'test_accuracy': 'test accuracy, all clients',
  'participants': 'clients whose updates reached the server',
  'local_steps': 'local SGD steps of those clients',
  'grad_variance': 'Σ_k p_k‖∇F_k(w) − ∇f(w)‖² (FedProx §5.3.3)',
  'grad_dissimilarity': 'B(w) = (Σ_k p_k‖∇F_k(w)‖² / ‖∇f(w)‖²)^½ '
  '(FedProx Def. 3)',
  'update_spread': '(1/K)Σ_k‖u_k − ū‖², u_k = w_t − w_k',
}
COLUMNS = tuple(DESCRIPTIONS)
# The training metrics' columns over all clients → over a sample of them.
SAMPLED = {
  'train_loss': 'train_loss_sampled',
  'train_accuracy': 'train_accuracy_sampled',
}


def training_loss_column(columns) -> str:
  """Which of `columns` (a run's) holds its training loss: train_loss, or
  with --eval_clients train_loss_sampled (train_loss if neither)."""
  return next(
    (c for c in ('train_loss', SAMPLED['train_loss']) if c in columns),
    'train_loss',
  )


def names(
  hparam_columns=(), more=(), sampled_training: bool = False
) -> tuple[str, ...]:
  """metrics.csv's columns in order: the built-in ones with the
  algorithm's hyper-parameter columns after `test_accuracy` and the
  training metrics over all clients or (`sampled_training`) over a
  sample, then `more` (those of the run's callbacks), each once."""
  unused = SAMPLED.keys() if sampled_training else SAMPLED.values()
  built_in = [c for c in COLUMNS if c not in unused]
  at = built_in.index('test_accuracy') + 1
  built_in[at:at] = list(hparam_columns)
  return tuple(built_in) + tuple(
    dict.fromkeys(c for c in more if c not in built_in)
  )
