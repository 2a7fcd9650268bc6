#!/usr/bin/env bash
# The Synthetic runs of docs/REPRODUCTION.md (FedProx Fig. 1 / FedISGD Table 3).
# Usage: scripts/reproduce_synthetic.sh [OUT_DIR]   (about 25 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/reproduction}
py=.venv/bin/python
run() { name=$1; shift; $py run_experiment.py --progress=false --overwrite \
          --output_dir="$out/$name" "$@" > /dev/null; echo "done $name"; }

# FedProx Figure 1 (Synthetic(1,1)): stragglers 0/50/90%.
for s in 0 0.5 0.9; do
  run fig1_fedavg_s$s   --flagfile=configs/fedprox/synthetic_1_1.flags --algo=fedavg --mu=0 --straggler_fraction=$s
  run fig1_fedprox0_s$s --flagfile=configs/fedprox/synthetic_1_1.flags --algo=fedprox --mu=0 --straggler_fraction=$s
  run fig1_fedprox1_s$s --flagfile=configs/fedprox/synthetic_1_1.flags --algo=fedprox --mu=1 --straggler_fraction=$s
  run fig1_fedisgd_s$s  --flagfile=configs/fedisgd/synthetic.flags --train_fraction=0.9 --straggler_fraction=$s
done

# FedISGD Table 3: no stragglers, 80/20 split, mean test accuracy over the
# last half of the rounds.
for task in synthetic_0_0 synthetic_0.5_0.5 synthetic_1_1; do
  run t3_fedavg_$task  --flagfile=configs/fedprox/synthetic_1_1.flags --task=$task --algo=fedavg --mu=0 --train_fraction=0.8
  run t3_fedprox_$task --flagfile=configs/fedprox/synthetic_1_1.flags --task=$task --algo=fedprox --mu=1 --train_fraction=0.8
  run t3_fedisgd_$task --flagfile=configs/fedisgd/synthetic.flags --task=$task
done
