"""Golden values for train/optim, from PyTorch 1.13 (run with /usr/bin/python3).

Writes
  optim_golden.npz  initial params, gradients, and the params (and final
                    optimizer state) after each of 5 steps of every case
  clip_golden.npz   torch.nn.utils.clip_grad_norm_ inputs and results
  schedules.json    learning rates of the schedules, step by step

The transformers schedules are written out from transformers' formulas
(transformers is not installed here); StepLR is torch's own.
Regenerate: cd train/optim/testdata && /usr/bin/python3 make_golden.py
"""
import json
import math

import numpy as np
import torch

torch.manual_seed(1234)
STEPS = 5
SHAPES = {"w": (3, 5), "b": (37,), "s": (4,)}
NO_GRAD = {("b", 2)}  # param b has no gradient at step 2: it is skipped

init = {k: torch.randn(*v, dtype=torch.float32) for k, v in SHAPES.items()}
grads = [{k: (torch.randn(*v, dtype=torch.float32) * (0.5 + i)) for k, v in SHAPES.items()} for i in range(STEPS)]

out = {}
for k, v in init.items():
    out[f"init/{k}"] = v.numpy()
for i, g in enumerate(grads):
    for k, v in g.items():
        out[f"grad/{i}/{k}"] = v.numpy()


def linear_warmup(warmup, total):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return f


# name -> (optimizer class, groups [(param names, overrides)], kwargs, lambda or None)
ALL = ["w", "b", "s"]
CASES = {
    "sgd_plain": (torch.optim.SGD, [(ALL, {})], dict(lr=0.1), None),
    "sgd_momentum": (torch.optim.SGD, [(ALL, {})], dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), None),
    "sgd_nesterov": (torch.optim.SGD, [(ALL, {})], dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001), None),
    "sgd_groups": (torch.optim.SGD, [(["w"], {}), (["b", "s"], dict(lr=0.025, weight_decay=0.0))],
                   dict(lr=0.05, momentum=0.8, weight_decay=0.02), None),
    "adam": (torch.optim.Adam, [(ALL, {})], dict(lr=1e-2), None),
    "adam_wd": (torch.optim.Adam, [(ALL, {})], dict(lr=1e-2, weight_decay=0.05), None),
    "adam_amsgrad": (torch.optim.Adam, [(ALL, {})], dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, amsgrad=True), None),
    "adamw": (torch.optim.AdamW, [(ALL, {})], dict(lr=1e-2, weight_decay=0.1), None),
    "adamw_groups": (torch.optim.AdamW, [(["w"], {}), (["b", "s"], dict(lr=0.005, weight_decay=0.0))],
                     dict(lr=1e-2, weight_decay=0.1), None),
    "adam_sched": (torch.optim.Adam, [(ALL, {})], dict(lr=3e-2), linear_warmup(2, 5)),
}

for case, (cls, groups, kw, lam) in CASES.items():
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    pgroups = [dict(params=[params[n] for n in names], **ov) for names, ov in groups]
    opt = cls(pgroups, foreach=False, **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam) if lam else None
    for i in range(STEPS):
        for k, p in params.items():
            p.grad = None if (k, i) in NO_GRAD else grads[i][k].clone()
        opt.step()
        if sched:
            sched.step()
        for k, p in params.items():
            out[f"{case}/step{i}/{k}"] = p.detach().numpy().copy()
    for k, p in params.items():
        for slot, t in opt.state[p].items():
            if t is None:  # plain SGD keeps momentum_buffer None
                continue
            out[f"{case}/state/{k}/{slot}"] = np.asarray(t.detach().numpy(), dtype=np.float64 if slot == "step" else np.float32)

np.savez("optim_golden.npz", **out)

# clip_grad_norm_
clip = {}
for ci, max_norm in enumerate([1.0, 100.0]):
    gs = {k: torch.randn(*v, dtype=torch.float32) * 3 for k, v in SHAPES.items()}
    params = [torch.zeros(*SHAPES[k], requires_grad=True) for k in SHAPES]
    for p, k in zip(params, SHAPES):
        p.grad = gs[k].clone()
        clip[f"{ci}/in/{k}"] = gs[k].numpy()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    clip[f"{ci}/max_norm"] = np.array(max_norm, dtype=np.float64)
    clip[f"{ci}/total"] = np.array(total.item(), dtype=np.float64)
    for p, k in zip(params, SHAPES):
        clip[f"{ci}/out/{k}"] = p.grad.numpy()
np.savez("clip_golden.npz", **clip)


# schedules
def transformers_lambda(kind, warmup, total, cycles=0.5):
    if kind == "linear":
        return linear_warmup(warmup, total)
    if kind == "cosine":
        def f(step):
            if step < warmup:
                return float(step) / float(max(1, warmup))
            progress = float(step - warmup) / float(max(1, total - warmup))
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))
        return f
    if kind == "constant_warmup":
        def f(step):
            if step < warmup:
                return float(step) / float(max(1.0, warmup))
            return 1.0
        return f
    raise ValueError(kind)


def run_lambda(base, lam, n):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


sch = []
N = 40
for kind, base, warmup, total, cycles in [
    ("linear", 3e-4, 5, 30, 0.5), ("linear", 0.1, 0, 20, 0.5),
    ("cosine", 1e-3, 7, 33, 0.5), ("cosine", 0.5, 3, 25, 1.5),
    ("constant_warmup", 2e-5, 6, 0, 0.5),
]:
    sch.append(dict(kind=kind, base=base, warmup=warmup, total=total, cycles=cycles,
                    lrs=run_lambda(base, transformers_lambda(kind, warmup, total, cycles), N)))
for base, step_size, gamma in [(0.1, 3, 0.1), (0.7, 4, 0.9)]:
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size, gamma)
    lrs = []
    for _ in range(N):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    sch.append(dict(kind="step", base=base, step_size=step_size, gamma=gamma, lrs=lrs))
with open("schedules.json", "w") as f:
    json.dump(sch, f, indent=1)
    f.write("\n")
