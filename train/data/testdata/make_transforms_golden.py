"""Goldens of the torchvision-style transforms (transforms.go), from
torchvision 0.14 on tensors (bilinear, antialias=False, as onnxtrain resizes).

Writes transforms_golden.npz for the test image pattern (5x7 RGB, see
make_golden.py):
  resize8_center6    Resize(8) then CenterCrop(6)         -> [3, 6, 6]
  resize4_center3x4  Resize(4) then CenterCrop((3, 4))    -> [3, 3, 4]
  resized_crop       F.resized_crop(top=1, left=2, height=3, width=4, size=(6, 6))
Regenerate: cd train/data/testdata && /usr/bin/python3 make_transforms_golden.py
"""
import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF



def pattern(h, w):
    """The RGB test image of make_golden.py: (37x + 91y + 53c + 11) mod 256."""
    c, y, xx = np.meshgrid(np.arange(3), np.arange(h), np.arange(w), indexing="ij")
    return ((37 * xx + 91 * y + 53 * c + 11) % 256).astype(np.uint8)


img = torch.from_numpy(pattern(5, 7)).float().div(255)  # [3, 5, 7] as ToTensor
out = {
    "resize8_center6": T.CenterCrop(6)(T.Resize(8, antialias=False)(img)).numpy(),
    "resize4_center3x4": T.CenterCrop((3, 4))(T.Resize(4, antialias=False)(img)).numpy(),
    "resized_crop": TF.resized_crop(img, 1, 2, 3, 4, [6, 6], antialias=False).numpy(),
}
for k, v in out.items():
    print(k, v.shape)
np.savez("transforms_golden.npz", **out)
