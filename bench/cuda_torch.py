#!/usr/bin/python3
"""The PyTorch side of bench/cuda_check.sh, and the export its models need.

    python3 bench/cuda_torch.py --export DIR
        Exports the real-size models of bench/compare.py's large cases
        (torchvision resnet50 and vit_b_16 with 100 classes at 224 px, the
        GPT decoder of models/gpt/export_gpt.py) to DIR/{resnet50,vit_b16,gpt}.onnx
        in training mode. Runs on any machine with PyTorch 1.13 and
        torchvision (no GPU needed): do it before taking DIR to the GPU.

    python3 bench/cuda_torch.py --time MODEL --batch B --precision fp32|bf16 [--steps K --warmup W]
        Times PyTorch eager's training step on cuda:0 (SGD lr 0.01, the same
        step `onnxtrain bench` times: zero_grad, forward, cross-entropy (the
        GPT's loss is its own), backward, step), float32 with TF32 off, or
        under torch.autocast(bfloat16). Prints one JSON object with
        median_step_ms. Needs a CUDA build of PyTorch.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (build_model, export_large)


def time_torch(model_name, batch, precision, steps, warmup):
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    model, shape = compare.build_model(model_name)
    model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(0)
    if model_name == "gpt":  # the model computes its loss from (tokens, targets)
        x = torch.randint(0, model.vocab, (batch, model.seq), device=dev)
        y = torch.randint(0, model.vocab, (batch, model.seq), device=dev)
    else:
        x = torch.randn((batch,) + shape, device=dev)
        y = torch.randint(0, 100, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            if model_name == "gpt":
                loss = model(x, y)
            else:
                loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"model": model_name, "precision": precision, "batch_size": batch,
            "median_step_ms": statistics.median(times) * 1000, "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", metavar="DIR")
    ap.add_argument("--time", metavar="MODEL", choices=["resnet50", "vit_b16", "gpt"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    if a.export:
        os.makedirs(a.export, exist_ok=True)
        for m in ("resnet50", "vit_b16", "gpt"):
            print(compare.export_large(m, a.export))
        return
    if a.time:
        print(json.dumps(time_torch(a.time, a.batch, a.precision, a.steps, a.warmup)))
        return
    ap.error("give --export DIR or --time MODEL")


if __name__ == "__main__":
    main()
