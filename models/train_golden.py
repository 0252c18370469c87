#!/usr/bin/python3
"""PyTorch reference training traces for the golden tests of `onnxtrain train`.

Run from anywhere with the Debian PyTorch (1.13) interpreter, after export.py
has written the *_train.onnx files:

    /usr/bin/python3 models/train_golden.py                  # every model
    /usr/bin/python3 models/train_golden.py mlp fmnist_cnn   # only these

For every model <name> it writes, next to this script:

    <name>/train_case.npz     the fixed training batch (batch size 8)
    <name>/train_golden.json  per optimizer configuration, the loss of every
                              step (forward pass before that step's update),
                              clipping norms, and the final parameter norm

The model is rebuilt with export.py's own classes and helpers (same seed, same
BatchNorm randomisation), checked against the initializers of
<name>_train.onnx, and then given exactly those initializer values by name, so
the traces start from the weights the ONNX file holds. See TRAINING.md.
"""

import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402  (sets single-threaded, deterministic PyTorch)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

BATCH = 8
NUM_CLASSES = 10
DATA_SEED = 2  # export.py's goldens use seed 1; the training batch uses its own
SGD = dict(lr=0.05, momentum=0.9)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)


def make_case(name, gen):
    """The fixed training batch of a model: a dict name -> tensor, names as in
    the ONNX graph inputs, plus "labels" (the loss target)."""
    if name == "transformer_loss":
        # As in export.py (token ids and per-token labels in [0,16)), batch 8.
        return {"x": torch.randint(0, 16, (BATCH, 8), generator=gen),
                "labels": torch.randint(0, 16, (BATCH, 8), generator=gen)}
    shapes = {
        "mlp": (784,),
        "cifar_resnet": (3, 32, 32),
        "resnet18_small": (3, 64, 64),
        "vit_tiny": (3, 32, 32),
        "fmnist_cnn": (1, 28, 28),
        "convtranspose_resize": (3, 8, 8),
        "rnn_seq": (6, 5),
        "stn": (1, 12, 12),
    }
    x = torch.randn(BATCH, *shapes[name], generator=gen)
    if name == "convtranspose_resize":
        # MSE regression target with the output's shape [8,2,48,48].
        y = torch.randn(BATCH, 2, 48, 48, generator=gen)
    else:
        y = torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen)
    return {"input": x, "labels": y}


def loss_name(name):
    return {"transformer_loss": "output:loss", "convtranspose_resize": "mse"}.get(name, "cross_entropy")


def build_model(name):
    """Rebuild the model as export.build does, then load the *_train.onnx
    initializers into it by name. Returns (model, report)."""
    spec = export.MODELS[name]
    torch.manual_seed(0)
    model = spec["ctor"]()
    gen = torch.Generator().manual_seed(1)
    if spec.get("batchnorm", False):
        export.randomize_batchnorm(model, gen)

    path = os.path.join(HERE, name, name + "_train.onnx")
    proto = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    state = model.state_dict()
    # BatchNorm's num_batches_tracked is not exported (it is unused when
    # momentum is set); every other state_dict entry must be an initializer.
    missing = [k for k in state if k not in inits and not k.endswith("num_batches_tracked")]
    unused = [k for k in inits if k not in state]
    if missing:
        raise SystemExit("%s: state_dict keys not among the ONNX initializers: %s" % (path, missing))
    differ = [k for k in state if k in inits and not np.array_equal(state[k].numpy(), inits[k])]
    with torch.no_grad():
        for k, t in state.items():
            if k in inits:
                a = inits[k]
                if tuple(a.shape) != tuple(t.shape):
                    raise SystemExit("%s: %s has shape %s in ONNX, %s in PyTorch" % (path, k, a.shape, tuple(t.shape)))
                t.copy_(torch.from_numpy(a.copy()).to(t.dtype))
    report = "%d/%d state_dict entries loaded from ONNX initializers by name" % (
        sum(1 for k in state if k in inits), len(state))
    if differ:
        report += "; rebuilt model differed from ONNX in %s" % differ
    else:
        report += "; rebuilt model equals ONNX bit for bit"
    if unused:
        report += "; ONNX initializers not in state_dict: %s" % unused
    return model, report


