#!/usr/bin/env bash
# Step time of data-parallel training on one machine: 1 process with the
# global batch against 2 processes with half of it each (onnxtrain launch),
# with the default overlapped all-reduce, --no-overlap and --zero 1/2.
# Interleaved repetitions; prints the median steady-state ms per optimizer
# step of each set-up (step records after the first 3).
#
#   bench/dp_steptime.sh ONNXTRAIN MODEL.onnx DATA.npz STEPS GLOBAL_BATCH REPS
#
# DATA.npz needs at least STEPS x GLOBAL_BATCH samples (arrays named like
# the graph inputs, plus "labels").
set -euo pipefail
B=$1 model=$2 data=$3 steps=$4 global=$5 reps=$6
common=(train --model "$model" --data "$data" --optimizer adamw --lr 0.001 --shuffle=false --log-format json --steps "$steps")
med() {
  /usr/bin/python3 -c '
import json, statistics, sys
recs = [json.loads(l) for l in sys.stdin if l.startswith("{") and "samples_per_s" in l][3:]
print("%.2f" % (1000 * statistics.median(r["samples"] / r["samples_per_s"] for r in recs)))'
}
declare -A R
setups=(two two-no-overlap two-zero1 two-zero2)
for rep in $(seq "$reps"); do
  R[one]+="$("$B" "${common[@]}" --batch-size "$global" 2>/dev/null | med) "
  for v in "${setups[@]}"; do
    case $v in
      two) f=() ;;
      two-no-overlap) f=(--no-overlap) ;;
      two-zero1) f=(--zero 1) ;;
      two-zero2) f=(--zero 2) ;;
    esac
    R[$v]+="$("$B" launch --nproc-per-node 2 -- "$B" "${common[@]}" --batch-size $((global / 2)) "${f[@]}" 2>/dev/null | med) "
  done
  echo "round $rep, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
for k in one "${setups[@]}"; do
  echo "$k: ${R[$k]}-> median $(echo ${R[$k]} | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') ms/step"
done
