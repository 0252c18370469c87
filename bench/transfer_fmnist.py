#!/usr/bin/python3
"""Transfer learning on Fashion-MNIST, the PyTorch half (docs/finetuning.md).

    /usr/bin/python3 bench/transfer_fmnist.py [--out /tmp/transfer] [--pre-images 10000] [--pre-epochs 4]

1. Data: Fashion-MNIST images as 3-channel 32x32 pictures (the 28x28 image
   padded by 2 black pixels on each side, repeated over 3 channels, pixels
   in [0, 1]). Classes 0-4 (T-shirt, Trouser, Pullover, Dress, Coat) are the
   pretraining task; classes 5-9 (Sandal, Shirt, Sneaker, Bag, Ankle boot),
   relabelled 0-4, the new task:
     pre_train.npz   --pre-images training images of classes 0-4
     ft_train.npz    --ft-per-class training images of each of classes 5-9
     ft_test.npz     every test image of classes 5-9 (5000)
2. Pretraining: models/export.py's CifarResNet (ResNet-8, widths 8/16/32,
   BatchNorm) with 5 outputs, trained here with AdamW (lr 3e-3, cosine, batch
   128, --threads threads); its test accuracy on classes 0-4 is printed.
3. Exports: pretrained_eval.onnx, the pretrained network exported for
   inference (TrainingMode.EVAL, constant folding: BatchNorm folded into the
   convolutions, PyTorch's default), and scratch_train.onnx, the same
   network freshly initialised (seed 1), exported for training.
The fine-tuning and from-scratch runs are onnxtrain commands
(bench/transfer_fmnist.sh).
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export  # noqa: E402  (CifarResNet, export(), save_npz)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = [int.from_bytes(b[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def as_rgb32(x):
    """[N, 28, 28] uint8 -> [N, 3, 32, 32] float32 in [0, 1]."""
    x = np.pad(x.astype(np.float32) / 255.0, ((0, 0), (2, 2), (2, 2)))
    return np.ascontiguousarray(np.repeat(x[:, None], 3, axis=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/transfer")
    ap.add_argument("--pre-images", type=int, default=10000)
    ap.add_argument("--pre-epochs", type=int, default=4)
    ap.add_argument("--ft-per-class", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    xtr = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    ytr = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xte = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"))
    yte = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)

    old = np.flatnonzero(ytr < 5)[:args.pre_images]
    new = np.concatenate([np.flatnonzero(ytr == c)[:args.ft_per_class] for c in range(5, 10)])
    new = new[np.random.default_rng(0).permutation(len(new))]
    test_new = np.flatnonzero(yte >= 5)
    test_old = np.flatnonzero(yte < 5)
    export.save_npz(os.path.join(args.out, "ft_train.npz"), {"input": as_rgb32(xtr[new]), "labels": ytr[new] - 5})
    export.save_npz(os.path.join(args.out, "ft_test.npz"), {"input": as_rgb32(xte[test_new]), "labels": yte[test_new] - 5})

    torch.manual_seed(0)
    model = export.CifarResNet(num_classes=5)
    x = torch.from_numpy(as_rgb32(xtr[old]))
    y = torch.from_numpy(ytr[old])
    steps = args.pre_epochs * math.ceil(len(x) / 128)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    start = time.perf_counter()
    for epoch in range(args.pre_epochs):
        model.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            idx = perm[i:i + 128]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print(f"pretraining epoch {epoch}: loss {loss.item():.4f} ({time.perf_counter() - start:.1f} s)", flush=True)
    model.eval()
    with torch.no_grad():
        xt = torch.from_numpy(as_rgb32(xte[test_old]))
        acc = (torch.cat([model(xt[i:i + 1000]) for i in range(0, len(xt), 1000)]).argmax(1).numpy() == yte[test_old]).mean()
    print(f"pretrained on {len(x)} images of classes 0-4, {args.pre_epochs} epochs, {time.perf_counter() - start:.1f} s: "
          f"test accuracy on classes 0-4 {100 * acc:.2f}%")

    ex = torch.zeros(2, 3, 32, 32)
    dyn = {"input": {0: "batch"}, "output": {0: "batch"}}
    export.export(model, [ex], os.path.join(args.out, "pretrained_eval.onnx"), torch.onnx.TrainingMode.EVAL,
                  ["input"], ["output"], dyn)
    torch.manual_seed(1)
    fresh = export.CifarResNet(num_classes=5)
    export.export(fresh, [ex], os.path.join(args.out, "scratch_train.onnx"), torch.onnx.TrainingMode.TRAINING,
                  ["input"], ["output"], dyn)
    print("wrote", sorted(os.listdir(args.out)))


if __name__ == "__main__":
    main()
