// Package benchlib is what `onnxtrain bench` measures: training and
// inference steps of an imported model on random data, a single float32
// GEMM, step-time statistics and the process's peak resident memory.
//
// Nothing here asserts a speed; numbers are meant to be compared as ratios
// with a peer (PyTorch, OpenBLAS) measured in the same run (bench/compare.py).
package benchlib
