#!/usr/bin/env python3
"""Compare backend/cpu/gemm's Sgemm with PyTorch's OpenBLAS on the same shapes.

For every shape the Go benchmark (BenchmarkSgemm1024 or a sub-benchmark of
BenchmarkSgemmTraining, built once with `go test -c`) and torch.mm run back
to back on the same number of threads (--threads, default 2); the whole
table is repeated --reps times and the medians (and the best runs, the
closest to an idle machine) are printed with their ratios. The machine
load (uptime) is printed before and after, since other jobs skew both
sides.

With --threads 1 both sides also report throughput per CPU second of the
one thread doing the work (Go: CLOCK_THREAD_CPUTIME_ID, Python:
time.thread_time, with OpenBLAS confined to the calling thread), which
leaves out the time other processes take from the core and so compares the
kernels themselves on a busy machine.

    /usr/bin/python3 backend/cpu/gemm/compare_openblas.py [--reps 5] [--benchtime 1s] [--only REGEX] [--threads 2]

The shape table must match trainingShapes in bench_test.go (names are
M<m>N<n>K<k>_<op(A)op(B)>, T meaning the operand is stored transposed).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# (name, m, n, k, transA, transB); "1024" is BenchmarkSgemm1024.
SHAPES = [
    ("1024", 1024, 1024, 1024, False, False),
    ("M128N512K784_NN", 128, 512, 784, False, False),
    ("M128N784K512_NT", 128, 784, 512, False, True),
    ("M784N512K128_TN", 784, 512, 128, True, False),
    ("M4096N128K128_NN", 4096, 128, 128, False, False),
    ("M4096N256K128_NN", 4096, 256, 128, False, False),
    ("M4096N128K256_NN", 4096, 128, 256, False, False),
    ("M4096N128K256_NT", 4096, 128, 256, False, True),
    ("M256N256K4096_TN", 256, 256, 4096, True, False),
    ("M128N256K4096_TN", 128, 256, 4096, True, False),
    ("M128N512K784_NT", 128, 512, 784, False, True),
    ("M128N512K512_NT", 128, 512, 512, False, True),
    ("M128N10K512_NT", 128, 10, 512, False, True),
    ("M512N784K128_TN", 512, 784, 128, True, False),
    ("M512N512K128_TN", 512, 512, 128, True, False),
    ("M10N512K128_TN", 10, 512, 128, True, False),
    ("M128N512K512_NN", 128, 512, 512, False, False),
    ("M128N512K10_NN", 128, 512, 10, False, False),
]

HERE = os.path.dirname(os.path.abspath(__file__))


def build_go_test(path):
    subprocess.run(["go", "test", "-c", "-o", path, "."], cwd=HERE, check=True)


def go_gflops(binary, name, benchtime, threads):
    """Returns (wall GFLOP/s, CPU-time GFLOP/s or None)."""
    pattern = "^BenchmarkSgemm1024$" if name == "1024" else "^BenchmarkSgemmTraining$/^%s$" % name
    out = subprocess.run(
        [binary, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime,
         "-test.cpu", str(threads)],
        cwd=HERE, check=True, capture_output=True, text=True).stdout
    wall = re.search(r"([0-9.]+) GFLOP/s", out)
    if not wall:
        sys.exit("no GFLOP/s in benchmark output for %s:\n%s" % (name, out))
    cpu = re.search(r"([0-9.]+) cpu-GFLOP/s", out)
    return float(wall.group(1)), float(cpu.group(1)) if cpu else None


def torch_gflops(torch, m, n, k, trans_a, trans_b, seconds):
    """Returns (wall GFLOP/s, calling-thread CPU-time GFLOP/s)."""
    a = torch.randn(k, m).t() if trans_a else torch.randn(m, k)
    b = torch.randn(n, k).t() if trans_b else torch.randn(k, n)
    c = torch.empty(m, n)
    for _ in range(5):
        torch.mm(a, b, out=c)
    iters, start, cpu_start = 0, time.perf_counter(), time.thread_time()
    while True:
        torch.mm(a, b, out=c)
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and iters >= 10:
            break
    cpu = time.thread_time() - cpu_start
    flop = 2.0 * m * n * k * iters
    return flop / elapsed / 1e9, flop / cpu / 1e9


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def table(title, shapes, ours, theirs, reps):
    print(title)
    print("%-18s %8s %8s %6s | %8s %8s %6s" % ("shape", "ours", "OpenBLAS", "ratio", "ours", "OpenBLAS", "ratio"))
    print("%-18s %24s | %24s" % ("", "median of %d" % reps, "best of %d" % reps))
    for name, *_ in shapes:
        o, t = statistics.median(ours[name]), statistics.median(theirs[name])
        bo, bt = max(ours[name]), max(theirs[name])
        print("%-18s %8.1f %8.1f %6.2f | %8.1f %8.1f %6.2f" % (name, o, t, o / t, bo, bt, bo / bt))
    print()
    print("all measurements (GFLOP/s):")
    for name, *_ in shapes:
        print("  %-18s ours %s | OpenBLAS %s" % (
            name, " ".join("%.0f" % v for v in ours[name]), " ".join("%.0f" % v for v in theirs[name])))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the whole table")
    ap.add_argument("--benchtime", default="1s", help="go test -benchtime per measurement")
    ap.add_argument("--only", default="", help="regular expression selecting shape names")
    ap.add_argument("--threads", type=int, default=2, help="GOMAXPROCS for Go, threads for OpenBLAS")
    args = ap.parse_args()
    # OpenBLAS reads its thread count when torch loads it.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    seconds = float(args.benchtime[:-1]) if args.benchtime.endswith("s") else 1.0
    shapes = [s for s in SHAPES if re.search(args.only, s[0])]

    print("load before:", uptime())
    print("torch", torch.__version__, "threads", torch.get_num_threads())
    ours = {s[0]: [] for s in shapes}
    theirs = {s[0]: [] for s in shapes}
    ours_cpu = {s[0]: [] for s in shapes}
    theirs_cpu = {s[0]: [] for s in shapes}
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "gemm.test")
        build_go_test(binary)
        for rep in range(args.reps):
            for name, m, n, k, ta, tb in shapes:
                wall, cpu = go_gflops(binary, name, args.benchtime, args.threads)
                ours[name].append(wall)
                ours_cpu[name].append(cpu)
                wall, cpu = torch_gflops(torch, m, n, k, ta, tb, seconds)
                theirs[name].append(wall)
                theirs_cpu[name].append(cpu)
            print("rep %d/%d done, %s" % (rep + 1, args.reps, uptime()), file=sys.stderr)
    print("load after: ", uptime())
    print()
    table("wall clock, %d thread(s):" % args.threads, shapes, ours, theirs, args.reps)
    if args.threads == 1 and all(v is not None for vs in ours_cpu.values() for v in vs):
        table("per CPU second of the working thread:", shapes, ours_cpu, theirs_cpu, args.reps)


if __name__ == "__main__":
    main()
