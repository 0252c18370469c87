//go:build !amd64 || purego

package distrib

import "unsafe"

const useAVX2 = false

// Never called (useAVX2 is false); they keep the dispatch compiling.

func addF32AVX2(dst, src *float32, n int) {
	addToGeneric(unsafe.Slice(dst, n), unsafe.Slice(src, n))
}

func toBF16AVX2(dst *uint16, src *float32, n int) {
	toBF16Generic(unsafe.Slice(dst, n), unsafe.Slice(src, n))
}

func fromBF16AVX2(dst *float32, src *uint16, n int) {
	fromBF16Generic(unsafe.Slice(dst, n), unsafe.Slice(src, n))
}

func addBF16AVX2(dst *float32, src *uint16, n int) {
	addBF16Generic(unsafe.Slice(dst, n), unsafe.Slice(src, n))
}

func roundBF16AVX2(x *float32, n int) { roundBF16Generic(unsafe.Slice(x, n)) }
