#!/bin/sh
# Transfer learning on Fashion-MNIST, the onnxtrain half (docs/finetuning.md):
# after bench/transfer_fmnist.py, fine-tune the pretrained inference export
# with a new 5-class head on classes 5-9, and train the same network from
# scratch with the same recipe and budget; evaluate both on the 5000 test
# images of classes 5-9. Usage: bench/transfer_fmnist.sh [DIR] [EPOCHS]
set -eu
DIR=${1:-/tmp/transfer}
EPOCHS=${2:-5}
BIN=${ONNXTRAIN:-onnxtrain}
RECIPE="--data $DIR/ft_train.npz --epochs $EPOCHS --batch-size 64 --optimizer adamw --lr 1e-3 --weight-decay 0.01 --lr-schedule cosine --warmup-steps 10 --seed 1"
uptime
/usr/bin/time -f "fine-tune: wall %e s, cpu %U+%S s" \
  "$BIN" train --model "$DIR/pretrained_eval.onnx" --num-classes 5 $RECIPE --output "$DIR/finetuned" 2>&1 | grep -v '^step [0-9]*/[0-9]* ' || true
/usr/bin/time -f "from scratch: wall %e s, cpu %U+%S s" \
  "$BIN" train --model "$DIR/scratch_train.onnx" $RECIPE --output "$DIR/scratch" 2>&1 | grep -v '^step [0-9]*/[0-9]* ' || true
for run in finetuned scratch; do
  echo "== $run"
  "$BIN" eval --model "$DIR/$run/model.onnx" --data "$DIR/ft_test.npz" --batch-size 500
done
uptime