def forward_loss(name, model, case, lo, hi):
    """Loss of the samples [lo, hi) of the batch, in train mode."""
    if name == "transformer_loss":
        return model(case["x"][lo:hi], case["labels"][lo:hi])
    out = model(case["input"][lo:hi])
    if name == "convtranspose_resize":
        return nn.MSELoss()(out, case["labels"][lo:hi])
    return nn.CrossEntropyLoss()(out, case["labels"][lo:hi])


def run_config(name, case, optimizer, steps, grad_accum, clip):
    model, _ = build_model(name)
    model.train()
    params = list(model.parameters())
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=SGD["lr"], momentum=SGD["momentum"])
    else:
        opt = torch.optim.AdamW(params, lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                                weight_decay=ADAMW["weight_decay"], foreach=False)
    micro = BATCH // grad_accum
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        step_losses = []
        for m in range(grad_accum):
            loss = forward_loss(name, model, case, m * micro, (m + 1) * micro)
            step_losses.append(loss.item())
            (loss / grad_accum).backward()
        # float32 mean of the micro-batch losses, as onnxtrain would compute it.
        losses.append(float(np.mean(np.array(step_losses, dtype=np.float32), dtype=np.float32)))
        if clip > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip).item()))
        opt.step()
    with torch.no_grad():
        final_norm = float(sum(p.detach().double().norm(2).item() for p in model.parameters()))
    return losses, norms, final_norm


CONFIGS = [
    # key, optimizer, steps, grad_accum, clip
    ("sgd_momentum", "sgd", 6, 1, 0.0),
    ("adamw", "adamw", 6, 1, 0.0),
    ("sgd_accum", "sgd", 4, 2, 0.0),
    ("adamw_clip", "adamw", 6, 1, 1.0),
]


def trace(name):
    gen = torch.Generator().manual_seed(DATA_SEED)
    case = make_case(name, gen)
    out_dir = os.path.join(HERE, name)
    export.save_npz(os.path.join(out_dir, "train_case.npz"), {k: v.numpy() for k, v in case.items()})

    _, report = build_model(name)
    proto = onnx.load(os.path.join(out_dir, name + "_train.onnx"))
    graph_inputs = [i.name for i in proto.graph.input]
    assert all(n in case for n in graph_inputs), (name, graph_inputs)
    configs = {}
    for key, optimizer, steps, accum, clip in CONFIGS:
        losses, norms, final_norm = run_config(name, case, optimizer, steps, accum, clip)
        c = {"optimizer": optimizer}
        if optimizer == "sgd":
            c.update(lr=SGD["lr"], momentum=SGD["momentum"], weight_decay=0)
        else:
            c.update(lr=ADAMW["lr"], betas=list(ADAMW["betas"]), eps=ADAMW["eps"],
                     weight_decay=ADAMW["weight_decay"])
        c.update(grad_accum=accum, micro_batch_size=BATCH // accum, steps=steps, clip_grad_norm=clip,
                 loss=loss_name(name), losses=losses)
        if clip > 0:
            c["grad_norms"] = norms
        c["final_param_norm"] = final_norm
        configs[key] = c

    doc = {
        "model": name + "_train.onnx",
        "data": "train_case.npz",
        "batch_size": BATCH,
        "inputs": graph_inputs,
        "labels": "labels",
        "torch_version": torch.__version__.split("+")[0],
        "configs": configs,
    }
    with open(os.path.join(out_dir, "train_golden.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")

    sizes = ", ".join("%s %d B" % (f, os.path.getsize(os.path.join(out_dir, f)))
                      for f in ("train_case.npz", "train_golden.json"))
    first = " ".join("%s=%.6f" % (k, configs[k]["losses"][0]) for k, *_ in CONFIGS)
    print("%-22s %s\n%-22s %s\n%-22s first losses: %s" % (name, report, "", sizes, "", first))


def main(argv):
    names = argv or list(export.MODELS)
    for n in names:
        if n not in export.MODELS:
            sys.exit("train_golden.py: unknown model %r (have %s)" % (n, ", ".join(export.MODELS)))
    for n in names:
        trace(n)


if __name__ == "__main__":
    main(sys.argv[1:])
