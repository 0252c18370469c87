#!/usr/bin/python3
"""Compare onnxtrain's training step with PyTorch's on the same models and machine.

For each case the model is built in PyTorch 1.13, exported to ONNX in training
mode (opset 17, dynamic batch axis, no constant folding) into a temporary
folder, and then timed twice, each time in a fresh process so that the peak
resident memory is the case's own:

  * PyTorch: this script re-run as a worker (torch.set_num_threads(THREADS)),
    model.train(), SGD(lr=0.01), a fixed random batch; W untimed steps, then
    the median of K timed steps of zero_grad + forward + cross_entropy +
    backward + step; peak RSS from resource.getrusage (ru_maxrss).
  * onnxtrain: `onnxtrain bench --model case.onnx --batch-size B --steps K
    --warmup W --lr 0.01 --log-format json` (GOMAXPROCS=THREADS): the same
    step (forward + loss + backward from the exported graph, plain SGD).

The large cases (--cases large) are real-size models, each with SGD with
momentum 0.9 (lr 0.01) and with AdamW (lr 1e-3, weight decay 0.01):
torchvision resnet50(num_classes=100) at 224 px, batch 8; vit_b_16(num_classes=100)
at 224 px, batch 4; and the GPT decoder of models/gpt/export_gpt.py at its
GPT-2-small shape (12 layers, width 768, 12 heads, vocabulary 50257, T=128,
untied head, 162M parameters, loss inside the graph), batch 4. Defaults: 3
timed steps after 1 warm-up step; give --rounds 1 on a busy machine, as
a round of the six cases takes tens of minutes there. --cases gpt1024 runs
the same decoder at GPT-2's own sequence length, T=1024, batch 1 (not in
the large group: PyTorch takes about 9 s a step there).

GEMM cases time one float32 product C = op(A)·op(B) with torch.mm against
`onnxtrain bench --gemm M,N,K [--trans-a] [--trans-b]`.

    /usr/bin/python3 bench/compare.py [--cases mlp,resnet18,vit,gemm,large] [--steps K]
        [--warmup W] [--rounds R] [--threads 2] [--binary PATH] [--keep DIR]
        [--profile-dir DIR]

The table's speed ratio is PyTorch time / onnxtrain time and the RSS ratio
PyTorch peak RSS / onnxtrain peak RSS: above 1 means onnxtrain is faster or
smaller. The machine load (uptime) is printed before and after, since other
jobs on the machine skew both sides. See bench/README.md.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> (batch, default timed steps, default warm-up steps, description)
MODEL_CASES = {
    "mlp": (128, 50, 5, "MLP 784-512-512-10, batch 128"),
    "resnet18": (32, 10, 2, "ResNet-18 (torchvision, 10 classes) 3x64x64, batch 32"),
    "vit": (64, 10, 2, "ViT patch 4, 4 layers, 4 heads, dim 128, MLP 256, 3x32x32, batch 64"),
}

# Large cases: model -> (batch, description); each runs as <model>-sgd (SGD,
# momentum 0.9, lr 0.01) and <model>-adamw (AdamW, lr 1e-3, weight decay
# 0.01), 3 timed steps after 1 warm-up step unless --steps/--warmup say.
LARGE_MODELS = {
    "resnet50": (8, "ResNet-50 (torchvision, 100 classes) 3x224x224, batch 8"),
    "vit_b16": (4, "ViT-B/16 (torchvision, 100 classes) 3x224x224, batch 4"),
    "gpt": (4, "GPT decoder 12 layers, width 768, 12 heads, vocab 50257, T=128, untied (162M), batch 4"),
    "gpt1024": (1, "GPT decoder 12 layers, width 768, 12 heads, vocab 50257, T=1024, untied (163M), batch 1"),
}
# The large group (--cases large): the three models of issue 14's bars.
LARGE_GROUP = ("resnet50", "vit_b16", "gpt")
# The GPT decoders' sequence lengths (models/gpt/export_gpt.py).
GPT_SEQ = {"gpt": 128, "gpt1024": 1024}
LARGE_OPTIMIZERS = {
    "sgd": ("SGD momentum 0.9", ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"]),
    # onnxtrain bench's AdamW has weight decay 0.01 (bench/benchlib), as
    # torch.optim.AdamW's default.
    "adamw": ("AdamW", ["--optimizer", "adamw", "--lr", "0.001"]),
}
LARGE_CASES = {}
for _m, (_b, _d) in LARGE_MODELS.items():
    for _o, (_od, _) in LARGE_OPTIMIZERS.items():
        LARGE_CASES["%s-%s" % (_m, _o)] = (_m, _o, _b, 3, 1, "%s, %s" % (_d, _od))

# GEMM cases: (name, m, n, k, transA, transB). The skinny shapes are the
# training shapes of backend/cpu/gemm/compare_openblas.py (MLP and ViT layers:
# forward NN, input gradient NT, weight gradient TN).
GEMM_CASES = [
    ("gemm-1024", 1024, 1024, 1024, False, False),
    ("gemm-M128N512K784_NN", 128, 512, 784, False, False),
    ("gemm-M128N784K512_NT", 128, 784, 512, False, True),
    ("gemm-M784N512K128_TN", 784, 512, 128, True, False),
    ("gemm-M4096N128K128_NN", 4096, 128, 128, False, False),
    ("gemm-M4096N256K128_NN", 4096, 256, 128, False, False),
    ("gemm-M4096N128K256_NN", 4096, 128, 256, False, False),
    ("gemm-M4096N128K256_NT", 4096, 128, 256, False, True),
    ("gemm-M256N256K4096_TN", 256, 256, 4096, True, False),
    ("gemm-M128N256K4096_TN", 128, 256, 4096, True, False),
]
GEMM_BY_NAME = {c[0]: c for c in GEMM_CASES}


# ---------------------------------------------------------------- models


def build_model(name):
    """The PyTorch model of a case, seeded, and its input shape (without batch)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        return model, (784,)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10), (3, 64, 64)
    if name == "vit":
        sys.path.insert(0, os.path.join(ROOT, "models"))
        # models/export.py sets one thread and deterministic algorithms at
        # import, for the goldens its importers make: put the worker's
        # set-up back (the check after the build would refuse it).
        threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
        import export  # noqa: E402  (models/export.py: the fixtures' model classes)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)
        return export.ViTTiny(image=32, patch=4, dim=128, depth=4, heads=4, num_classes=10), (3, 32, 32)
    if name == "resnet50":
        import torchvision
        return torchvision.models.resnet50(num_classes=100), (3, 224, 224)
    if name == "vit_b16":
        import torchvision
        return torchvision.models.vit_b_16(num_classes=100), (3, 224, 224)
    if name in GPT_SEQ:
        sys.path.insert(0, os.path.join(ROOT, "models", "gpt"))
        import export_gpt  # noqa: E402  (models/gpt/export_gpt.py)
        return export_gpt.GPT(seq=GPT_SEQ[name]), (GPT_SEQ[name],)
    raise SystemExit("unknown model case %r (have %s)" % (name, ", ".join(MODEL_CASES)))


