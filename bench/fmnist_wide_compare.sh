#!/bin/sh
# Fashion-MNIST to >= 93.4% (docs/finetuning.md): models/fmnist_wide (3 conv
# blocks with BatchNorm, linear 1152->256, Dropout 0.5) with random horizontal
# flips, AdamW lr 3e-3 weight decay 0.01, batch 128, cosine schedule with 200
# warmup steps, a test pass after every epoch; in onnxtrain, then in PyTorch
# 1.13 (bench/fmnist_aug_pytorch.py --model wide, 2 threads) from the same
# initial weights, one after the other, `uptime` before and after each and
# /usr/bin/time around each.
# Usage: bench/fmnist_wide_compare.sh [EPOCHS] [OUTDIR]
# ONNXTRAIN: the binary; WHICH=both|onnxtrain|pytorch; PT_STOP_AFTER=N runs
# PyTorch's EPOCHS-epoch schedule for its first N epochs only (per-epoch time
# when the whole run does not fit); SEED (default 1).
set -eu
EPOCHS=${1:-15}
OUT=${2:-/tmp/fmnist_wide}
BIN=${ONNXTRAIN:-onnxtrain}
WHICH=${WHICH:-both}
SEED=${SEED:-1}
PT_STOP_AFTER=${PT_STOP_AFTER:-0}
DATA=/usr/share/datasets/fashion-mnist
mkdir -p "$OUT"
if [ "$WHICH" != pytorch ]; then
  uptime > "$OUT/uptime.onnxtrain.start"
  /usr/bin/time -f "onnxtrain train: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    "$BIN" train --model models/fmnist_wide/fmnist_wide_train.onnx --data "$DATA" --val-data "$DATA" \
    --epochs "$EPOCHS" --batch-size 128 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
    --lr-schedule cosine --warmup-steps 200 --random-flip \
    --seed "$SEED" --output "$OUT/onnxtrain" --overwrite-output > "$OUT/onnxtrain.log" 2>&1
  /usr/bin/time -f "onnxtrain eval: wall %e s, cpu %U+%S s" \
    "$BIN" eval --model "$OUT/onnxtrain/model.onnx" --data "$DATA" --batch-size 1000 > "$OUT/onnxtrain_eval.log" 2>&1
  uptime > "$OUT/uptime.onnxtrain.end"
fi
if [ "$WHICH" != onnxtrain ]; then
  uptime > "$OUT/uptime.pytorch.start"
  /usr/bin/time -f "pytorch: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    /usr/bin/python3 bench/fmnist_aug_pytorch.py --model wide --epochs "$EPOCHS" --stop-after "$PT_STOP_AFTER" \
    --random-flip --eval-every-epoch --threads 2 --seed "$SEED" > "$OUT/pytorch.log" 2>&1
  uptime > "$OUT/uptime.pytorch.end"
fi
