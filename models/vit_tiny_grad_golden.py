#!/usr/bin/python3
"""PyTorch's gradients of vit_tiny for the pushdown-gather test.

    /usr/bin/python3 models/vit_tiny_grad_golden.py

Loads vit_tiny_train.onnx's initializers into export.py's ViTTiny (same
parameter names), runs one training-mode forward pass on the 8 samples of
vit_tiny/train_case.npz with PyTorch's mean cross-entropy, and writes
vit_tiny/grad_golden.npz: "loss" and "grad__<parameter>" for every
parameter. The model's head reads the class token only (x[:, 0]), the
pattern graph.PushDownGather rewrites; the Go test
(train/pushdown_gather_test.go) compares onnxtrain's gradients with and
without the pass to these.
"""

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


def main():
    torch.set_num_threads(1)
    model = export.ViTTiny()
    onnx_model = onnx.load(os.path.join(HERE, "vit_tiny", "vit_tiny_train.onnx"))
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx_model.graph.initializer}
    state = model.state_dict()
    for name in state:
        state[name] = inits[name]
    model.load_state_dict(state)
    model.train()
    case = np.load(os.path.join(HERE, "vit_tiny", "train_case.npz"))
    x = torch.from_numpy(case["input"])
    y = torch.from_numpy(case["labels"]).long()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    out = {"loss": np.array([loss.item()], dtype=np.float32)}
    for name, prm in model.named_parameters():
        out["grad__" + name] = prm.grad.numpy().astype(np.float32)
    export.save_npz(os.path.join(HERE, "vit_tiny", "grad_golden.npz"), out)
    print("loss", loss.item(), "parameters", len(out) - 1)


if __name__ == "__main__":
    main()
