// Package sequence holds the CPU kernels for ONNX sequence, optional and
// string ops; they register themselves with kern from init.
package sequence
