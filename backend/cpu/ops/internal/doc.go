// Package internal holds the CPU kernels of onnxtrain's own ops (domain
// "onnxtrain"), which autodiff emits: SumToShape and the backward kernels
// of the primitives whose gradients are not compositions of other ops.
package internal
