#!/usr/bin/python3
"""The unseen-model gauntlet: 15 models this project's tests never use, built
in PyTorch 1.13 (torchvision 0.14 and torch.nn), exported to ONNX at opset 17,
run and trained by the onnxtrain binary, and compared with PyTorch.

    go build -o /tmp/onnxtrain ./cmd/onnxtrain
    /usr/bin/python3 bench/unseen.py --binary /tmp/onnxtrain [--models a,b] [--keep DIR]

For every model:

  * eval: the inference export (TrainingMode.EVAL, constant folding, dynamic
    batch axis) run with `onnxtrain run` on a batch of 2 (the size it was
    traced with) and of 3; the error is max|onnxtrain - PyTorch| divided by
    max(1, max|PyTorch|), and passes at 1e-4.
  * train: the training export (TrainingMode.TRAINING, no constant folding)
    trained with `onnxtrain train --optimizer sgd --lr 0.01 --steps 2` on one
    fixed batch of 8 with cross-entropy. Step 1's loss (before any update)
    must equal PyTorch's train-mode loss to 1e-5 (relative). Step 2's loss
    (after one SGD step, so it checks the gradients) is compared with
    PyTorch run in float64: onnxtrain must be within 4x of float32's own
    distance from float64 (or 1e-5), since BatchNorm models at small batches
    amplify float32 rounding in both. float32's distance is the largest of
    PyTorch float32 on the model's weights and on PERTURBED copies whose
    weights are each multiplied by (1 + 1e-6 N(0,1)), a few float32
    roundings: a ReLU input that lies within rounding of zero (regnet_y_400mf
    has one at 1.6e-6 of its layer's scale) flips with the rounding, so any
    float32 implementation, PyTorch's included, lands on either side; one
    unperturbed PyTorch run would make the bound a coin toss. (At 1e-7, about
    one rounding, densenet121's worst gradient stayed 4.7x outside 13 runs'
    envelope and within it at 1e-6: summing in another order moves results
    by more than one rounding.)
  * gradients: one more `onnxtrain train` step with SGD at lr 1 (no
    momentum, no weight decay) writes w1 = w0 - g, so onnxtrain's first-step
    gradient is w0 - w1. Per parameter, max|g - g64| / max|g64| must be
    within 4x of the largest such error of the PyTorch float32 runs (plain
    and perturbed) on that parameter (or of the weights' float32 spacing
    relative to the gradient, which bounds what w0 - w1 can resolve).

Dropout and stochastic depth are set to 0 so that both sides compute the
same function. The script prints one line per model and a summary, and with
--markdown FILE writes the table (with the date, the command and the machine
load) for docs/unseen-models.md. Exit status 1 if any model fails.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

OPSET = 17
PERTURBED = 4  # perturbed float32 runs per model (see the docstring)
PERTURB_SCALE = 1e-6  # their weights are multiplied by 1 + PERTURB_SCALE N(0,1)
torch.set_num_threads(1)


class TransformerClassifier(nn.Module):
    """TransformerEncoder over a (B, T, 32) sequence, mean-pooled, linear head."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


class RNNClassifier(nn.Module):
    """LSTM or GRU over a (B, T, 16) sequence; the last step's output feeds a linear head."""

    def __init__(self, kind):
        super().__init__()
        cls = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = cls(input_size=16, hidden_size=24, num_layers=1, batch_first=True)
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1, :])


class EmbeddingAttention(nn.Module):
    """Token ids -> Embedding -> MultiheadAttention -> mean -> linear head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.attn = nn.MultiheadAttention(32, 4, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, ids):
        h = self.emb(ids)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head((h + a).mean(dim=1))


class TinyUNet(nn.Module):
    """Two down steps, two up steps (ConvTranspose) with skip concatenations, then
    a 1x1 conv to 10 class maps, averaged over the image for classification."""

    def __init__(self):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

        self.d1, self.d2, self.mid = block(3, 8), block(8, 16), block(16, 32)
        self.u2, self.c2 = nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
        self.u1, self.c1 = nn.ConvTranspose2d(16, 8, 2, stride=2), block(16, 8)
        self.out = nn.Conv2d(8, 10, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        b2 = self.c2(torch.cat([self.u2(m), b], dim=1))
        a2 = self.c1(torch.cat([self.u1(b2), a], dim=1))
        return self.out(a2).mean(dim=(2, 3))


class TinyViT(nn.Module):
    """A small pre-norm ViT: 8x8 patches by a strided conv, a class token,
    learned position embeddings, GELU pre-norm encoder layers, a LayerNorm
    and a linear head on the class token."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 48, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, 48) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 65, 48) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=48, nhead=4, dim_feedforward=96, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.norm = nn.LayerNorm(48)
        self.head = nn.Linear(48, 10)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), p], dim=1) + self.pos
        return self.head(self.norm(self.enc(h))[:, 0])


