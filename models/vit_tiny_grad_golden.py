#!/usr/bin/python3
"""PyTorch's gradients of vit_tiny and vit_tv for the pushdown-gather test.

    /usr/bin/python3 models/vit_tiny_grad_golden.py [vit_tiny] [vit_tv]

For each model, loads <name>_train.onnx's initializers into export.py's
model (same parameter names: ViTTiny, or torchvision's VisionTransformer
for vit_tv), runs one training-mode forward pass on the 8 samples of
<name>/train_case.npz with PyTorch's mean cross-entropy, and writes
<name>/grad_golden.npz: "loss" and "grad__<parameter>" for every
parameter. Both heads read the class token only (x[:, 0]), the pattern
graph.PushDownGather rewrites; the Go test (train/pushdown_gather_test.go)
compares onnxtrain's gradients with and without the pass to these.
vit_tv's train_case.npz (8 images of N(0, 1), labels 0-9) is written
here when missing.
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


CTORS = {"vit_tiny": export.ViTTiny, "vit_tv": export.vit_torchvision}


def golden(which):
    torch.set_num_threads(1)
    model = CTORS[which]()
    onnx_model = onnx.load(os.path.join(HERE, which, which + "_train.onnx"))
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx_model.graph.initializer}
    state = model.state_dict()
    for name in state:
        state[name] = inits[name]
    model.load_state_dict(state)
    model.train()
    case_path = os.path.join(HERE, which, "train_case.npz")
    if not os.path.exists(case_path):
        gen = torch.Generator().manual_seed(5)
        export.save_npz(case_path, {"input": torch.randn(8, 3, 32, 32, generator=gen).numpy(),
                                    "labels": torch.arange(8, dtype=torch.int64).numpy()})
    case = np.load(case_path)
    x = torch.from_numpy(case["input"])
    y = torch.from_numpy(case["labels"]).long()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    out = {"loss": np.array([loss.item()], dtype=np.float32)}
    for name, prm in model.named_parameters():
        out["grad__" + name] = prm.grad.numpy().astype(np.float32)
    export.save_npz(os.path.join(HERE, which, "grad_golden.npz"), out)
    print(which, "loss", loss.item(), "parameters", len(out) - 1)


if __name__ == "__main__":
    for n in sys.argv[1:] or ["vit_tiny"]:
        golden(n)
