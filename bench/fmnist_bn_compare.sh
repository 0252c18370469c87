#!/bin/sh
# Fashion-MNIST, 2 conv + pooling + BatchNorm (models/fmnist_bn), the same
# recipe in onnxtrain and PyTorch, started together on this machine; see
# docs/finetuning.md. Usage: bench/fmnist_bn_compare.sh [EPOCHS] [OUTDIR]
set -eu
EPOCHS=${1:-8}
OUT=${2:-/tmp/fmnist_bn}
WARMUP=${WARMUP:-200}
BIN=${ONNXTRAIN:-onnxtrain}
mkdir -p "$OUT"
uptime > "$OUT/uptime.start"
(
  /usr/bin/time -f "onnxtrain train: wall %e s, cpu %U+%S s, max RSS %M KiB" \
    "$BIN" train --model models/fmnist_bn/fmnist_bn_train.onnx --data /usr/share/datasets/fashion-mnist \
    --epochs "$EPOCHS" --batch-size 128 --optimizer adamw --lr 3e-3 --weight-decay 0.01 \
    --lr-schedule cosine --warmup-steps "$WARMUP" --seed 1 --output "$OUT/onnxtrain" > "$OUT/onnxtrain.log" 2>&1
  /usr/bin/time -f "onnxtrain eval: wall %e s, cpu %U+%S s" \
    "$BIN" eval --model "$OUT/onnxtrain/model.onnx" --data /usr/share/datasets/fashion-mnist --batch-size 1000 \
    > "$OUT/onnxtrain_eval.log" 2>&1
  uptime > "$OUT/uptime.onnxtrain_done"
) &
/usr/bin/time -f "pytorch: wall %e s, cpu %U+%S s, max RSS %M KiB" \
  /usr/bin/python3 bench/fmnist_bn_pytorch.py --epochs "$EPOCHS" --warmup-steps "$WARMUP" --threads 2 > "$OUT/pytorch.log" 2>&1 &
wait
uptime > "$OUT/uptime.end"
