#!/usr/bin/env bash
# The CUDA backend's device check (issue 15): run once on a machine with an
# NVIDIA GPU, from the repository root. About 5-7 minutes on one H200.
#
# Prepare on any machine (no GPU needed), then take the repository folder,
# the binaries and the models folder to the GPU machine:
#
#   go build -o onnxtrain ./cmd/onnxtrain                      # the static binary
#   go test -c -o cuda.test ./backend/cuda                     # the GPU tests
#   go test -c -o train.test ./train                           # (optional) train's own tests
#   python3 bench/cuda_torch.py --export /tmp/onnxtrain-cuda-models   # ResNet-50, ViT-B/16, GPT (~1.5 GB)
#
# On the GPU machine: the NVIDIA driver (libcuda.so.1) and cuBLAS 11 or 12
# (the toolkit's lib64, or `pip install nvidia-cublas-cu12`; set
# ONNXTRAIN_CUDA_LIBS to its folder if it is elsewhere), and for the
# PyTorch ratios a CUDA build of PyTorch with torchvision. Then:
#
#   bench/cuda_check.sh [MODELS_DIR]            (default /tmp/onnxtrain-cuda-models)
#
# It prints, in order: `onnxtrain env`; conformance on --backend cuda for
# every suite of ../shared/onnx/testdata (or testdata/onnx), with the
# pass counts and the failures (node must reach 95%, the other suites all);
# the GPU tests (the fixtures' forward against the CPU backend, the golden
# training traces of models/ at float32 -- first step 1e-5, later 1e-3 --,
# the bf16 autocast golden check, state staying on the device); and
# `onnxtrain bench --backend cuda` against PyTorch eager on the same GPU for
# ResNet-50 (224 px), ViT-B/16 and the GPT decoder, float32 and bf16, as
# PyTorch time / onnxtrain time (above 1: onnxtrain faster). Each section
# says PASS or FAIL; the script exits non-zero if any failed.
# ONNXTRAIN_CUDA_GRAPHS=0 in the environment turns whole-step capture off.
set -uo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-/tmp/onnxtrain-cuda-models}
BIN=${ONNXTRAIN:-./onnxtrain}
TESTBIN=${CUDA_TEST:-./cuda.test}
PY=${PYTHON:-python3}
failed=()
t0=$(date +%s)
section() { printf '\n== %s (%ds)\n' "$1" $(( $(date +%s) - t0 )); }

[ -x "$BIN" ] || { echo "no $BIN: go build -o onnxtrain ./cmd/onnxtrain first" >&2; exit 2; }

section "environment"
"$BIN" env
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
date -u +%Y-%m-%d

section "conformance (--backend cuda)"
TD=../shared/onnx/testdata
[ -d "$TD" ] || TD=testdata/onnx
for suite in node simple pytorch-converted pytorch-operator light; do
  out=$(timeout 300 "$BIN" conformance --backend cuda --testdata "$TD/$suite" --json 2>&1)
  summary=$(printf '%s\n' "$out" | tail -n 1)
  passed=$(printf '%s' "$summary" | sed -n 's/.*"passed":\([0-9]*\).*/\1/p')
  failedn=$(printf '%s' "$summary" | sed -n 's/.*"failed":\([0-9]*\).*/\1/p')
  skipped=$(printf '%s' "$summary" | sed -n 's/.*"skipped":\([0-9]*\).*/\1/p')
  passed=${passed:-0}; failedn=${failedn:-0}; skipped=${skipped:-0}
  total=$((passed + failedn + skipped))
  pct=0; [ "$total" -gt 0 ] && pct=$((100 * passed / total))
  need=100; [ "$suite" = node ] && need=95
  verdict=PASS
  if [ "$total" -eq 0 ] || [ "$pct" -lt "$need" ] || { [ "$need" -eq 100 ] && [ "$failedn" -gt 0 ]; }; then
    verdict=FAIL; failed+=("conformance/$suite")
  fi
  echo "$suite: $passed of $total passed ($pct%, need $need%), $skipped skipped: $verdict"
  printf '%s\n' "$out" | grep -v '"status":"pass"' | grep '"name"' | sed -n 's/.*"name":"\([^"]*\)".*"status":"\([a-z]*\)".*/  failed: \1 (\2)/p' | head -40
  printf '%s\n' "$out" | grep -v '^{' | head -3
