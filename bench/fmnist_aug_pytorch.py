#!/usr/bin/python3
"""Fashion-MNIST with augmentation in PyTorch: the peer of bench/fmnist_aug_compare.sh.

Trains models/fmnist_bn_export.py's FashionBNCNN (--model bn) or
models/fmnist_wide_export.py's FashionWideCNN (--model wide) from the weights
of models/fmnist_<model>/fmnist_<model>_train.onnx (so both frameworks start
from the same initial weights) on the 60000 training images with the recipe of the
onnxtrain command in docs/finetuning.md:

  * AdamW (--lr, --weight-decay), batch --batch-size, shuffled every epoch;
  * a cosine schedule with linear warmup (transformers'
    get_cosine_schedule_with_warmup, stepped every optimizer step);
  * cross-entropy with --label-smoothing (torch's label_smoothing);
  * augmentation of the training images as onnxtrain's --random-crop PAD
    and --random-flip do for IDX data: torchvision's RandomCrop(28,
    padding=PAD) (zero padding) followed by RandomHorizontalFlip(0.5), drawn
    per image; done here on the whole batch at once with index arithmetic
    (the same transform as the torchvision pair, without its per-image
    Python overhead);

then evaluates the 10000 test images in eval mode. Pixels are scaled to
[0, 1], as onnxtrain's IDX reader does. Runs on --threads threads.

    /usr/bin/python3 bench/fmnist_aug_pytorch.py --epochs 15 --random-crop 2 --random-flip --label-smoothing 0.1
"""
import argparse
import gzip
import math
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
from fmnist_bn_export import FashionBNCNN  # noqa: E402
from fmnist_wide_export import FashionWideCNN  # noqa: E402

MODELS = {"bn": FashionBNCNN, "wide": FashionWideCNN}

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = [int.from_bytes(b[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def augment(x, pad, flip):
    """RandomCrop(H, padding=pad) then RandomHorizontalFlip on each image of x [N,1,H,W]."""
    n, _, h, w = x.shape
    if pad > 0:
        x = F.pad(x, (pad, pad, pad, pad))
    top = torch.randint(0, 2 * pad + 1, (n,))
    left = torch.randint(0, 2 * pad + 1, (n,))
    rows = top[:, None] + torch.arange(h)[None, :]
    cols = left[:, None] + torch.arange(w)[None, :]
    if flip:
        f = torch.rand(n) < 0.5
        cols = torch.where(f[:, None], cols.flip(1), cols)
    return x[torch.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]].unsqueeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="bn")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--random-crop", type=int, default=0, help="padding of the random crop (0: none)")
    ap.add_argument("--random-flip", action="store_true")
    ap.add_argument("--eval-every-epoch", action="store_true", help="also test after every epoch (costs time)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after this many epochs of the --epochs schedule, then test (0: run them all); "
                         "for a per-epoch time when the whole run does not fit")
    ap.add_argument("--log-every", type=int, default=50,
                    help="print the step and the wall time so far every N steps (0: only per epoch)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = MODELS[args.model]()
    name = f"fmnist_{args.model}"
    proto = onnx.load(os.path.join(HERE, "..", "models", name, f"{name}_train.onnx"))
    state = model.state_dict()
    loaded = set()
    for i in proto.graph.initializer:
        if i.name in state:
            state[i.name] = torch.from_numpy(numpy_helper.to_array(i).copy())
            loaded.add(i.name)
    missing = [k for k in state if k not in loaded and not k.endswith("num_batches_tracked")]
    if missing:
        sys.exit(f"{name}_train.onnx has no initializer for {missing}")
    model.load_state_dict(state)

    def load(split):
        x = read_idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
        y = read_idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
        return torch.from_numpy(x[:, None]), torch.from_numpy(y)

    start = time.perf_counter()
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    steps_per_epoch = math.ceil(len(xtr) / args.batch_size)
    total = args.epochs * steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    def factor(step):
        if step < args.warmup_steps:
            return step / max(1, args.warmup_steps)
        progress = (step - args.warmup_steps) / max(1, total - args.warmup_steps)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)

    def test():
        model.eval()
        with torch.no_grad():
            logits = torch.cat([model(xte[i:i + 1000]) for i in range(0, len(xte), 1000)])
            acc = (logits.argmax(1) == yte).float().mean().item()
            vloss = F.cross_entropy(logits, yte).item()
        model.train()
        return acc, vloss

    step = 0
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), args.batch_size):
            idx = perm[i:i + args.batch_size]
            x = xtr[idx]
            if args.random_crop > 0 or args.random_flip:
                x = augment(x, args.random_crop, args.random_flip)
            loss = F.cross_entropy(model(x), ytr[idx], label_smoothing=args.label_smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if args.log_every and step % args.log_every == 0:
                print(f"step {step}/{total} loss {loss.item():.4f} ({time.perf_counter() - start:.1f} s)", flush=True)
        line = f"epoch {epoch} loss {loss.item():.4f} ({time.perf_counter() - start:.1f} s)"
        if args.eval_every_epoch:
            acc, vloss = test()
            line += f" test accuracy {100 * acc:.2f}% loss {vloss:.4f}"
        print(line, flush=True)
        if args.stop_after and epoch + 1 >= args.stop_after:
            break
    acc, vloss = test()
    print(f"pytorch {torch.__version__}, {args.threads} threads: test accuracy {100 * acc:.2f}%, loss {vloss:.4f}, "
          f"{epoch + 1} of {args.epochs} epochs, wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