class CausalTransformer(nn.Module):
    """A decoder-only language-model body: token and position embeddings,
    encoder layers under a causal (upper-triangular -inf) attention mask,
    the last position's state to a linear head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.pos = nn.Parameter(torch.randn(1, 12, 32) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.register_buffer("mask", torch.triu(torch.full((12, 12), float("-inf")), diagonal=1))
        self.head = nn.Linear(32, 10)

    def forward(self, ids):
        h = self.emb(ids) + self.pos
        return self.head(self.enc(h, mask=self.mask)[:, -1])


def image(batch):
    return [torch.randn(batch, 3, 64, 64)]


def seq(dim):
    return lambda batch: [torch.randn(batch, 12, dim)]


def tokens(batch):
    return [torch.randint(0, 50, (batch, 12), dtype=torch.int64)]


tv = torchvision.models
# name -> (constructor, inputs for a batch size)
MODELS = {
    "mobilenet_v2": (lambda: tv.mobilenet_v2(num_classes=10), image),
    "mobilenet_v3_small": (lambda: tv.mobilenet_v3_small(num_classes=10), image),
    "efficientnet_b0": (lambda: tv.efficientnet_b0(num_classes=10), image),
    "shufflenet_v2_x0_5": (lambda: tv.shufflenet_v2_x0_5(num_classes=10), image),
    "squeezenet1_1": (lambda: tv.squeezenet1_1(num_classes=10), image),
    "densenet121": (lambda: tv.densenet121(num_classes=10), image),
    "resnet50": (lambda: tv.resnet50(num_classes=10), image),
    "regnet_y_400mf": (lambda: tv.regnet_y_400mf(num_classes=10), image),
    "convnext_tiny": (lambda: tv.convnext_tiny(num_classes=10), image),
    "googlenet": (lambda: tv.googlenet(num_classes=10, aux_logits=False, init_weights=True), image),
    "transformer_encoder": (TransformerClassifier, seq(32)),
    "lstm_classifier": (lambda: RNNClassifier("lstm"), seq(16)),
    "gru_classifier": (lambda: RNNClassifier("gru"), seq(16)),
    "embedding_attention": (EmbeddingAttention, tokens),
    "unet_like": (TinyUNet, image),
    # Added in the second round (3 Dec 2026, branch fix).
    "mnasnet0_5": (lambda: tv.mnasnet0_5(num_classes=10), image),
    "regnet_x_400mf": (lambda: tv.regnet_x_400mf(num_classes=10), image),
    "mobilenet_v3_large": (lambda: tv.mobilenet_v3_large(num_classes=10), image),
    "resnext50_32x4d": (lambda: tv.resnext50_32x4d(num_classes=10), image),
    "swin_t": (lambda: tv.swin_t(num_classes=10), image),
    "tiny_vit": (TinyViT, image),
    "causal_transformer": (CausalTransformer, tokens),
}


def no_randomness(model):
    """Dropout and stochastic depth off, so both sides compute one function."""
    for m in model.modules():
        if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return model


def randomize_batchnorm(model, gen):
    """Give BatchNorm layers non-trivial statistics and affine parameters, so
    that eval outputs depend on them (a fresh BatchNorm is the identity)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def export(model, inputs, path, training):
    m = copy.deepcopy(model)
    names = ["input"] if len(inputs) == 1 else ["input%d" % i for i in range(len(inputs))]
    kwargs = dict(export_params=True, opset_version=OPSET, input_names=names, output_names=["output"],
                  dynamic_axes={n: {0: "batch"} for n in names + ["output"]})
    if training:
        m.train()
        kwargs.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    else:
        m.eval()
        kwargs.update(training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    torch.onnx.export(m, tuple(inputs), path, **kwargs)
    if training:
        # The trace ran one train-mode forward pass, which moved the running
        # statistics; write the model's starting values back.
        proto = onnx.load(path)
        state = model.state_dict()
        for init in proto.graph.initializer:
            if init.name in state and init.name.endswith(("running_mean", "running_var")):
                init.CopyFrom(numpy_helper.from_array(state[init.name].detach().numpy(), init.name))
        onnx.save(proto, path)
    return names


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return p.stdout


def read_safetensors(path):
    """The float32 tensors of a safetensors file, by name."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(meta["shape"])
    return out


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


def gauntlet(name, binary, work):
    ctor, make = MODELS[name]
    torch.manual_seed(0)
    model = no_randomness(ctor())
    randomize_batchnorm(model, torch.Generator().manual_seed(1))
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    res = {"model": name, "params": sum(p.numel() for p in model.parameters())}
    torch.manual_seed(2)

    # Eval: traced at batch 2, run at 2 and 3.
    names = export(model, make(2), os.path.join(d, "eval.onnx"), training=False)
    model.eval()
    errs = []
    for batch in (2, 3):
        xs = make(batch)
        with torch.no_grad():
            want = model(*xs).numpy()
        np.savez(os.path.join(d, "x%d.npz" % batch), **{n: x.numpy() for n, x in zip(names, xs)})
        run([binary, "run", "--model", os.path.join(d, "eval.onnx"), "--input", os.path.join(d, "x%d.npz" % batch),
             "--output", os.path.join(d, "y%d.npz" % batch)])
        got = np.load(os.path.join(d, "y%d.npz" % batch))["output"]
        errs.append(rel_err(got, want))
    res["eval_err"] = max(errs)

    # Train: two SGD steps on one batch of 8, against PyTorch in float32
    # and in float64 (the reference both float32 runs are measured from).
    names = export(model, make(2), os.path.join(d, "train.onnx"), training=True)
    xs, labels = make(8), torch.arange(8) % 10

    grads = {}  # dtype/seed -> the first step's gradients, float64 arrays

    def torch_losses(dtype, seed=None):
        ref = copy.deepcopy(model).to(dtype).train()
        if seed is not None:
            # Each weight multiplied by (1 + PERTURB_SCALE N(0,1)): a few roundings.
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in ref.parameters():
                    p.mul_(1 + PERTURB_SCALE * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(dtype))
        inputs = [x.to(dtype) if x.is_floating_point() else x for x in xs]
        opt = torch.optim.SGD(ref.parameters(), lr=0.01)
        out = []
        for step in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(ref(*inputs), labels)
            loss.backward()
            if step == 0:
                grads[(str(dtype), seed)] = {n: p.grad.detach().double().numpy().copy()
                                             for n, p in ref.named_parameters() if p.grad is not None}
            opt.step()
            out.append(loss.item())
        return out

    want, want64 = torch_losses(torch.float32), torch_losses(torch.float64)
    np.savez(os.path.join(d, "case.npz"), labels=labels.numpy(), **{n: x.numpy() for n, x in zip(names, xs)})
    out = run([binary, "train", "--model", os.path.join(d, "train.onnx"), "--data", os.path.join(d, "case.npz"),
               "--batch-size", "8", "--steps", "2", "--optimizer", "sgd", "--lr", "0.01", "--shuffle=false",
               "--log-format", "json"])
    got = [json.loads(l)["loss"] for l in out.splitlines() if l.startswith("{") and '"loss"' in l][:2]
    res["loss_torch"], res["loss_torch64"], res["loss_onnxtrain"] = want, want64, got
    res["step1_err"] = abs(got[0] - want[0]) / abs(want[0])
    # Step 2 (after one update, so it checks the gradients): distance from
    # float64, beside PyTorch's own float32 distance from float64.
    res["step2_err64"] = abs(got[1] - want64[1]) / abs(want64[1])
    res["step2_torch_err64"] = abs(want[1] - want64[1]) / abs(want64[1])
    res["step2_perturbed_err64"] = max(abs(torch_losses(torch.float32, seed)[1] - want64[1]) / abs(want64[1])
                                       for seed in range(PERTURBED))
    float32_err = max(res["step2_torch_err64"], res["step2_perturbed_err64"])

    # Per-parameter gradients: one SGD step at lr 1 without momentum or
    # weight decay makes the new weights w0 - g, so onnxtrain's gradient is
    # w0 - w1 (good to the float32 spacing of the weights). Each parameter's
    # error against float64 is max|g - g64| / max|g64|; it must be within 4x
    # of the largest error of PyTorch float32 (plain and perturbed) on that
    # parameter, or of the weights' float32 spacing relative to the gradient.
    gdir = os.path.join(d, "grad-step")
    run([binary, "train", "--model", os.path.join(d, "train.onnx"), "--data", os.path.join(d, "case.npz"),
         "--batch-size", "8", "--steps", "1", "--optimizer", "sgd", "--lr", "1", "--shuffle=false",
         "--log-format", "json", "--output", gdir, "--overwrite-output"])
    w1 = read_safetensors(os.path.join(gdir, "model.safetensors"))
    g64 = grads[(str(torch.float64), None)]
    w0 = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    worst, matched = (0.0, ""), 0
    for n, ref in g64.items():
        if n not in w1 or w1[n].shape != ref.shape:
            continue
        matched += 1
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        got = w0[n] - w1[n].astype(np.float64)
        err = float(np.max(np.abs(got - ref))) / scale
        envelope = max(float(np.max(np.abs(g[n] - ref))) / scale
                       for k, g in grads.items() if k[0] == str(torch.float32) and n in g)
        spacing = 2.0 ** -23 * float(np.max(np.abs(w0[n]))) / scale
        ratio = err / max(envelope, spacing, 1e-6)
        if ratio > worst[0]:
            worst = (ratio, n)
    res["grad_params"], res["grad_matched"] = len(g64), matched
    res["grad_worst"], res["grad_worst_param"] = worst
    res["ok"] = (res["eval_err"] <= 1e-4 and res["step1_err"] <= 1e-5
                 and res["step2_err64"] <= max(1e-5, 4 * float32_err)
                 and res["grad_worst"] <= 4 and matched > 0)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--keep", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="unseen-")
    load_before = os.getloadavg()
    started = time.time()
    rows, failed = [], 0
    for name in args.models.split(","):
        t0 = time.time()
        try:
            r = gauntlet(name, args.binary, work)
        except Exception as e:  # a model that cannot run is a failure, reported
            r = {"model": name, "ok": False, "error": str(e).strip().splitlines()[-1][:200]}
        r["seconds"] = round(time.time() - t0, 1)
        failed += not r["ok"]
        rows.append(r)
        if "error" in r:
            print("%-22s FAIL  %s" % (name, r["error"]), flush=True)
        else:
            print("%-22s %s  eval %.1e  step1 %.1e  step2 vs float64 %.1e (PyTorch float32 %.1e, perturbed %.1e)  gradients %d/%d, worst %.2f of float32's error (%s)  (%d params, %.0f s)" % (
                name, "ok  " if r["ok"] else "FAIL", r["eval_err"], r["step1_err"], r["step2_err64"], r["step2_torch_err64"],
                r["step2_perturbed_err64"], r["grad_matched"], r["grad_params"], r["grad_worst"], r["grad_worst_param"],
                r["params"], r["seconds"]), flush=True)
    print("%d of %d models pass; load average before %s, after %s; %.0f s" % (
        len(rows) - failed, len(rows), "%.2f" % load_before[0], "%.2f" % os.getloadavg()[0], time.time() - started))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| model | parameters | eval error (batch 2 and 3) | step-1 loss vs PyTorch | step-2 loss vs float64: onnxtrain | PyTorch float32 | PyTorch float32 perturbed (max of %d) | gradients compared | worst gradient error / float32's | result |\n" % PERTURBED)
            f.write("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
            for r in rows:
                if "error" in r:
                    f.write("| %s | | | | | | | | | fails: %s |\n" % (r["model"], r["error"].replace("|", "/")))
                else:
                    f.write("| %s | %d | %.1e | %.1e | %.1e | %.1e | %.1e | %d of %d | %.2f (%s) | %s |\n" % (
                        r["model"], r["params"], r["eval_err"], r["step1_err"], r["step2_err64"], r["step2_torch_err64"],
                        r["step2_perturbed_err64"], r["grad_matched"], r["grad_params"], r["grad_worst"], r["grad_worst_param"],
                        "pass" if r["ok"] else "FAIL"))
            f.write("\n%d of %d pass. Load average %.2f before, %.2f after; %.0f s in all.\n" % (
                len(rows) - failed, len(rows), load_before[0], os.getloadavg()[0], time.time() - started))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