def export_large(model_name, folder):
    """Exports a large case's model once (the sgd and adamw cases share it)."""
    import warnings
    import torch

    warnings.filterwarnings("ignore")  # the exporter's notes on BatchNorm counters and traced asserts

    path = os.path.join(folder, model_name + ".onnx")
    if os.path.exists(path):
        return path
    if model_name in GPT_SEQ:
        sys.path.insert(0, os.path.join(ROOT, "models", "gpt"))
        import export_gpt  # noqa: E402
        torch.manual_seed(0)
        export_gpt.export(export_gpt.GPT(seq=GPT_SEQ[model_name]), path, 2, "auto")
        return path
    model, shape = build_model(model_name)
    batch = LARGE_MODELS[model_name][0]
    model.train()
    torch.onnx.export(
        model, (torch.randn(batch, *shape),), path,
        opset_version=17,
        input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    return path


def export_case(name, folder):
    import torch

    model, shape = build_model(name)
    batch = MODEL_CASES[name][0]
    model.train()
    x = torch.randn(batch, *shape)
    path = os.path.join(folder, name + ".onnx")
    torch.onnx.export(
        model, (x,), path,
        opset_version=17,
        input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    return path


def peak_rss_bytes():
    """Peak resident set size of this process in bytes: VmHWM, as onnxtrain
    bench reports it. (getrusage's ru_maxrss is not used: Linux carries it
    over from the parent through fork and exec, so a worker started by a
    driver that has exported ResNet-18 would report the driver's peak.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def summarize(times_s):
    ms = sorted(t * 1000 for t in times_s)
    p90 = ms[max(0, -(-9 * len(ms) // 10) - 1)]  # nearest rank, as onnxtrain bench
    return {"median_step_ms": statistics.median(ms), "mean_step_ms": statistics.fmean(ms), "p90_step_ms": p90}


def torch_train_worker(name, steps, warmup, threads):
    """Runs in a fresh process: times PyTorch's training step and prints JSON."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)
    if name in LARGE_CASES:
        model_name, opt_name, batch = LARGE_CASES[name][:3]
        model, shape = build_model(model_name)
        if opt_name == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        if model_name in GPT_SEQ:
            x = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
            y = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
            forward_loss = lambda: model(x, y)  # noqa: E731  (the loss is the model's output)
        else:
            x = torch.randn(batch, *shape, generator=gen)
            y = torch.randint(0, 100, (batch,), generator=gen)
            forward_loss = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    else:
        model, shape = build_model(name)
        batch = MODEL_CASES[name][0]
        x = torch.randn(batch, *shape, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        forward_loss = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    model.train()
    # a model's module must not change the peer's set-up (export_gpt.py
    # once set one thread at import: every GPT row before 5 December ran
    # PyTorch on one thread)
    if torch.get_num_threads() != threads or torch.are_deterministic_algorithms_enabled():
        raise SystemExit("compare.py: building %s left PyTorch at %d threads (want %d), deterministic algorithms %s" % (
            name, torch.get_num_threads(), threads, torch.are_deterministic_algorithms_enabled()))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss()
        loss.backward()
        opt.step()
        return loss.item()

    first = None
    for _ in range(warmup):
        loss = step()
        first = loss if first is None else first
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        first = loss if first is None else first
    res = summarize(times)
    res.update({"steps": steps, "batch_size": batch, "first_loss": first, "last_loss": loss,
                "peak_rss_bytes": peak_rss_bytes(), "threads": torch.get_num_threads()})
    print(json.dumps(res))


def torch_gemm_worker(name, reps, threads, min_rep_s=0.05):
    """Runs in a fresh process: times torch.mm on one shape and prints JSON."""
    import torch

    torch.set_num_threads(threads)
    _, m, n, k, ta, tb = GEMM_BY_NAME[name]
    torch.manual_seed(0)
    a = torch.randn(k, m).t() if ta else torch.randn(m, k)
    b = torch.randn(n, k).t() if tb else torch.randn(k, n)
    c = torch.empty(m, n)
    t0 = time.perf_counter()
    torch.mm(a, b, out=c)
    one = time.perf_counter() - t0
    calls = max(1, int(min_rep_s / one) + 1) if one < min_rep_s else 1
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=c)
        per.append((time.perf_counter() - t0) / calls)
    med = statistics.median(per)
    print(json.dumps({"median_ms": med * 1000, "gflops": 2 * m * n * k / med / 1e9, "reps": reps,
                      "calls_per_rep": calls, "peak_rss_bytes": peak_rss_bytes(), "threads": torch.get_num_threads()}))


# ---------------------------------------------------------------- driver


def run_json(cmd, env=None, timeout=3600):
    """Runs cmd, returns (parsed last JSON line of stdout, None) or (None, error text)."""
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, "exit %d: %s" % (p.returncode, "\n".join(err[-20:]))
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return None, "no JSON in output:\n" + p.stdout[-2000:]
    return json.loads(lines[-1]), None


def run_ms(res):
    """A run's time for choosing the faster: a model case's median step, a GEMM case's median product."""
    for key in ("median_step_ms", "median_ms"):
        if res.get(key) is not None:
            return res[key]
    return float("inf")


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError as e:
        return "uptime: %s" % e


def fmt_ms(v):
    return "—" if v is None else ("%.3f" % v if v < 10 else "%.1f" % v)


def fmt_mib(b):
    return "—" if b is None else "%.0f MiB" % (b / (1 << 20))


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else "%.2f" % (a / b)


def select_cases(spec):
    names = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part == "all":
            names += list(MODEL_CASES) + [c[0] for c in GEMM_CASES]
        elif part == "models":
            names += list(MODEL_CASES)
        elif part == "large":
            names += [n for n in LARGE_CASES if LARGE_CASES[n][0] in LARGE_GROUP]
        elif part in LARGE_MODELS:
            names += [n for n in LARGE_CASES if LARGE_CASES[n][0] == part]
        elif part in LARGE_CASES:
            names.append(part)
        elif part == "gemm":
            names += [c[0] for c in GEMM_CASES]
        elif part in MODEL_CASES or part in GEMM_BY_NAME:
            names.append(part)
        else:
            raise SystemExit("--cases: unknown case %r (have %s, or the groups all, models, gemm, large, %s)"
                             % (part, ", ".join(list(MODEL_CASES) + list(LARGE_CASES) + list(GEMM_BY_NAME)),
                                ", ".join(LARGE_MODELS)))
    seen = set()
    return [n for n in names if not (n in seen or seen.add(n))]


def combine(results, key, how):
    vals = [r[key] for r in results if r is not None and r.get(key) is not None]
    if not vals:
        return None
    return {"min": min, "max": max, "median": statistics.median}[how](vals)


def check_torch_blas(torch):
    """Warns when PyTorch's matrix product runs at reference-BLAS speed.

    Debian's PyTorch links libblas.so.3, which is the reference BLAS (a few
    GFLOP/s) unless an optimised one such as libopenblas0-pthread is
    installed; the comparison is then against a crippled PyTorch.
    """
    torch.set_num_threads(1)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    torch.mm(a, b)
    t0 = time.perf_counter()
    for _ in range(10):
        torch.mm(a, b)
    gflops = 10 * 2 * 256 ** 3 / (time.perf_counter() - t0) / 1e9
    print("PyTorch single-thread 256^3 GEMM: %.1f GFLOP/s" % gflops, file=sys.stderr)
    if gflops < 15:
        print("WARNING: PyTorch's BLAS looks like the reference implementation; install an optimised one "
              "(Debian: apt-get install libopenblas0-pthread) or the PyTorch side is not representative",
              file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all", help="comma-separated cases: %s, or the groups all, models, gemm, "
                    "large (the six large cases), or a large model (%s: its sgd and adamw cases)"
                    % (", ".join(list(MODEL_CASES) + list(LARGE_CASES) + list(GEMM_BY_NAME)), ", ".join(LARGE_MODELS)))
    ap.add_argument("--steps", type=int, default=0, help="timed steps per model case (default per case: mlp 50, others 10)")
    ap.add_argument("--warmup", type=int, default=-1, help="untimed steps per model case (default per case)")
    ap.add_argument("--gemm-reps", type=int, default=10, help="timed repetitions per GEMM case")
    ap.add_argument("--rounds", type=int, default=3, help="run every case this many times, alternating the two sides")
    ap.add_argument("--aggregate", choices=["min", "median"], default="min",
                    help="how to combine the rounds' median step times: the least disturbed round (min) or their median")
    ap.add_argument("--omp-wait-policy", default="best",
                    help="OMP_WAIT_POLICY for the PyTorch workers: 'best' (the default) runs each PyTorch round "
                         "twice, with PASSIVE and with OpenMP's default (the variable unset), and keeps the faster "
                         "(on a 2-vCPU guest passive wins on the transformers by 20-40%%, the default spin on "
                         "ResNet-50 by 15-20%%); 'passive' (idle OpenMP threads sleep instead of spinning, which on "
                         "a loaded machine keeps PyTorch from slowing itself down 10x), 'active', or 'inherit' "
                         "(the environment as it is) run it once")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads and GOMAXPROCS")
    ap.add_argument("--no-avx512", action="store_true",
                    help="on an AVX-512 host, measure what a CPU without it gets: onnxtrain with ONNXTRAIN_NO_AVX512=1, "
                         "PyTorch with OPENBLAS_CORETYPE=Haswell, ATEN_CPU_CAPABILITY=avx2 and ONEDNN/DNNL_MAX_CPU_ISA=AVX2")
    ap.add_argument("--binary", help="use this onnxtrain binary instead of building ./cmd/onnxtrain")
    ap.add_argument("--keep", help="export the ONNX files into this folder and keep them")
    ap.add_argument("--profile-dir", help="also write onnxtrain CPU profiles of the model cases here (CASE.pprof)")
    ap.add_argument("--op-profile", action="store_true",
                    help="also run onnxtrain bench --op-profile on each model case (one round, after the timed ones) "
                         "and keep its per-op table (time, GFLOP/s, GB/s) in --json")
    ap.add_argument("--json", help="also write the raw results to this file")
    # Internal: the per-case PyTorch processes.
    ap.add_argument("--worker", choices=["torch-train", "torch-gemm"], help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker == "torch-train":
        return torch_train_worker(args.case, args.steps, args.warmup, args.threads)
    if args.worker == "torch-gemm":
        return torch_gemm_worker(args.case, args.gemm_reps, args.threads)

    cases = select_cases(args.cases)
    import torch

    load_before = uptime()
    print("machine: %d CPUs; torch %s; %s" % (os.cpu_count(), torch.__version__,
          subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()), file=sys.stderr)
    print("load before: " + load_before, file=sys.stderr)
    check_torch_blas(torch)

    tmp = tempfile.TemporaryDirectory(prefix="onnxtrain-bench-")
    folder = args.keep or tmp.name
    os.makedirs(folder, exist_ok=True)
    binary = args.binary
    if not binary:
        binary = os.path.join(tmp.name, "onnxtrain")
        print("building %s" % binary, file=sys.stderr)
        subprocess.run(["go", "build", "-o", binary, "./cmd/onnxtrain"], cwd=ROOT, check=True)
    probe = subprocess.run([binary, "bench", "--help"], capture_output=True, text=True)
    if probe.returncode != 0 or "--gemm" not in probe.stdout:
        raise SystemExit("%s has no working `bench` command (is newBenchCmd() in the root command's AddCommand list "
                         "in cmd/onnxtrain/main.go?):\n%s" % (binary, (probe.stderr or probe.stdout).strip()))
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
    env = dict(os.environ, GOMAXPROCS=str(args.threads))
    torch_env = dict(os.environ)
    if args.omp_wait_policy not in ("inherit", "best"):
        torch_env["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    if args.no_avx512:
        env["ONNXTRAIN_NO_AVX512"] = "1"
        torch_env.update(OPENBLAS_CORETYPE="Haswell", ATEN_CPU_CAPABILITY="avx2",
                         ONEDNN_MAX_CPU_ISA="AVX2", DNNL_MAX_CPU_ISA="AVX2")
    # PyTorch's environments for a round: one, or (best) PASSIVE and OpenMP's default.
    torch_envs = [("", torch_env)]
    if args.omp_wait_policy == "best":
        unset = dict(torch_env)
        unset.pop("OMP_WAIT_POLICY", None)
        torch_envs = [("PASSIVE", dict(torch_env, OMP_WAIT_POLICY="PASSIVE")), ("default", unset)]

    rows, errors, raw = [], [], {}
    agg = args.aggregate
    gagg = "median" if agg == "median" else "max"  # the least disturbed round has the most GFLOP/s
    for name in cases:
        torch_runs, go_runs = [], []
        if name in LARGE_CASES:
            model_name, opt_name, batch, steps, warmup, desc = LARGE_CASES[name]
            steps = args.steps or steps
            warmup = warmup if args.warmup < 0 else args.warmup
            print("%s: exporting %s" % (name, model_name), file=sys.stderr)
            path = export_large(model_name, folder)
            torch_cmd = [sys.executable, os.path.abspath(__file__), "--worker", "torch-train", "--case", name,
                         "--steps", str(steps), "--warmup", str(warmup), "--threads", str(args.threads)]
            go_cmd = [binary, "bench", "--model", path, "--batch-size", str(batch), "--steps", str(steps),
                      "--warmup", str(warmup), "--log-format", "json"] + LARGE_OPTIMIZERS[opt_name][1]
            if model_name in GPT_SEQ:
                go_cmd += ["--loss", "output:loss", "--int-high", "50257"]
            if args.profile_dir:
                go_cmd += ["--cpuprofile", os.path.join(os.path.abspath(args.profile_dir), name + ".pprof")]
        elif name in MODEL_CASES:
            batch, steps, warmup, desc = MODEL_CASES[name]
            steps = args.steps or steps
            warmup = warmup if args.warmup < 0 else args.warmup
            print("%s: exporting" % name, file=sys.stderr)
            path = export_case(name, folder)
            torch_cmd = [sys.executable, os.path.abspath(__file__), "--worker", "torch-train", "--case", name,
                         "--steps", str(steps), "--warmup", str(warmup), "--threads", str(args.threads)]
            go_cmd = [binary, "bench", "--model", path, "--batch-size", str(batch), "--steps", str(steps),
                      "--warmup", str(warmup), "--lr", "0.01", "--optimizer", "sgd", "--log-format", "json"]
            if args.profile_dir:
                go_cmd += ["--cpuprofile", os.path.join(os.path.abspath(args.profile_dir), name + ".pprof")]
        else:
            _, m, n, k, ta, tb = GEMM_BY_NAME[name]
            desc = "GEMM %dx%dx%d %s%s" % (m, n, k, "T" if ta else "N", "T" if tb else "N")
            torch_cmd = [sys.executable, os.path.abspath(__file__), "--worker", "torch-gemm", "--case", name,
                         "--gemm-reps", str(args.gemm_reps), "--threads", str(args.threads)]
            go_cmd = [binary, "bench", "--gemm", "%d,%d,%d" % (m, n, k), "--steps", str(args.gemm_reps), "--log-format", "json"]
            go_cmd += ["--trans-a"] if ta else []
            go_cmd += ["--trans-b"] if tb else []
        for r in range(args.rounds):
            runs = []
            # With two policies, alternate which goes first from round to round.
            for policy, tenv in (torch_envs if r % 2 == 0 else torch_envs[::-1]):
                tag = " (%s)" % policy if policy else ""
                print("%s: round %d/%d: PyTorch%s" % (name, r + 1, args.rounds, tag), file=sys.stderr)
                one, err = run_json(torch_cmd, env=tenv)
                if err:
                    errors.append("%s (PyTorch%s): %s" % (name, tag, err))
                    continue
                if policy:
                    one["omp_wait_policy"] = policy
                runs.append(one)
            # The faster run of the round (a step's time, or a GEMM's); the other kept beside it.
            res = min(runs, key=run_ms) if runs else None
            if len(runs) > 1:
                res = dict(res, other_policy_runs=[x for x in runs if x is not res])
            torch_runs.append(res)
            print("%s: round %d/%d: onnxtrain" % (name, r + 1, args.rounds), file=sys.stderr)
            res, err = run_json(go_cmd, env=env)
            if err:
                errors.append("%s (onnxtrain): %s" % (name, err))
            go_runs.append(res)
        raw[name] = {"pytorch": torch_runs, "onnxtrain": go_runs}
        if args.op_profile and (name in LARGE_CASES or name in MODEL_CASES):
            print("%s: onnxtrain --op-profile" % name, file=sys.stderr)
            res, err = run_json([a for a in go_cmd if not a.endswith(".pprof") and a != "--cpuprofile"]
                                + ["--op-profile"], env=env)
            if err:
                errors.append("%s (onnxtrain --op-profile): %s" % (name, err))
            raw[name]["op_profile"] = res
        row = {
            "case": name, "desc": desc,
            # Model cases report a step's time, GEMM cases a product's.
            "pt_ms": combine(torch_runs, "median_step_ms", agg) or combine(torch_runs, "median_ms", agg),
            "ot_ms": combine(go_runs, "median_step_ms", agg) or combine(go_runs, "median_ms", agg),
            "pt_rss": combine(torch_runs, "peak_rss_bytes", "median"), "ot_rss": combine(go_runs, "peak_rss_bytes", "median"),
            "pt_gflops": combine(torch_runs, "gflops", gagg), "ot_gflops": combine(go_runs, "gflops", gagg),
        }
        rows.append(row)
        print("%s: PyTorch %s ms, onnxtrain %s ms" % (name, fmt_ms(row["pt_ms"]), fmt_ms(row["ot_ms"])), file=sys.stderr)

    load_after = uptime()
    print("load after: " + load_after, file=sys.stderr)

    print("| case | PyTorch median ms | onnxtrain median ms | speed ratio (PyTorch/onnxtrain) "
          "| PyTorch peak RSS | onnxtrain peak RSS | RSS ratio (PyTorch/onnxtrain) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        label = r["desc"]
        if r["pt_gflops"] is not None or r["ot_gflops"] is not None:
            label += " (GFLOP/s: PyTorch %s, onnxtrain %s)" % (
                "—" if r["pt_gflops"] is None else "%.1f" % r["pt_gflops"],
                "—" if r["ot_gflops"] is None else "%.1f" % r["ot_gflops"])
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt_ms(r["pt_ms"]), fmt_ms(r["ot_ms"]), ratio(r["pt_ms"], r["ot_ms"]),
            fmt_mib(r["pt_rss"]), fmt_mib(r["ot_rss"]), ratio(r["pt_rss"], r["ot_rss"])))
    print()
    if args.omp_wait_policy == "best":
        won = [x.get("omp_wait_policy") for v in raw.values() for x in v["pytorch"] if x]
        policy = "the faster of PASSIVE and the default (unset) in each round (PASSIVE in %d of %d)" % (
            won.count("PASSIVE"), len(won))
    else:
        policy = torch_env.get("OMP_WAIT_POLICY", "(unset)")
    print("%d threads per side; %d round(s), %s of the rounds' median times; PyTorch OMP_WAIT_POLICY=%s; load before: %s; after: %s%s"
          % (args.threads, args.rounds, agg, policy, load_before, load_after,
             "; AVX-512 off on both sides (--no-avx512)" if args.no_avx512 else ""))
    if errors:
        print()
        print("Errors:")
        for e in errors:
            print()
            print("- " + e.replace("\n", "\n  "))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "raw": raw, "errors": errors, "load_before": load_before, "load_after": load_after}, f, indent=1)
    tmp.cleanup()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
