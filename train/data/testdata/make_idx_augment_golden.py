"""Goldens of the IDX augmentation (idx_augment.go) from torchvision 0.14.

Writes idx_augment_golden.npz: for the 5x6 one-channel test image
(37x + 91y + 11) mod 256 and each window (top, left, flip) into the image
padded by 2, torchvision's RandomCrop(padding=2) result at that window
(pad with fill 0, then F.crop), followed by F.hflip when flip is set, on the
image as ToTensor makes it ([0, 1]):
  image   uint8 [5, 6]
  params  int64 [K, 3]  (top, left, flip)
  out     float32 [K, 5, 6]
Regenerate: cd train/data/testdata && /usr/bin/python3 make_idx_augment_golden.py
"""
import numpy as np
import torch
import torchvision.transforms.functional as TF

y, x = np.meshgrid(np.arange(5), np.arange(6), indexing="ij")
image = ((37 * x + 91 * y + 11) % 256).astype(np.uint8)
t = torch.from_numpy(image).float().div(255)[None]  # [1, 5, 6]
params = np.array([[0, 0, 0], [4, 4, 0], [2, 2, 1], [0, 3, 1], [3, 1, 0], [1, 4, 1]], dtype=np.int64)
outs = []
for top, left, flip in params:
    c = TF.crop(TF.pad(t, [2, 2, 2, 2], fill=0), int(top), int(left), 5, 6)
    if flip:
        c = TF.hflip(c)
    outs.append(c[0].numpy())
np.savez("idx_augment_golden.npz", image=image, params=params, out=np.stack(outs).astype(np.float32))
print("wrote idx_augment_golden.npz")
