"""Test data for train/data (run with /usr/bin/python3; numpy and PyTorch 1.13).

Writes
  tiny.npz          a small labelled dataset: x float32 [6,3], mask int64 [6,2],
                    labels int64 [6]
  tiny_gather.npz   numpy's fancy indexing of tiny.npz's arrays at rows [4, 0, 5]
  bad_leading.npz   arrays whose leading dimensions differ (x: 6 rows, labels: 5)
  resize_golden.npz torch.nn.functional.interpolate(bilinear, align_corners=False)
                    of the test image pattern (see pattern() and imagefolder_test.go)
Regenerate: cd train/data/testdata && /usr/bin/python3 make_golden.py
"""
import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(7)
x = rng.standard_normal((6, 3)).astype(np.float32)
mask = rng.integers(0, 100, size=(6, 2)).astype(np.int64)
labels = np.array([3, 1, 4, 1, 5, 9], dtype=np.int64)
np.savez("tiny.npz", x=x, mask=mask, labels=labels)
idx = [4, 0, 5]
np.savez("tiny_gather.npz", x=x[idx], mask=mask[idx], labels=labels[idx])
np.savez("bad_leading.npz", x=x, labels=labels[:5])


def pattern(h, w):
    """The RGB test image: value(c, y, x) = (37x + 91y + 53c + 11) mod 256."""
    c, y, xx = np.meshgrid(np.arange(3), np.arange(h), np.arange(w), indexing="ij")
    return ((37 * xx + 91 * y + 53 * c + 11) % 256).astype(np.uint8)


img = torch.from_numpy(pattern(5, 7)).float().div(255).unsqueeze(0)  # [1, 3, 5, 7] as ToTensor
out = {}
for h, w in [(3, 4), (8, 11)]:
    out[f"{h}x{w}"] = F.interpolate(img, size=(h, w), mode="bilinear", align_corners=False)[0].numpy()
np.savez("resize_golden.npz", **out)
