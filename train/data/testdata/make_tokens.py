"""Token-file test data for train/data (run with /usr/bin/python3; numpy).

Writes
  tokens_u16.bin      53 uint16 token ids, little-endian, as nanoGPT's
                      prepare scripts write them (np.array(ids, np.uint16).tofile)
  tokens_u32.bin      53 uint32 token ids, some above 65535
  tokens_windows.npz  numpy's own cut of each file into windows of T=8 as
                      nanoGPT's get_batch does (x = data[i:i+T],
                      y = data[i+1:i+1+T]) at offsets i = 8k for the
                      windows k = [5, 0, 3]: u16_x, u16_y, u32_x, u32_y (int64)
Regenerate: cd train/data/testdata && /usr/bin/python3 make_tokens.py
"""
import numpy as np

T = 8
rng = np.random.default_rng(11)
u16 = rng.integers(0, 65536, size=53).astype(np.uint16)
u32 = rng.integers(0, 1 << 20, size=53).astype(np.uint32)
u16.tofile("tokens_u16.bin")
u32.tofile("tokens_u32.bin")
out = {}
for name, path, dt in [("u16", "tokens_u16.bin", np.uint16), ("u32", "tokens_u32.bin", np.uint32)]:
    data = np.memmap(path, dtype=dt, mode="r")
    ix = [T * k for k in (5, 0, 3)]
    out[name + "_x"] = np.stack([data[i:i + T].astype(np.int64) for i in ix])
    out[name + "_y"] = np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix])
np.savez("tokens_windows.npz", **out)
