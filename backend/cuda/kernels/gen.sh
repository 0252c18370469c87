#!/bin/sh
# Regenerates kernels.ptx from kernels.cu with Debian 12's clang-14 (no
# NVIDIA toolkit needed). `go generate ./backend/cuda` runs it;
# TestPTXUpToDate checks that the committed PTX is what it makes. Another
# clang version may emit different (equally valid) PTX: CLANG=... overrides,
# but commit PTX made by clang-14, which CI compares against.
set -eu
cd "$(dirname "$0")"
CLANG=${CLANG:-clang-14}
"$CLANG" -x cuda --cuda-gpu-arch=sm_80 --cuda-device-only -nocudainc -nocudalib \
  -O3 -ffp-contract=off -fno-ident -S -o kernels.ptx kernels.cu
