#!/bin/bash
# Fashion-MNIST fmnist_wide recipe (default 20 epochs), onnxtrain and PyTorch started together,
# each pinned to its own core with one thread (taskset), so that the load of the shared
# machine falls on both alike (docs/finetuning.md). Run from the repository root.
# Usage: bench/fmnist_wide_side_by_side.sh [OUTDIR] [EPOCHS]; ONNXTRAIN: the binary; SEED (default 1);
# EXTRA: recipe flags both sides take alike (e.g. "--label-smoothing 0.1").
set -u
OUT=${1:-/tmp/fmnist_side}
E=${2:-20}
BIN=${ONNXTRAIN:-onnxtrain}
SEED=${SEED:-1}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
DATA=/usr/share/datasets/fashion-mnist
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date -u +%T)" "$l"; done; }
uptime > $OUT/uptime.start
( GOMAXPROCS=1 taskset -c 0 /usr/bin/time -f "onnxtrain train: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    "$BIN" train --model models/fmnist_wide/fmnist_wide_train.onnx --data $DATA --val-data $DATA \
    --epochs $E --batch-size 128 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
    --lr-schedule cosine --warmup-steps 200 --random-flip $EXTRA --seed $SEED --output $OUT/onnxtrain --overwrite-output 2>&1 | stamp > $OUT/onnxtrain.log; uptime > $OUT/uptime.onnxtrain.end ) &
( OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE taskset -c 1 /usr/bin/time -f "pytorch: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    /usr/bin/python3 bench/fmnist_aug_pytorch.py --model wide --epochs $E --stop-after 0 --random-flip \
    --eval-every-epoch --threads 1 $EXTRA --seed $SEED 2>&1 | stamp > $OUT/pytorch.log; uptime > $OUT/uptime.pytorch.end ) &
wait
uptime > $OUT/uptime.end
GOMAXPROCS=2 "$BIN" eval --model $OUT/onnxtrain/model.onnx --data $DATA --batch-size 1000 > $OUT/onnxtrain_eval.log 2>&1
