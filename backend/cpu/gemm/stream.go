package gemm

import (
	"os"
	"unsafe"
)

// streamMinBytes is the smallest result (M·N·4 bytes) that a product
// writing it in one pass stores with non-temporal stores: twice the 2 MiB
// L2 of one core, so that what streams past the cache would not have
// stayed in it anyway.
var streamMinBytes = 4 << 20

// streamMaxK is the longest shared dimension whose products stream their
// result: at k = 64 the kernel's arithmetic per stored line is a quarter
// of what it is at 256, and a line read for ownership from memory
// outweighs it (BenchmarkStreamColdC: 256×25088×64 1.2–1.4× faster
// streamed, 512×6272×128 1.03–1.1×, 64×25088×256 0.97–1.01×).
const streamMaxK = 128

// streamC turns the non-temporal stores on; ONNXTRAIN_GEMM_NO_STREAM=1
// turns them off, so that one binary measures both.
var streamC = os.Getenv("ONNXTRAIN_GEMM_NO_STREAM") == ""

// aligned64 reports whether c[0] starts a 64-byte cache line.
func aligned64(c []float32) bool {
	return uintptr(unsafe.Pointer(&c[0]))%64 == 0
}
