// Package training holds the CPU kernels of the ai.onnx.preview.training
// optimizer-update ops (Adagrad, Adam, Momentum).
package training
