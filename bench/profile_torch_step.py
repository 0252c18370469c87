#!/usr/bin/python3
"""Profile PyTorch's training step of one compare.py case, per op.

    /usr/bin/python3 bench/profile_torch_step.py [--case vit_b16-sgd] [--threads 2] [--steps 2] [--top 30]

Builds the case's model exactly as bench/compare.py does (same seed, batch,
optimizer), runs --warmup untimed steps, then --steps steps under
torch.autograd.profiler, and prints:

- wall time and process CPU time per step (CPU seconds are what other
  processes on a shared machine disturb least; compare them with the CPU
  samples of `onnxtrain bench --cpuprofile`),
- a markdown table of ATen ops by self CPU time per step, with the input
  shapes, so that products (aten::addmm, aten::mm, aten::bmm and their
  backward), softmax, layer norm, GELU, the optimizer and the copies can be
  put beside the rows of `onnxtrain bench --op-profile`.

The profiler's times are wall-clock on the calling thread (intra-op threads
included in an op's time), so they add up to the step's wall time, not its
CPU time.
"""
import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the cases' models and optimizers)


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="vit_b16-sgd", help="a large case of compare.py (default vit_b16-sgd)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    if args.case not in compare.LARGE_CASES:
        raise SystemExit("unknown case %r (have %s)" % (args.case, ", ".join(compare.LARGE_CASES)))
    model_name, opt_name, batch = compare.LARGE_CASES[args.case][:3]
    model, shape = compare.build_model(model_name)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(1)
    if model_name == "gpt":
        x = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
        y = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
        forward_loss = lambda: model(x, y)  # noqa: E731
    else:
        x = torch.randn(batch, *shape, generator=gen)
        y = torch.randint(0, 100, (batch,), generator=gen)
        forward_loss = lambda: F.cross_entropy(model(x), y)  # noqa: E731
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    wall, cpu = [], []
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), cpu_seconds()
        step()
        wall.append(time.perf_counter() - t0)
        cpu.append(cpu_seconds() - c0)
    print("%s, %d threads: wall %s s/step, process CPU %s s/step (without the profiler)"
          % (args.case, torch.get_num_threads(), ", ".join("%.3f" % w for w in wall), ", ".join("%.3f" % c for c in cpu)))

    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    rows = prof.key_averages(group_by_input_shape=True)
    rows = sorted(rows, key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows)
    print()
    print("| op | input shapes | calls/step | self ms/step | share |")
    print("| --- | --- | ---: | ---: | ---: |")
    for e in rows[:args.top]:
        shapes = str(e.input_shapes)
        if len(shapes) > 70:
            shapes = shapes[:67] + "..."
        print("| %s | %s | %.0f | %.1f | %.1f%% |" % (e.key, shapes, e.count / args.steps,
                                                    e.self_cpu_time_total / 1e3 / args.steps,
                                                    100 * e.self_cpu_time_total / max(total, 1)))
    print()
    by_op = {}
    for e in prof.key_averages():
        by_op[e.key] = by_op.get(e.key, 0) + e.self_cpu_time_total
    print("| op (all shapes) | self ms/step | share |")
    print("| --- | ---: | ---: |")
    for k, v in sorted(by_op.items(), key=lambda kv: kv[1], reverse=True)[:args.top]:
        print("| %s | %.1f | %.1f%% |" % (k, v / 1e3 / args.steps, 100 * v / max(total, 1)))


if __name__ == "__main__":
    main()
