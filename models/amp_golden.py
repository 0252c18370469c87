"""Golden values of mixed precision: one training step of the MLP fixture
under torch.autocast("cpu", dtype=torch.bfloat16), and in float32, with the
same weights and batch.

Writes models/mlp/amp_golden.npz: loss_bf16, loss_fp32 and, per parameter,
grad_bf16__NAME and grad_fp32__NAME (float32 master weights, so float32
gradients; of fc1.weight its first 4 rows). train/amp_golden_test.go reads it; CI needs no Python.

    /usr/bin/python3 models/amp_golden.py     # PyTorch 1.13, CPU
"""
import os

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model = onnx.load(os.path.join(HERE, "mlp", "mlp_train.onnx"))
    params = {i.name: torch.tensor(onnx.numpy_helper.to_array(i).copy(), requires_grad=True)
              for i in model.graph.initializer}
    case = np.load(os.path.join(HERE, "mlp", "train_case.npz"))
    x = torch.tensor(case["input"])
    labels = torch.tensor(case["labels"])

    def forward():
        # The fixture's graph: Gemm(transB=1) + Relu, twice, then Gemm.
        h = F.relu(F.linear(x, params["fc1.weight"], params["fc1.bias"]))
        h = F.relu(F.linear(h, params["fc2.weight"], params["fc2.bias"]))
        out = F.linear(h, params["fc3.weight"], params["fc3.bias"])
        return F.cross_entropy(out, labels)

    result = {}
    for tag, autocast in (("bf16", True), ("fp32", False)):
        for p in params.values():
            p.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = forward()
        loss.backward()
        result["loss_" + tag] = np.array(loss.item(), dtype=np.float32)
        for name, p in params.items():
            assert p.grad.dtype == torch.float32
            g = p.grad.numpy().copy()
            if name == "fc1.weight":
                g = g[:4]  # the first 4 rows keep the file small
            result["grad_%s__%s" % (tag, name)] = g
    np.savez(os.path.join(HERE, "mlp", "amp_golden.npz"), **result)
    print("torch", torch.__version__, "loss bf16 %.7f fp32 %.7f" % (result["loss_bf16"], result["loss_fp32"]))


if __name__ == "__main__":
    main()
