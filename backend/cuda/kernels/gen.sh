#!/bin/sh
# Regenerates kernels.ptx from kernels.cu with Debian's clang (package
# clang-14 or newer; no NVIDIA toolkit needed). `go generate ./backend/cuda`
# runs it; TestPTXUpToDate checks that the committed PTX is what it makes.
set -eu
cd "$(dirname "$0")"
CLANG=${CLANG:-$(command -v clang-14 || command -v clang)}
"$CLANG" -x cuda --cuda-gpu-arch=sm_80 --cuda-device-only -nocudainc -nocudalib \
  -O3 -ffp-contract=off -fno-ident -S -o kernels.ptx kernels.cu
