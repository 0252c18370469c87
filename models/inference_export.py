#!/usr/bin/python3
"""The BatchNorm + Dropout fixture of the inference-export test, and its goldens.

Run with the Debian PyTorch (1.13) interpreter, from anywhere:

    /usr/bin/python3 models/inference_export.py export   # bn_dropout_train.onnx, train_case.npz, probe.npz
    /usr/bin/python3 models/inference_export.py golden   # eval_golden.npz from trained.safetensors
    /usr/bin/python3 models/inference_export.py fixed    # the fixed-batch exports

`fixed` exports the same network without dynamic_axes (batch 4), as
PyTorch does by default: fixed_batch_train.onnx in training mode (nothing in
it depends on the batch size: torch.flatten exports as Flatten), and
fixed_batch_eval.onnx of a variant that flattens with
x.reshape(x.shape[0], -1), exported for inference with constant folding, so
that its Reshape holds the constant shape [4, 64] (it cannot run at another
batch size).

`export` builds the network (seed 0), exports it in training mode
(TrainingMode.TRAINING, do_constant_folding=False, dynamic batch axis) and
writes the training data (train_case.npz: 64 samples, 4 classes) and the probe
inputs of the test (probe.npz: 6 samples).

`golden` reads trained.safetensors, the weights and running statistics that
`onnxtrain train` wrote for the recipe in train/inference_export_test.go
(committed next to this script), loads them into the same PyTorch module,
switches it to model.eval() and writes its outputs for the probe inputs as
eval_golden.npz (`input`, `output`, and torch's cross_entropy `ce_loss` and
top-1 `accuracy` for the labels in eval_case.npz). The Go test trains again, checks that it
got those same weights, and compares `onnxtrain run` on the exported
model.onnx with these outputs.
"""

import json
import os
import struct
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402  (single-threaded, deterministic PyTorch; save_npz)

OUT = os.path.join(HERE, "bn_dropout")


class BNDropoutNet(nn.Module):
    """conv 3x3 -> BatchNorm2d -> ReLU -> 2x2 max pool -> Dropout(0.25) ->
    linear 64->16 -> BatchNorm1d -> ReLU -> Dropout(0.5) -> linear 16->4."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.drop1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64, 16)
        self.bn2 = nn.BatchNorm1d(16)
        self.drop2 = nn.Dropout(0.5)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv(x))), 2)
        x = self.drop1(torch.flatten(x, 1))
        x = self.drop2(torch.relu(self.bn2(self.fc1(x))))
        return self.fc2(x)


def make_model():
    torch.manual_seed(0)
    return BNDropoutNet()


def do_export():
    os.makedirs(OUT, exist_ok=True)
    model = make_model()
    gen = torch.Generator().manual_seed(1)
    # Four classes that a small net separates: class c has a bright c-th quadrant.
    n = 64
    labels = torch.arange(n) % 4
    x = 0.5 * torch.randn(n, 1, 8, 8, generator=gen)
    for i in range(n):
        c = int(labels[i])
        r, col = (c // 2) * 4, (c % 2) * 4
        x[i, 0, r:r + 4, col:col + 4] += 1.5
    probe = 0.5 * torch.randn(6, 1, 8, 8, generator=gen) + 0.75
    export.save_npz(os.path.join(OUT, "train_case.npz"), {"input": x.numpy(), "labels": labels.numpy().astype(np.int64)})
    export.save_npz(os.path.join(OUT, "probe.npz"), {"input": probe.numpy()})
    export.export(model, [x[:4]], os.path.join(OUT, "bn_dropout_train.onnx"), torch.onnx.TrainingMode.TRAINING,
                  ["input"], ["output"], {"input": {0: "batch"}, "output": {0: "batch"}})
    print("wrote", sorted(os.listdir(OUT)))


class ReshapeNet(BNDropoutNet):
    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv(x))), 2)
        x = self.drop1(x.reshape(x.shape[0], -1))
        x = self.drop2(torch.relu(self.bn2(self.fc1(x))))
        return self.fc2(x)


def do_fixed():
    x = torch.from_numpy(np.load(os.path.join(OUT, "train_case.npz"))["input"][:4])
    model = make_model()
    export.export(model, [x], os.path.join(OUT, "fixed_batch_train.onnx"), torch.onnx.TrainingMode.TRAINING,
                  ["input"], ["output"], None)
    torch.manual_seed(0)
    export.export(ReshapeNet(), [x], os.path.join(OUT, "fixed_batch_eval.onnx"), torch.onnx.TrainingMode.EVAL,
                  ["input"], ["output"], None)
    print("wrote fixed_batch_train.onnx, fixed_batch_eval.onnx")


def read_safetensors(path):
    """A minimal safetensors reader: an 8-byte little-endian header length, a
    JSON header, then the raw little-endian data."""
    with open(path, "rb") as f:
        b = f.read()
    (hlen,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + hlen])
    data = b[8 + hlen:]
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=dtypes[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def do_golden():
    model = make_model()
    weights = read_safetensors(os.path.join(OUT, "trained.safetensors"))
    state = model.state_dict()
    loaded = 0
    for name, value in weights.items():
        assert name in state, "trained.safetensors holds %r, which the module lacks" % name
        assert tuple(state[name].shape) == value.shape, (name, state[name].shape, value.shape)
        state[name] = torch.from_numpy(value)
        loaded += 1
    missing = [k for k in state if k not in weights and not k.endswith("num_batches_tracked")]
    assert not missing, "trained.safetensors lacks %s" % missing
    model.load_state_dict(state)
    model.eval()
    probe = np.load(os.path.join(OUT, "probe.npz"))["input"]
    with torch.no_grad():
        out = model(torch.from_numpy(probe)).numpy()
    # Labels for the probe (the quadrant rule of the training data, with
    # the last two deliberately wrong) and PyTorch's own metrics on them,
    # for the test of `onnxtrain eval`.
    labels = np.array([0, 1, 2, 3, 2, 0], dtype=np.int64)
    logits = torch.from_numpy(out)
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)).item()
    acc = (logits.argmax(1).numpy() == labels).mean()
    export.save_npz(os.path.join(OUT, "eval_case.npz"), {"input": probe, "labels": labels})
    export.save_npz(os.path.join(OUT, "eval_golden.npz"), {"input": probe, "output": out,
                                                            "ce_loss": np.float64(loss), "accuracy": np.float64(acc)})
    print("cross_entropy %.6f accuracy %.4f" % (loss, acc))
    print("loaded %d tensors; eval output[0] = %s" % (loaded, out[0]))


if __name__ == "__main__":
    if sys.argv[1:] == ["export"]:
        do_export()
    elif sys.argv[1:] == ["fixed"]:
        do_fixed()
    elif sys.argv[1:] == ["golden"]:
        do_golden()
    else:
        sys.exit("usage: inference_export.py export|golden|fixed")
