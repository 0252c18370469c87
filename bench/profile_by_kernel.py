#!/usr/bin/python3
"""Aggregate an `onnxtrain bench --cpuprofile` profile by CPU kernel.

    /usr/bin/python3 bench/profile_by_kernel.py [--binary ONNXTRAIN] [--top 25] PROFILE

Reads the profile's stacks (`go tool pprof -traces`) and charges every sample
to the kernel the executor was running: the function that
backend/cpu.(*Executable).call invoked (convKernel, batchNorm, ...). Samples
of helper goroutines (gemm.parallelFor, nn.parallelFor, elementwise
parallelRange workers) carry no executor frame; they are shared out over the
kernels in proportion to each kernel's own samples inside the same helper on
the calling goroutine, which takes an equal share of the same work. Samples
outside the executor go to the optimizer step, the garbage collector, or
"other".

Prints a markdown table: kernel, seconds on the calling goroutine, seconds
with its share of the helper goroutines, share of the profile, and the part of
that spent in the GEMM package (backend/cpu/gemm).
"""
import argparse
import collections
import re
import subprocess
import sys

PREFIX = "github.com/onnxtrain/onnxtrain/"
CALL = "backend/cpu.(*Executable).call"
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "hrs": 3600.0}


def short(frame):
    frame = frame.replace(" (inline)", "").strip()
    if frame.startswith(PREFIX):
        frame = frame[len(PREFIX):]
    frame = re.sub(r"\[go\.shape\.[^\]]*\]", "", frame)
    return frame.replace("backend/cpu/ops/", "ops/")


def parse_traces(text):
    """Yields (seconds, [frames leaf first])."""
    value, frames = None, []
    for line in text.splitlines():
        if line.startswith("-----------+"):
            if value is not None and frames:
                yield value, frames
            value, frames = None, []
            continue
        m = re.match(r"^\s*([0-9.]+)(ns|us|µs|ms|s|min|hrs)\s+(.*)$", line)
        if m and value is None:
            value = float(m.group(1)) * UNITS[m.group(2)]
            frames.append(short(m.group(3)))
        elif value is not None and line.strip():
            frames.append(short(line))
    if value is not None and frames:
        yield value, frames


def helper_of(root):
    """The parallel helper a goroutine was started by: "backend/cpu/gemm.parallelFor"
    for a goroutine whose root frame is "backend/cpu/gemm.parallelFor.func2"."""
    m = re.match(r"^(.*?)\.(func\d+|gowrap\d+)", root)
    return m.group(1) if m else None


def parents(fn):
    """fn and the functions enclosing it: "a.b.func3.1" -> ["a.b.func3.1", "a.b.func3", "a.b"]."""
    out = [fn]
    while True:
        m = re.match(r"^(.*)\.(func\d+|\d+|gowrap\d+)$", fn)
        if not m:
            return out
        fn = m.group(1)
        out.append(fn)


