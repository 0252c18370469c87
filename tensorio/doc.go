// Package tensorio reads and writes arrays as graph tensors in NumPy's .npy
// and .npz formats (the format users feed `onnxtrain run` and `train` with)
// and in safetensors (trained weights, checkpoints).
//
// The codec is ours (the formats are a short header plus raw bytes): the Go
// npyio package reads well but writes only 1-D arrays and gonum matrices,
// and neither it nor others handle bfloat16.
package tensorio