done
# Graphs the GPU cannot plan (strings, sequences, control flow) run on the
# CPU backend; without that fallback the node suite's GPU-only figure is:
out=$(ONNXTRAIN_CUDA_HOST_FALLBACK=0 timeout 300 "$BIN" conformance --backend cuda --testdata "$TD/node" --json 2>&1 | tail -n 1)
echo "node without the CPU fallback (ONNXTRAIN_CUDA_HOST_FALLBACK=0): $out"

section "GPU tests: forward vs CPU, golden training (float32), bf16 autocast, state on device"
if [ -x "$TESTBIN" ]; then
  if (cd backend/cuda && timeout 300 "../../$TESTBIN" -test.run 'GPU|Open' -test.v 2>&1 | tee /tmp/onnxtrain-cuda-tests.log | grep -E '^(--- |=== RUN|PASS|FAIL|ok)|Error|skip' | grep -v '=== RUN'); then :; fi
  if grep -q -- '--- SKIP' /tmp/onnxtrain-cuda-tests.log; then
    echo "GPU tests SKIPPED (no GPU?): FAIL"; failed+=("gpu-tests-skipped")
  elif grep -q -E '^(--- )?FAIL' /tmp/onnxtrain-cuda-tests.log; then
    echo "GPU tests: FAIL"; failed+=("gpu-tests")
  else
    echo "GPU tests: PASS"
  fi
else
  echo "no $TESTBIN (go test -c -o cuda.test ./backend/cuda): FAIL"; failed+=("gpu-tests-missing")
fi

section "bench: onnxtrain --backend cuda vs PyTorch eager, same GPU"
printf '%-10s %-5s %6s %14s %14s %8s %14s\n' model prec batch onnxtrain_ms pytorch_ms ratio planned_peak
for spec in resnet50:64 vit_b16:64 gpt:16; do
  m=${spec%%:*}; b=${spec##*:}
  [ -f "$MODELS/$m.onnx" ] || { echo "$m: no $MODELS/$m.onnx (bench/cuda_torch.py --export $MODELS)"; failed+=("bench/$m-missing"); continue; }
  extra=()
  [ "$m" = gpt ] && extra=(--loss output:loss --int-high 50257)
  for prec in fp32 bf16; do
    mp=no; [ "$prec" = bf16 ] && mp=bf16
    ours=$(timeout 240 "$BIN" bench --backend cuda --model "$MODELS/$m.onnx" --batch-size "$b" --steps 10 --warmup 3 \
      --mixed-precision "$mp" "${extra[@]}" --log-format json 2>/tmp/onnxtrain-cuda-bench.err | tail -n 1)
    theirs=$(timeout 240 "$PY" bench/cuda_torch.py --time "$m" --batch "$b" --precision "$prec" --steps 10 --warmup 3 2>/dev/null | tail -n 1)
    o=$(printf '%s' "$ours" | sed -n 's/.*"median_step_ms":\([0-9.e+-]*\).*/\1/p')
    p=$(printf '%s' "$theirs" | sed -n 's/.*"median_step_ms": *\([0-9.e+-]*\).*/\1/p')
    peak=$(printf '%s' "$ours" | sed -n 's/.*"planned_peak_bytes":\([0-9]*\).*/\1/p')
    if [ -z "$o" ]; then
      echo "$m $prec: onnxtrain failed: $(tail -n 2 /tmp/onnxtrain-cuda-bench.err)"; failed+=("bench/$m-$prec"); continue
    fi
    r=$(awk -v p="${p:-0}" -v o="$o" 'BEGIN { if (p > 0) printf "%.2f", p / o; else print "n/a" }')
    printf '%-10s %-5s %6s %14.2f %14s %8s %14s\n' "$m" "$prec" "$b" "$o" "${p:-n/a}" "$r" "${peak:-?}"
  done
done

section "done"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all sections passed"
