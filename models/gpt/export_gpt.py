#!/usr/bin/python3
"""Export a GPT-style decoder, loss included, from PyTorch to ONNX for training.

Run with the Debian PyTorch (1.13) interpreter:

    /usr/bin/python3 models/gpt/export_gpt.py --out /tmp/gpt.onnx        # GPT-2-small shape
    /usr/bin/python3 models/gpt/export_gpt.py --layers 24 --width 1280 --heads 20 --out /tmp/gpt-big.onnx
    /usr/bin/python3 models/gpt/export_gpt.py --small --golden           # the committed instance

The model: token embedding + learned position embedding, `--layers` blocks of
nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True,
dropout=0) with a causal mask, a final LayerNorm, a bias-free linear head to the
vocabulary (its own weight, or the token embedding's with --tied), and
F.cross_entropy over every position inside the graph.

Graph inputs: tokens int64 [batch, T] and targets int64 [batch, T] (the next
token of each position); output: "loss" (a float32 scalar). The batch axis is
dynamic. Exported with opset 17, training=TrainingMode.TRAINING and
do_constant_folding=False, so the initializer names are the state_dict keys
(`tok.weight`, `pos`, `blocks.0.self_attn.in_proj_weight`, ..., `head.weight`).

The defaults are the GPT-2-small shape (12 layers, width 768, 12 heads,
vocabulary 50257, T=128, untied head: 162M parameters, about 650 MB). A model
whose initializers pass 2 GB (protobuf's limit) is always saved with its
weights in one external data file beside it (`<out>.data`);
`--external-data always` forces that for any size, `never` refuses it.

`--small` selects the committed test instance (2 layers, width 64, 4 heads,
vocabulary 256, T=16, untied) written to models/gpt/gpt_small_train.onnx, and
`--golden` also writes, next to it, train_case.npz (a fixed batch of 8) and
train_golden.json (PyTorch's per-step losses for SGD with momentum and AdamW,
in the format of models/train_golden.py, read by train/golden_test.go),
plus tokens.bin (a uint16 token file) and tokens_golden.json (PyTorch's
AdamW losses training from that file, read by train/tokens_test.go).
Everything is deterministic (seed 0 for the weights, seed 2 for the batch,
single thread), so a rerun reproduces the committed files.
"""

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import warnings
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17
HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_LIMIT = 2 * 1024 ** 3  # protobuf's 2 GB message limit

warnings.filterwarnings("ignore", category=UserWarning)


class GPT(nn.Module):
    """A GPT-style decoder that returns its own mean next-token loss."""

    def __init__(self, layers=12, width=768, heads=12, vocab=50257, seq=128, tied=False):
        super().__init__()
        if width % heads:
            raise ValueError("width %d is not a multiple of heads %d" % (width, heads))
        self.vocab, self.seq = vocab, seq
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(1, seq, width))
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(layers)
        ])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        # GPT-2's initialisation for the embeddings and the head; the blocks
        # keep PyTorch's own.
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)
        if tied:
            self.head.weight = self.tok.weight
        else:
            nn.init.normal_(self.head.weight, std=0.02)
        # Additive causal mask: position i attends to positions <= i. A
        # buffer that is not in the state_dict, so it is no initializer (a
        # float initializer would be taken for a trainable parameter) but a
        # constant of the graph.
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, tokens, targets):
        h = self.tok(tokens) + self.pos
        for block in self.blocks:
            h = block(h, src_mask=self.causal_mask)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def export(model, path, batch, external):
    """Export model in training mode to path. external: "auto", "always" or
    "never"."""
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
    targets = torch.randint(0, model.vocab, (batch, model.seq), generator=gen)
    nbytes = 4 * count_params(model)
    big = nbytes >= PROTO_LIMIT - (64 << 20)
    if big and external == "never":
        sys.exit("export_gpt.py: %d parameter bytes do not fit one protobuf (2 GB); "
                 "use --external-data auto" % nbytes)
    use_external = external == "always" or big
    out_dir = os.path.dirname(os.path.abspath(path))
    os.makedirs(out_dir, exist_ok=True)
    # torch.onnx.export itself writes one file per tensor when the model
    # passes 2 GB; export into a scratch folder, then save one model file
    # and (if external) one data file.
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp_path = os.path.join(tmp, "model.onnx")
        model.train()
        torch.onnx.export(
            model, (tokens, targets), tmp_path,
            export_params=True, opset_version=OPSET,
            input_names=["tokens", "targets"], output_names=["loss"],
            dynamic_axes={"tokens": {0: "batch"}, "targets": {0: "batch"}},
            training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        proto = onnx.load(tmp_path)  # loads external data too
        data_name = os.path.basename(path) + ".data"
        if os.path.exists(path + ".data"):
            os.remove(path + ".data")
        if use_external:
            onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                      location=data_name, size_threshold=1024)
        else:
            onnx.save(proto, path)
    if use_external:
        onnx.checker.check_model(path, full_check=True)
    else:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    got_in = [i.name for i in proto.graph.input]
    assert got_in == ["tokens", "targets"], got_in
    return use_external


