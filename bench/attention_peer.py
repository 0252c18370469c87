#!/usr/bin/python3
"""PyTorch's batched products on attention's shapes: the peer figure for
onnxtrain's PermutedMatMul (docs/large-models.md, "Attention's batched
products against a peer").

Times torch.bmm on the six products of one attention layer's forward and
backward (ViT-B/16 at 224 px batch 4: 48 heads of 197 tokens × 64; the GPT
decoder: 48 heads of 128 × 64), with the operands laid out as
nn.MultiheadAttention hands them to bmm (q, k, v as [T, B·H, D] transposed
to [B·H, T, D] views; the scores [B·H, T, T] contiguous), and the 2048³
torch.mm in the same run, so each product reads as a fraction of the
peer's own large GEMM.

usage: attention_peer.py [--threads 2] [--reps 20] [--tokens 197,128] [--json PATH]
With --no-avx512 the caller sets OPENBLAS_CORETYPE=Haswell and
ATEN_CPU_CAPABILITY=avx2 in the environment (bench/compare.py's --no-avx512).
"""
import argparse
import json
import sys
import time

import torch


def products(T, BH, D, contiguous):
    g = torch.Generator().manual_seed(1)
    def heads():
        x = torch.randn(T, BH, D, generator=g)
        x = x.transpose(0, 1)  # [BH, T, D] view, as MultiheadAttention's q, k, v
        return x.contiguous() if contiguous else x
    q, k, v, do = heads(), heads(), heads(), heads()
    p = torch.randn(BH, T, T, generator=g)
    ds = torch.randn(BH, T, T, generator=g)
    return [
        ("qkT", lambda: torch.bmm(q, k.transpose(1, 2))),
        ("pv", lambda: torch.bmm(p, v)),
        ("dP=dO·Vᵀ", lambda: torch.bmm(do, v.transpose(1, 2))),
        ("dV=Pᵀ·dO", lambda: torch.bmm(p.transpose(1, 2), do)),
        ("dQ=dS·K", lambda: torch.bmm(ds, k)),
        ("dK=dSᵀ·Q", lambda: torch.bmm(ds.transpose(1, 2), q)),
    ]


def rate(fn, flop, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    med = ts[len(ts) // 2]
    return flop / med / 1e9, flop / ts[0] / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tokens", default="197,128")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    ref_fn = lambda: torch.mm(a, b)
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__, "rows": []}
    for T in [int(t) for t in args.tokens.split(",")]:
        BH, D = 48, 64
        flop = 2.0 * BH * T * T * D
        for contiguous in (False, True):
            for name, fn in products(T, BH, D, contiguous):
                ref_med, _ = rate(ref_fn, 2.0 * 2048 ** 3, 5)
                med, best = rate(fn, flop, args.reps)
                row = {"T": T, "product": name, "layout": "contiguous" if contiguous else "views",
                       "gflops_median": med, "gflops_best": best, "ref2048_gflops": ref_med}
                out["rows"].append(row)
                print("T=%d %-10s %-10s %7.1f GFLOP/s (best %7.1f)  2048³ mm %6.1f  of-ref %.2f"
                      % (T, name, row["layout"], med, best, ref_med, med / ref_med))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
