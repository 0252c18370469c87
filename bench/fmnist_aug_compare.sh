#!/bin/sh
# Fashion-MNIST to >= 93.4% (docs/finetuning.md): models/fmnist_bn with random
# crops (padding 2), horizontal flips, label smoothing 0.1, AdamW and a cosine
# schedule, in onnxtrain and in PyTorch 1.13 (bench/fmnist_aug_pytorch.py,
# 2 threads), one after the other and alternating (onnxtrain, PyTorch, and
# with ROUNDS=2 again), `uptime` written before and after each run, so that
# wall times are compared under the load of their own time.
# Usage: bench/fmnist_aug_compare.sh [EPOCHS] [OUTDIR]
set -eu
EPOCHS=${1:-15}
OUT=${2:-/tmp/fmnist_aug}
ROUNDS=${ROUNDS:-1}
BIN=${ONNXTRAIN:-onnxtrain}
DATA=/usr/share/datasets/fashion-mnist
mkdir -p "$OUT"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  uptime > "$OUT/uptime.onnxtrain.$r.start"
  /usr/bin/time -f "onnxtrain train: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    "$BIN" train --model models/fmnist_bn/fmnist_bn_train.onnx --data "$DATA" --val-data "$DATA" \
    --epochs "$EPOCHS" --batch-size 128 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
    --lr-schedule cosine --warmup-steps 200 --label-smoothing 0.1 --random-crop 2 --random-flip \
    --seed "$r" --output "$OUT/onnxtrain.$r" --overwrite-output > "$OUT/onnxtrain.$r.log" 2>&1
  /usr/bin/time -f "onnxtrain eval: wall %e s, cpu %U+%S s" \
    "$BIN" eval --model "$OUT/onnxtrain.$r/model.onnx" --data "$DATA" --batch-size 1000 > "$OUT/onnxtrain_eval.$r.log" 2>&1
  uptime > "$OUT/uptime.onnxtrain.$r.end"
  uptime > "$OUT/uptime.pytorch.$r.start"
  /usr/bin/time -f "pytorch: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    /usr/bin/python3 bench/fmnist_aug_pytorch.py --epochs "$EPOCHS" --random-crop 2 --random-flip \
    --label-smoothing 0.1 --eval-every-epoch --threads 2 --seed "$r" > "$OUT/pytorch.$r.log" 2>&1
  uptime > "$OUT/uptime.pytorch.$r.end"
  r=$((r + 1))
done
