// Package linalg holds the CPU kernels for linear algebra and recurrent
// layers: MatMul, Gemm, Einsum, Det, MatMulInteger, ConvInteger, RNN, GRU and
// LSTM. They register themselves with kern from init. float32 products go
// through gemm.Sgemm; other numeric dtypes use generic loops.
package linalg
