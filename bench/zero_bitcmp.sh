#!/bin/bash
# Trains the same data-parallel and ZeRO runs with two builds of onnxtrain
# and compares their model.safetensors bit for bit (docs/core.md, "ZeRO's
# optimizer step over state views").
#
#   bench/zero_bitcmp.sh BASE_BINARY NEW_BINARY [OUT_DIR]
#
# Run from the repository root; OUT_DIR (default /tmp/zero-bitcmp) gets one
# folder and one log per run.
set -u
base=${1:?base binary}; new=${2:?new binary}; out=${3:-/tmp/zero-bitcmp}
mkdir -p "$out"
M=models/vit_tiny/vit_tiny_train.onnx; D=models/vit_tiny/train_case.npz
R=models/cifar_resnet/cifar_resnet_train.onnx; RD=models/cifar_resnet/train_case.npz
run() { # bin tag nproc steps args...
  local bin=$1 tag=$2 np=$3 steps=$4; shift 4
  rm -rf "$out/out-$tag"
  "$bin" launch --nproc-per-node "$np" -- "$bin" train --steps "$steps" --shuffle=false --log-format json \
    --output "$out/out-$tag" "$@" > "$out/log-$tag.txt" 2>&1 || { echo "FAIL $tag"; tail -5 "$out/log-$tag.txt"; }
}
status=0
while IFS='|' read -r name np steps args; do
  [ -z "$name" ] && continue
  # shellcheck disable=SC2086
  run "$base" "base-$name" "$np" "$steps" $args
  # shellcheck disable=SC2086
  run "$new" "new-$name" "$np" "$steps" $args
  a=$(sha256sum "$out/out-base-$name/model.safetensors" | cut -c1-16)
  b=$(sha256sum "$out/out-new-$name/model.safetensors" | cut -c1-16)
  if [ "$a" = "$b" ]; then echo "$name $a IDENTICAL"; else echo "$name base=$a new=$b DIFFERENT"; status=1; fi
done <<CASES
vit-zero1-sgd-accum2-clipnorm|2|4|--model $M --data $D --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 2 --grad-accum 2 --zero 1 --clip-grad-norm 0.5 --bucket-mb 0.02
vit-zero2-adamw-accum2-clipvalue|2|4|--model $M --data $D --optimizer adamw --lr 0.001 --batch-size 2 --grad-accum 2 --zero 2 --clip-grad-value 0.01 --bucket-mb 0.02
resnet-zero2-syncbn-bf16|2|4|--model $R --data $RD --optimizer adamw --lr 0.001 --batch-size 2 --zero 2 --sync-batchnorm --compress-bf16
vit-3p-zero1-adamw-accum2-clip|3|3|--model $M --data $D --optimizer adamw --lr 0.001 --batch-size 1 --grad-accum 2 --zero 1 --clip-grad-norm 0.5 --bucket-mb 0.01
vit-3p-zero2-sgd-clipvalue|3|3|--model $M --data $D --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 1 --grad-accum 2 --zero 2 --clip-grad-value 0.05 --bucket-mb 0.01
vit-dp-adamw-accum2-clip|2|4|--model $M --data $D --optimizer adamw --lr 0.001 --batch-size 2 --grad-accum 2 --clip-grad-norm 0.5 --bucket-mb 0.02
vit-dp-fp16|2|4|--model $M --data $D --optimizer adamw --lr 0.001 --batch-size 2 --mixed-precision fp16 --clip-grad-norm 1
CASES
exit $status
