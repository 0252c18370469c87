//go:build amd64 && !purego

package elementwise

import "golang.org/x/sys/cpu"

// hasAVX2 reports whether the CPU (and OS) support the package's assembly
// loops (Relu's here, the arithmetic's in arith_amd64.s).
var hasAVX2 = cpu.X86.HasAVX2

// vecLen is how many of n elements the eight-lane assembly loops take:
// the longest prefix that is a multiple of 8, or none without AVX2.
func vecLen(n int) int {
	if !hasAVX2 {
		return 0
	}
	return n &^ 7
}

// reluAVX2 and reluGradAVX2 are in relu_amd64.s; n is a multiple of 8.
//
//go:noescape
func reluAVX2(dst, src *float32, n int)

//go:noescape
func reluGradAVX2(d, dy, x *float32, n int)

// reluVecPrefix runs reluAVX2 over the longest prefix of src whose length
// is a multiple of 8 and returns how many elements it did.
func reluVecPrefix(dst, src []float32) int {
	n := vecLen(len(src))
	if n == 0 {
		return 0
	}
	reluAVX2(&dst[:n][0], &src[0], n)
	return n
}

// reluGradVecPrefix is reluVecPrefix for reluGradAVX2.
func reluGradVecPrefix(d, g, x []float32) int {
	n := vecLen(len(d))
	if n == 0 {
		return 0
	}
	reluGradAVX2(&d[0], &g[:n][0], &x[:n][0], n)
	return n
}

//go:noescape
func addReluGradAVX2(d, a, b, x *float32, n int)

// addReluGradVecPrefix is reluVecPrefix for addReluGradAVX2.
func addReluGradVecPrefix(d, a, b, x []float32) int {
	n := vecLen(len(d))
	if n == 0 {
		return 0
	}
	addReluGradAVX2(&d[0], &a[:n][0], &b[:n][0], &x[:n][0], n)
	return n
}

//go:noescape
func reluGradPlanesAVX2(d, gy, x *float32, planes, inner int)

// reluGradPlanesVec runs reluGradPlanesAVX2 over the planes of g (each
// of inner elements of d and x) and reports whether it did (not without
// AVX2).
func reluGradPlanesVec(d, g, x []float32, inner int) bool {
	if !hasAVX2 || len(g) == 0 || inner < 1 {
		return false
	}
	_ = d[len(g)*inner-1]
	_ = x[len(g)*inner-1]
	reluGradPlanesAVX2(&d[0], &g[0], &x[0], len(g), inner)
	return true
}
