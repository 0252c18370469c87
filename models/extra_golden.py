#!/usr/bin/python3
"""More PyTorch references for onnxtrain's training tests (see TRAINING.md).

    /usr/bin/python3 models/extra_golden.py

Writes
  mlp/loss_golden.json and mlp/loss_<name>.npz: the MLP trained 3 SGD steps
    (lr 0.05, momentum 0.9) on a fixed batch with each loss onnxtrain offers
    besides plain cross entropy: cross entropy with label smoothing 0.1 and an
    ignored label, mse, l1, bce_with_logits; per-step losses.
  cifar_resnet/bn_running_golden.npz: the BatchNorm running statistics after
    two training-mode forward passes over train_case.npz (no update), named
    like the ONNX initializers.
"""
import json
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def load_onnx_weights(model, path):
    m = onnx.load(path)
    state = model.state_dict()
    for init in m.graph.initializer:
        if init.name in state:
            state[init.name] = torch.from_numpy(numpy_helper.to_array(init).copy())
    model.load_state_dict(state)


def losses():
    gen = np.random.default_rng(5)
    x = gen.standard_normal((8, 784)).astype(np.float32)
    labels = gen.integers(0, 10, size=8).astype(np.int64)
    ignored = labels.copy()
    ignored[1] = -100
    target = gen.standard_normal((8, 10)).astype(np.float32)
    binary = (gen.random((8, 10)) < 0.5).astype(np.float32)
    cases = {
        "cross_entropy_smooth": ("cross_entropy", ignored, lambda y, t: F.cross_entropy(y, t, label_smoothing=0.1, ignore_index=-100), {"label_smoothing": 0.1}),
        "mse": ("mse", target, F.mse_loss, {}),
        "l1": ("l1", target, F.l1_loss, {}),
        "bce_with_logits": ("bce_with_logits", binary, F.binary_cross_entropy_with_logits, {}),
    }
    out = {}
    for name, (kind, lab, fn, extra) in cases.items():
        model = export.MLP()
        load_onnx_weights(model, os.path.join(HERE, "mlp", "mlp_train.onnx"))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        seq = []
        for _ in range(3):
            loss = fn(model(torch.from_numpy(x)), torch.from_numpy(lab))
            seq.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        data = "loss_%s.npz" % name
        export.save_npz(os.path.join(HERE, "mlp", data), {"input": x, "labels": lab})
        out[name] = dict(loss=kind, data=data, losses=seq, **extra)
    with open(os.path.join(HERE, "mlp", "loss_golden.json"), "w") as f:
        json.dump(out, f, indent=2)


def bn_running():
    model = export.CifarResNet()
    path = os.path.join(HERE, "cifar_resnet", "cifar_resnet_train.onnx")
    load_onnx_weights(model, path)
    x = np.load(os.path.join(HERE, "cifar_resnet", "train_case.npz"))["input"]
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.from_numpy(x))
    names = {i.name for i in onnx.load(path).graph.initializer}
    arrays = {k: v.numpy() for k, v in model.state_dict().items()
              if (k.endswith("running_mean") or k.endswith("running_var")) and k in names}
    export.save_npz(os.path.join(HERE, "cifar_resnet", "bn_running_golden.npz"), arrays)


if __name__ == "__main__":
    losses()
    bn_running()
