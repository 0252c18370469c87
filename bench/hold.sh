#!/bin/bash
# hold.sh BINARY OUTDIR [EXPORTS]: issue 14's measurement of a build against PyTorch
# (docs/large-models.md): the 2048³ GEMM and the triad, compare.py's six large cases (three
# rounds with AVX-512, two with both sides on AVX2), then --op-profile-by-shape of the three
# models with and without AVX-512 (three timed steps each; the profile measures its own GEMM
# and triad before the warm-up step and after the last timed step), and the GEMM and triad
# again. PROFILE_RUNS=N repeats the profiles N times (each run's files PROF.rK.json beside the
# first's PROF.json; holdbars.py and holdranges.py take each number's median over them).
# EXPORTS (default /tmp/lead/keep) holds resnet50.onnx, vit_b16.onnx and gpt.onnx;
# compare.py exports what is missing. About 20 minutes on the 2-core VM (compare.py runs each
# PyTorch round with two OpenMP wait policies and keeps the faster); read the profiles with
# bench/holdbars.py, the two compare.py runs with bench/holdtable.py, and several holds
# together with bench/holdranges.py.
set -u
B=$(readlink -f "$1"); O=$(mkdir -p "$2" && readlink -f "$2"); K=${3:-/tmp/lead/keep}
cd "$(dirname "$0")/.."
ref() {
  local nx # the caller loops over nx too
  for nx in "" 1; do ONNXTRAIN_NO_AVX512=$nx GOMAXPROCS=2 "$B" bench --gemm 2048,2048,2048 --steps 10 2>&1 | tail -1; done
  "$B" bench --stream 2>&1 | tail -1
}
date -u +%T > "$O/start"; ref > "$O/ref_start.txt"
/usr/bin/python3 bench/compare.py --cases large --rounds 3 --binary "$B" --keep "$K" --json "$O/large.json" > "$O/large.txt" 2>&1
/usr/bin/python3 bench/compare.py --cases large --rounds 2 --no-avx512 --binary "$B" --keep "$K" --json "$O/large_avx2.json" > "$O/large_avx2.txt" 2>&1
common=(--steps 3 --warmup 1 --optimizer sgd --momentum 0.9 --op-profile-by-shape --log-format json)
for run in $(seq 1 "${PROFILE_RUNS:-1}"); do
  r=""; [ "$run" -gt 1 ] && r=".r$run"
  for nx in "" 1; do
    ref > "$O/ref_prof$nx$r.txt"
    ONNXTRAIN_NO_AVX512=$nx GOMAXPROCS=2 "$B" bench --model "$K/resnet50.onnx" --batch-size 8 --lr 0.01 "${common[@]}" > "$O/prof_resnet50$nx$r.json" 2>&1
    ONNXTRAIN_NO_AVX512=$nx GOMAXPROCS=2 "$B" bench --model "$K/vit_b16.onnx" --batch-size 4 --lr 0.01 "${common[@]}" > "$O/prof_vit$nx$r.json" 2>&1
    ONNXTRAIN_NO_AVX512=$nx GOMAXPROCS=2 "$B" bench --model "$K/gpt.onnx" --batch-size 4 --loss output:loss --int-high 50257 "${common[@]}" > "$O/prof_gpt$nx$r.json" 2>&1
  done
done
ref > "$O/ref_end.txt"; date -u +%T > "$O/end"
