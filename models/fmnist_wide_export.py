#!/usr/bin/python3
"""The Fashion-MNIST CNN that reaches 93.4% in docs/finetuning.md (flips, label smoothing 0.1).

    /usr/bin/python3 models/fmnist_wide_export.py

writes models/fmnist_wide/fmnist_wide_train.onnx: three blocks of conv 3x3
(padding 1) -> BatchNorm -> ReLU -> 2x2 max pool (1->32 at 28x28, 32->64 at
14x14, 64->128 at 7x7, pooled to 3x3), then linear 1152->256 -> ReLU ->
Dropout(0.5) -> linear 256->10 (390k parameters). PyTorch's default
initialisation after torch.manual_seed(0), exported in training mode
(TrainingMode.TRAINING, do_constant_folding=False) with a dynamic batch axis.
models/fmnist_bn (2 conv blocks, a 64-wide hidden layer, Dropout 0.25) stopped
at 92.96% with flips; this one adds a third block and a wider, more strongly
regularised classifier. bench/fmnist_aug_pytorch.py --model wide trains the
same module from the same weights.
"""

import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402


class FashionWideCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.bn3 = nn.BatchNorm2d(128)
        self.fc1 = nn.Linear(128 * 3 * 3, 256)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn3(self.conv3(x))), 2)
        x = self.drop(torch.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def main():
    torch.manual_seed(0)
    model = FashionWideCNN()
    out = os.path.join(HERE, "fmnist_wide")
    os.makedirs(out, exist_ok=True)
    x = torch.zeros(2, 1, 28, 28)
    export.export(model, [x], os.path.join(out, "fmnist_wide_train.onnx"), torch.onnx.TrainingMode.TRAINING,
                  ["input"], ["output"], {"input": {0: "batch"}, "output": {0: "batch"}})
    print("wrote", os.path.join(out, "fmnist_wide_train.onnx"))


if __name__ == "__main__":
    main()