def pct(a, b):
    return 100 * a / b if b else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--binary", help="the onnxtrain binary that wrote the profile (for symbols)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    cmd = ["go", "tool", "pprof", "-traces"] + ([args.binary] if args.binary else []) + [args.profile]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    own = collections.Counter()        # kernel -> seconds on the calling goroutine
    est = collections.Counter()        # kernel -> seconds with its helper goroutines
    est_gemm = collections.Counter()   # kernel -> of which inside backend/cpu/gemm
    leaves = collections.defaultdict(collections.Counter)  # label -> leaf -> seconds
    by_frame = collections.defaultdict(collections.Counter)  # frame on a calling goroutine -> kernel -> seconds
    pending = []                       # helper-goroutine samples: (seconds, frames, helper)
    other = collections.Counter()
    total = 0.0
    for sec, frames in parse_traces(text):
        total += sec
        gemm = any(f.startswith("backend/cpu/gemm.") for f in frames)
        if CALL in frames:
            i = frames.index(CALL)
            j = i - 1
            # Skip the mixed-precision adapter that wraps float32-only
            # kernels (ops.AdaptHalfKernels): charge the kernel it calls.
            while j > 0 and "HalfAdapter" in frames[j]:
                j -= 1
            kernel = frames[j] if j >= 0 else "(executor)"
            own[kernel] += sec
            est[kernel] += sec
            if gemm:
                est_gemm[kernel] += sec
            leaves[kernel][frames[0]] += sec
            for f in set(frames[:i]):
                by_frame[f][kernel] += sec
            continue
        root = frames[-1]
        h = helper_of(root)
        if h and (h.startswith("ops/") or h.startswith("backend/cpu/")):
            pending.append((sec, frames, h))
        elif any(f.startswith("train/optim.") for f in frames):
            other["optimizer step (train/optim)"] += sec
        elif any(f.startswith("runtime.gcBgMarkWorker") for f in frames):
            other["garbage collector (background)"] += sec
        elif any(f.startswith("train.(*Program).ForwardBackward") for f in frames):
            other["ForwardBackward outside kernels"] += sec
        else:
            other["other: " + root] += sec

    # Helper goroutines: charge each sample to the kernels whose own stacks
    # share the most of its frames (a conv worker's convRun.func3 -> matmul
    # -> gemm chain matches convKernel better than the conv gradients, which
    # share only the gemm frames), in proportion to the time those kernels
    # spent in the most specific shared frame.
    kernel_frames = collections.defaultdict(set)
    for f, ks in by_frame.items():
        for k in ks:
            kernel_frames[k].add(f)
    unassigned = collections.Counter()
    for sec, frames, h in pending:
        gemm = any(f.startswith("backend/cpu/gemm.") for f in frames)
        fn = frames[-2] if len(frames) > 1 else frames[-1]
        wanted = {f for f in frames[:-1] if not f.startswith("runtime.") and not f.startswith("sync.")}
        wanted.update(parents(fn))
        best, weights = 0, {}
        for k, fs in kernel_frames.items():
            shared = wanted & fs
            if not shared or len(shared) < best:
                continue
            w = min(by_frame[f][k] for f in shared)
            if len(shared) > best:
                best, weights = len(shared), {}
            weights[k] = w
        base = sum(weights.values())
        if not base:
            label = "helper goroutines: " + fn
            unassigned[label] += sec
            leaves[label][frames[0]] += sec
            continue
        for k, w in weights.items():
            est[k] += sec * w / base
            if gemm:
                est_gemm[k] += sec * w / base
            leaves[k][frames[0]] += sec * w / base

    def hottest(label):
        lv = leaves.get(label)
        if not lv:
            return ""
        leaf, sec = lv.most_common(1)[0]
        return "%s (%.0f%%)" % (leaf, pct(sec, sum(lv.values())))

    print("profile: %s; %.2f s of samples" % (args.profile, total))
    print()
    print("| kernel | calling goroutine s | with helper goroutines s | share | of which GEMM | hottest leaf function |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    rows = sorted(est.items(), key=lambda kv: -kv[1])
    for k, s in rows[:args.top]:
        print("| %s | %.2f | %.2f | %.1f%% | %.0f%% | %s |" % (k, own[k], s, pct(s, total), pct(est_gemm[k], s), hottest(k)))
    rest = sum(s for _, s in rows[args.top:])
    if rest:
        print("| (%d more kernels) | | %.2f | %.1f%% | | |" % (len(rows) - args.top, rest, pct(rest, total)))
    for k, s in sorted((other + unassigned).items(), key=lambda kv: -kv[1]):
        print("| %s | | %.2f | %.1f%% | | %s |" % (k, s, pct(s, total), hottest(k)))
    kernels = sum(est.values())
    print()
    print("kernels %.1f%% of samples (GEMM %.1f%%); helper goroutines not traced to a kernel %.1f%%; "
          "outside kernels %.1f%%" % (pct(kernels, total), pct(sum(est_gemm.values()), total),
                                      pct(sum(unassigned.values()), total), pct(sum(other.values()), total)))


if __name__ == "__main__":
    sys.exit(main())
