#!/usr/bin/python3
"""Fashion-MNIST reference run in PyTorch for onnxtrain's end-to-end check.

Trains the CNN of models/fmnist_cnn (weights loaded from its ONNX export, so
both frameworks start from the same initial weights) for 2 epochs with the
hyperparameters of the README's onnxtrain command, in the same data order
(no shuffling), and prints the test accuracy.

    /usr/bin/python3 bench/fmnist_pytorch.py [--epochs 2] [--batch-size 64] [--lr 1e-3] [--weight-decay 0.01]
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export  # noqa: E402  (the model classes)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = [int.from_bytes(b[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = export.FashionCNN()
    onnx_model = onnx.load(os.path.join(HERE, "..", "models", "fmnist_cnn", "fmnist_cnn_train.onnx"))
    state = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in onnx_model.graph.initializer}
    model.load_state_dict(state)

    def load(split):
        x = read_idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
        y = read_idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
        return torch.from_numpy(x[:, None]), torch.from_numpy(y)

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for i in range(0, len(xtr), args.batch_size):
            loss = F.cross_entropy(model(xtr[i:i + args.batch_size]), ytr[i:i + args.batch_size])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            logits = torch.cat([model(xte[i:i + 1000]) for i in range(0, len(xte), 1000)])
            acc = (logits.argmax(1) == yte).float().mean().item()
            vloss = F.cross_entropy(logits, yte).item()
        print(f"epoch {epoch} val_loss {vloss:.5f} val_accuracy {100 * acc:.2f}% ({time.perf_counter() - start:.1f} s)")
    print(f"pytorch {torch.__version__}: test accuracy after {args.epochs} epochs: {100 * acc:.2f}%")


if __name__ == "__main__":
    main()
