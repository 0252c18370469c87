// Package control holds the CPU kernels for control flow and the ops that
// fit no other family: Constant and Identity; If, Loop and Scan (which run
// their bodies through kern.Context.Sub); the random generators; linear
// quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// QLinearMatMul, QLinearConv); and the signal ops (window functions,
// MelWeightMatrix, DFT, STFT). The kernels register themselves with kern
// from init.
package control