def save_npz(path, arrays):
    """np.savez with fixed zip timestamps, so the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.array(arrays[name], order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


# Golden traces: as models/train_golden.py (see models/TRAINING.md).
BATCH = 8
DATA_SEED = 2
SGD = dict(lr=0.05, momentum=0.9)
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
CONFIGS = [
    # key, optimizer, steps, grad_accum, clip
    ("sgd_momentum", "sgd", 6, 1, 0.0),
    ("adamw", "adamw", 6, 1, 0.0),
]


def load_from_onnx(model, path):
    """Copy the ONNX file's initializers into model by name; fail if a
    parameter has none."""
    proto = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    state = model.state_dict()
    missing = [k for k, _ in model.named_parameters() if k not in inits]
    if missing:
        raise SystemExit("%s: parameters with no initializer: %s" % (path, missing))
    with torch.no_grad():
        for k, t in state.items():
            if k in inits:
                assert tuple(inits[k].shape) == tuple(t.shape), (k, inits[k].shape, t.shape)
                t.copy_(torch.from_numpy(inits[k].copy()))
    return len(inits)


def golden(args, path):
    gen = torch.Generator().manual_seed(DATA_SEED)
    # A next-token batch: targets are the tokens shifted by one, from one
    # stream of T+1 tokens per row.
    stream = torch.randint(0, args.vocab, (BATCH, args.seq + 1), generator=gen)
    case = {"tokens": stream[:, :-1].contiguous(), "targets": stream[:, 1:].contiguous()}
    out_dir = os.path.dirname(path)
    save_npz(os.path.join(out_dir, "train_case.npz"), {k: v.numpy() for k, v in case.items()})
    configs = {}
    for key, optimizer, steps, accum, clip in CONFIGS:
        torch.manual_seed(0)
        model = GPT(args.layers, args.width, args.heads, args.vocab, args.seq, args.tied)
        load_from_onnx(model, path)
        model.train()
        params = list(model.parameters())
        if optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=SGD["lr"], momentum=SGD["momentum"])
        else:
            opt = torch.optim.AdamW(params, lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                                    weight_decay=ADAMW["weight_decay"], foreach=False)
        micro = BATCH // accum
        losses = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            step_losses = []
            for m in range(accum):
                lo, hi = m * micro, (m + 1) * micro
                loss = model(case["tokens"][lo:hi], case["targets"][lo:hi])
                step_losses.append(loss.item())
                (loss / accum).backward()
            losses.append(float(np.mean(np.array(step_losses, dtype=np.float32), dtype=np.float32)))
            opt.step()
        with torch.no_grad():
            final_norm = float(sum(p.detach().double().norm(2).item() for p in model.parameters()))
        c = {"optimizer": optimizer}
        if optimizer == "sgd":
            c.update(lr=SGD["lr"], momentum=SGD["momentum"], weight_decay=0)
        else:
            c.update(lr=ADAMW["lr"], betas=list(ADAMW["betas"]), eps=ADAMW["eps"],
                     weight_decay=ADAMW["weight_decay"])
        c.update(grad_accum=accum, micro_batch_size=micro, steps=steps, clip_grad_norm=clip,
                 loss="output:loss", losses=losses, final_param_norm=final_norm)
        configs[key] = c
    doc = {
        "model": os.path.basename(path),
        "data": "train_case.npz",
        "batch_size": BATCH,
        "inputs": ["tokens", "targets"],
        "labels": "targets",
        "torch_version": torch.__version__.split("+")[0],
        "shape": dict(layers=args.layers, width=args.width, heads=args.heads, vocab=args.vocab,
                      seq=args.seq, tied=args.tied),
        "configs": configs,
    }
    with open(os.path.join(out_dir, "train_golden.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("golden: " + " ".join("%s=%.6f" % (k, configs[k]["losses"][0]) for k, *_ in CONFIGS))


TOKEN_WINDOWS = 8   # whole windows in tokens.bin
TOKEN_EXTRA = 5     # tokens after the last window's target, never used
TOKEN_BATCH = 4
TOKEN_STEPS = 4


def token_golden(args, path):
    """tokens.bin (uint16, as nanoGPT's prepare scripts write token files) and
    tokens_golden.json: AdamW losses of training from it, batch 4, no
    shuffling, windows cut as nanoGPT's get_batch cuts them (x = data[i:i+T],
    y = data[i+1:i+1+T]) at offsets i = 0, T, 2T, ... in order."""
    out_dir = os.path.dirname(path)
    T = args.seq
    rng = np.random.default_rng(3)
    ids = rng.integers(0, args.vocab, size=TOKEN_WINDOWS * T + 1 + TOKEN_EXTRA).astype(np.uint16)
    bin_path = os.path.join(out_dir, "tokens.bin")
    ids.tofile(bin_path)
    data = np.memmap(bin_path, dtype=np.uint16, mode="r")
    windows = (len(data) - 1) // T
    torch.manual_seed(0)
    model = GPT(args.layers, args.width, args.heads, args.vocab, args.seq, args.tied)
    load_from_onnx(model, path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"], foreach=False)
    losses = []
    for step in range(TOKEN_STEPS):
        first = (step * TOKEN_BATCH) % windows
        ix = [T * w for w in range(first, first + TOKEN_BATCH)]
        x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    doc = {
        "model": os.path.basename(path),
        "data": "tokens.bin",
        "token_dtype": "uint16",
        "tokens": int(len(data)),
        "windows": int(windows),
        "batch_size": TOKEN_BATCH,
        "optimizer": "adamw",
        "lr": ADAMW["lr"], "betas": list(ADAMW["betas"]), "eps": ADAMW["eps"],
        "weight_decay": ADAMW["weight_decay"],
        "steps": TOKEN_STEPS,
        "losses": losses,
    }
    with open(os.path.join(out_dir, "tokens_golden.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("token golden: %d tokens, %d windows, first loss %.6f" % (len(data), windows, losses[0]))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128, help="sequence length T")
    p.add_argument("--tied", action="store_true", help="share the token embedding with the head")
    p.add_argument("--batch", type=int, default=2, help="batch of the example used for tracing (the axis is dynamic)")
    p.add_argument("--external-data", choices=("auto", "always", "never"), default="auto",
                   help="weights in <out>.data: when above 2 GB (auto), always, or never")
    p.add_argument("--out", default=None, help="output .onnx path (default gpt_train.onnx here)")
    p.add_argument("--small", action="store_true",
                   help="the committed test instance: 2 layers, width 64, 4 heads, vocab 256, T=16")
    p.add_argument("--golden", action="store_true",
                   help="also write train_case.npz and train_golden.json (PyTorch losses) beside --out")
    args = p.parse_args(argv)
    # the goldens: one thread, deterministic kernels (set here, not at
    # import, so that a script importing GPT keeps its own thread count)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.small:
        args.layers, args.width, args.heads, args.vocab, args.seq = 2, 64, 4, 256, 16
        if args.out is None:
            args.out = os.path.join(HERE, "gpt_small_train.onnx")
    if args.out is None:
        args.out = os.path.join(HERE, "gpt_train.onnx")
    torch.manual_seed(0)
    model = GPT(args.layers, args.width, args.heads, args.vocab, args.seq, args.tied)
    n = count_params(model)
    ext = export(model, args.out, args.batch, args.external_data)
    print("%s: %d layers, width %d, %d heads, vocab %d, T=%d, %s head: %d parameters (%.1f MB)%s" % (
        args.out, args.layers, args.width, args.heads, args.vocab, args.seq,
        "tied" if args.tied else "untied", n, n * 4 / 1e6, ", external data" if ext else ""))
    if args.golden:
        del model
        golden(args, args.out)
        token_golden(args, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
