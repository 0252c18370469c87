#!/bin/sh
# The optimizer's update inside the step against --separate-update (gradient
# sums kept as state), on the GPT and ViT-B/16 exports that
# `bench/compare.py --keep DIR` writes: peak RSS, step and update times, one
# JSON line per run. Run it under the shared lock on a shared machine:
#   flock /work/notes/bigmem.lock bench/fused_update_rss.sh ./onnxtrain DIR > out.jsonl
set -eu
bin=${1:?usage: fused_update_rss.sh ONNXTRAIN KEEP_DIR}
keep=${2:?usage: fused_update_rss.sh ONNXTRAIN KEEP_DIR}
echo "{\"uptime\": \"$(uptime)\"}"
"$bin" bench --stream --log-format json | tail -n 1
for opt in "adamw --lr 0.0001" "sgd --momentum 0.9 --lr 0.01"; do
  for sep in false true; do
    # shellcheck disable=SC2086
    "$bin" bench --model "$keep/gpt.onnx" --batch-size 4 --loss output:loss --int-high 50257 --steps 3 --warmup 1 \
      --optimizer $opt --separate-update=$sep --log-format json | tail -n 1
    # shellcheck disable=SC2086
    "$bin" bench --model "$keep/vit_b16.onnx" --batch-size 4 --steps 3 --warmup 1 \
      --optimizer $opt --separate-update=$sep --log-format json | tail -n 1
  done
done
"$bin" bench --stream --log-format json | tail -n 1
echo "{\"uptime\": \"$(uptime)\"}"
