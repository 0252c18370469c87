package ops

import "github.com/onnxtrain/onnxtrain/backend/cpu/kern"

// Every family above has registered its kernels by now (package
// initialisation runs imports first): float32 kernels get the half-type
// adapter, so that mixed-precision graphs keep their half values in the
// executor's memory plan (see kern.AdaptHalfKernels).
func init() { kern.AdaptHalfKernels() }
