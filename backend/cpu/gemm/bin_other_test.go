//go:build !amd64 || purego

package gemm

// bInKernels: no micro-kernel reads B in place here.
func bInKernels() []microKernel { return nil }
