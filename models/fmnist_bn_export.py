#!/usr/bin/python3
"""The Fashion-MNIST CNN of docs/finetuning.md: 2 conv + pooling + BatchNorm.

    /usr/bin/python3 models/fmnist_bn_export.py

writes models/fmnist_bn/fmnist_bn_train.onnx: conv 3x3 (1->32) -> BatchNorm ->
ReLU -> 2x2 max pool -> conv 3x3 (32->64) -> BatchNorm -> ReLU -> 2x2 max pool
-> linear 3136->64 -> ReLU -> Dropout(0.25) -> linear 64->10, PyTorch's default
initialisation after torch.manual_seed(0), exported in training mode
(TrainingMode.TRAINING, do_constant_folding=False) with a dynamic batch axis.
bench/fmnist_bn_pytorch.py trains the same module from the same weights.
"""

import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402


class FashionBNCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 64)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = self.drop(torch.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def main():
    torch.manual_seed(0)
    model = FashionBNCNN()
    out = os.path.join(HERE, "fmnist_bn")
    os.makedirs(out, exist_ok=True)
    x = torch.zeros(2, 1, 28, 28)
    export.export(model, [x], os.path.join(out, "fmnist_bn_train.onnx"), torch.onnx.TrainingMode.TRAINING,
                  ["input"], ["output"], {"input": {0: "batch"}, "output": {0: "batch"}})
    print("wrote", os.path.join(out, "fmnist_bn_train.onnx"))


if __name__ == "__main__":
    main()
