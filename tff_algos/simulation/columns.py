"""The columns of metrics.csv, one row per round (no TensorFlow).

Round 0 is the initial model; an empty cell was not measured that round
(evaluation every --eval_every rounds, the dissimilarity every
--dissimilarity_every rounds, the update spread with --update_spread or
FedISGD).
"""

COLUMNS = (
    'round',
    'train_loss',          # f(w) = Σ_k p_k F_k(w) over ALL clients' train data
    'train_accuracy',      # accuracy over the same data
    'test_loss',           # the same over all clients' test data
    'test_accuracy',
    'mu',                  # μ of the local objective (FedISGD: λ)
    'participants',        # clients whose updates reached the server
    'local_steps',         # their local SGD steps (FedSGD: 1 per client)
    'grad_variance',       # Σ_k p_k‖∇F_k(w) − ∇f(w)‖² (FedProx §5.3.3)
    'grad_dissimilarity',  # B(w) = sqrt(Σ_k p_k‖∇F_k(w)‖² / ‖∇f(w)‖²)
                           # (FedProx Def. 3; 1 for identical devices)
    'update_spread',       # (1/K)Σ_k‖u_k − ū‖² of the client updates
                           # u_k = w_t − w_k
    'vlg',                 # FedISGD's VLG (eq. 8) = λ²·update_spread
)
