#!/bin/sh
# The cross-check runs of docs/REPRODUCTION.md: the plain-numpy reference
# (numpy_fedavg.py) on scoreboard cells, 3 seeds of its own each, at the η
# our grid chose for the cell (and FedAvg Table 1 IID B=10 C=0.1 at
# η = 0.0464 too), with our runs' evaluation schedule and round caps. Results
# are merged into tools/crosscheck/results.json, which tools/scoreboard.py
# reads. From the repository root:  sh tools/crosscheck/cells.sh
set -e
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-.venv/bin/python}
REF="$PY tools/crosscheck/numpy_fedavg.py"
OUT=tools/crosscheck/results.json
T1="--target=0.97 --epochs=1 --seeds=0,1,2 --json=$OUT"
B10="--batch_size=10 --rounds=4000 --eval_every=5"
BINF="--batch_size=-1 --rounds=5000 --eval_every=10"
cell() { echo "FedAvg | Table 1 2NN, $1: rounds to 97%"; }

$REF mnist --split=iid $B10 $T1 --clients_per_round=10 --lr=0.215 --cell="$(cell 'IID, B=10, C=0.1')"
$REF mnist --split=iid $B10 $T1 --clients_per_round=10 --lr=0.0464 --cell="$(cell 'IID, B=10, C=0.1')"
$REF mnist --split=iid $B10 $T1 --clients_per_round=1 --lr=0.1 --cell="$(cell 'IID, B=10, C=0')"
$REF mnist --split=iid $B10 $T1 --clients_per_round=20 --lr=0.215 --cell="$(cell 'IID, B=10, C=0.2')"
$REF mnist --split=iid $B10 $T1 --clients_per_round=50 --lr=0.215 --cell="$(cell 'IID, B=10, C=0.5')"
$REF mnist --split=iid $B10 $T1 --clients_per_round=100 --lr=0.215 --cell="$(cell 'IID, B=10, C=1.0')"
$REF mnist --split=noniid $B10 $T1 --clients_per_round=10 --lr=0.215 --cell="$(cell 'non-IID, B=10, C=0.1')"
$REF mnist --split=iid $BINF $T1 --clients_per_round=10 --lr=0.464 --cell="$(cell 'IID, B=∞, C=0.1')"
# Cells run on 2026-11-24, at the η their grid chose:
$REF mnist --split=noniid $B10 $T1 --clients_per_round=1 --lr=0.1 --cell="$(cell 'non-IID, B=10, C=0')"
$REF mnist --split=iid $BINF $T1 --clients_per_round=1 --lr=1 --cell="$(cell 'IID, B=∞, C=0')"
# Run on 2026-11-26, at the η the grid chose:
$REF mnist --split=noniid $BINF $T1 --clients_per_round=1 --lr=0.215 --cell="$(cell 'non-IID, B=∞, C=0')"
$REF mnist --split=iid $BINF $T1 --clients_per_round=20 --lr=0.464 --cell="$(cell 'IID, B=∞, C=0.2')"
$REF mnist --split=noniid $BINF $T1 --clients_per_round=20 --lr=0.464 --cell="$(cell 'non-IID, B=∞, C=0.2')"

# FedProx Figure 1, Synthetic(1,1), 90% stragglers: our generated dataset
# (data seed 0, exported by our generator; the training is the reference's).
NPZ=${TMPDIR:-/tmp}/synthetic_1_1_seed0.npz
$PY tools/crosscheck/export_task.py synthetic_1_1 "$NPZ"
FIG1="--npz=$NPZ --lr=0.01 --clients_per_round=10 --epochs=20 --batch_size=10 --rounds=200 --eval_every=1 --straggler_fraction=0.9 --seeds=0,1,2 --json=$OUT"
C="FedProx | Figure 1, Synthetic(1,1), 90% stragglers: training loss"
$REF arrays $FIG1 --cell="$C"                                   # FedAvg: drops stragglers
$REF arrays $FIG1 --cell="$C" --mu=0 --keep_stragglers          # FedProx μ = 0
$REF arrays $FIG1 --cell="$C" --mu=1 --keep_stragglers          # FedProx μ = 1

# FedISGD Table 4, MNIST (FedProx's power-law split, 1,000 devices, 80/20
# per device, MLR), 90% stragglers: FedAvg and FedProx μ = 1, the metric
# the mean test accuracy over rounds 101-200 (our data again; the training
# is the reference's).
NPZ=${TMPDIR:-/tmp}/mnist_powerlaw_seed0_train0.8.npz
$PY tools/crosscheck/export_task.py mnist_powerlaw "$NPZ" --train_fraction=0.8 --data_dir=../shared/data
T4="--npz=$NPZ --lr=0.03 --clients_per_round=10 --epochs=20 --batch_size=10 --rounds=200 --eval_every=1 --straggler_fraction=0.9 --seeds=0,1,2 --json=$OUT"
C="FedISGD | Table 4, MNIST, %s, 90%% stragglers: mean test accuracy over the last half (%%)"
$REF arrays $T4 --cell="$(printf "$C" FedAvg)"                             # drops stragglers
$REF arrays $T4 --cell="$(printf "$C" FedProx)" --mu=1 --keep_stragglers   # keeps their partial work

# FedISGD Table 3 (no stragglers) and Table 4's Synthetic_1_1 with 5
# classes per device (90% stragglers): FedAvg and FedProx μ = 1 on our
# generated datasets (data seed 0, 80/20 per device), the metric the mean
# test accuracy over rounds 101-200.
SYN="--lr=0.01 --clients_per_round=10 --epochs=20 --batch_size=10 --rounds=200 --eval_every=1 --seeds=0,1,2 --json=$OUT"
C="FedISGD | Table 3, %s, %s: mean test accuracy over the last half of the rounds (%%)"
for t in 0.5_0.5 1_1; do
  NPZ=${TMPDIR:-/tmp}/synthetic_${t}_seed0_train0.8.npz
  $PY tools/crosscheck/export_task.py synthetic_$t "$NPZ" --train_fraction=0.8
  $REF arrays --npz="$NPZ" $SYN --cell="$(printf "$C" "Synthetic_$t" FedAvg)"
  $REF arrays --npz="$NPZ" $SYN --cell="$(printf "$C" "Synthetic_$t" FedProx)" --mu=1 --keep_stragglers
done
NPZ=${TMPDIR:-/tmp}/synthetic_1_1_5class_seed0_train0.8.npz
$PY tools/crosscheck/export_task.py synthetic_1_1_5class "$NPZ" --train_fraction=0.8
$REF arrays --npz="$NPZ" $SYN --straggler_fraction=0.9 --mu=1 --keep_stragglers \
    --cell="FedISGD | Table 4, Synthetic_1_1 (5 classes per device), FedProx, 90% stragglers: mean test accuracy over the last half (%)"
