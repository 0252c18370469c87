//go:build amd64 && !purego

package distrib

import "golang.org/x/sys/cpu"

// useAVX2 reports whether the CPU (and OS) support the assembly kernels.
var useAVX2 = cpu.X86.HasAVX2

// addF32AVX2 adds src into dst; n is a multiple of 16.
//
//go:noescape
func addF32AVX2(dst, src *float32, n int)

// toBF16AVX2 rounds src to bfloat16 into dst; n is a multiple of 16.
//
//go:noescape
func toBF16AVX2(dst *uint16, src *float32, n int)

// fromBF16AVX2 widens src into dst; n is a multiple of 8.
//
//go:noescape
func fromBF16AVX2(dst *float32, src *uint16, n int)

// addBF16AVX2 adds src, widened, into dst; n is a multiple of 8.
//
//go:noescape
func addBF16AVX2(dst *float32, src *uint16, n int)

// roundBF16AVX2 rounds x to bfloat16 values in place; n is a multiple of 8.
//
//go:noescape
func roundBF16AVX2(x *float32, n int)
