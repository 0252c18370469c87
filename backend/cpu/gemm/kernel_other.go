//go:build !amd64 || purego

package gemm

// AVX512 reports whether the GEMM uses its AVX-512 kernel: never off amd64.
func AVX512() bool { return false }

// storeFence orders non-temporal stores; without assembly there are none.
func storeFence() {}
