//go:build amd64 && !purego

package elementwise

import "golang.org/x/sys/cpu"

// reluVec reports whether the CPU (and OS) support the Relu assembly loops.
var reluVec = cpu.X86.HasAVX2

// reluAVX2 and reluGradAVX2 are in relu_amd64.s; n is a multiple of 8.
//
//go:noescape
func reluAVX2(dst, src *float32, n int)

//go:noescape
func reluGradAVX2(d, dy, x *float32, n int)

// reluVecPrefix runs reluAVX2 over the longest prefix of src whose length
// is a multiple of 8 and returns how many elements it did.
func reluVecPrefix(dst, src []float32) int {
	n := len(src) &^ 7
	if !reluVec || n == 0 {
		return 0
	}
	reluAVX2(&dst[:n][0], &src[0], n)
	return n
}

// reluGradVecPrefix is reluVecPrefix for reluGradAVX2.
func reluGradVecPrefix(d, g, x []float32) int {
	n := len(d) &^ 7
	if !reluVec || n == 0 {
		return 0
	}
	reluGradAVX2(&d[0], &g[:n][0], &x[:n][0], n)
	return n
}

//go:noescape
func addReluGradAVX2(d, a, b, x *float32, n int)

// addReluGradVecPrefix is reluVecPrefix for addReluGradAVX2.
func addReluGradVecPrefix(d, a, b, x []float32) int {
	n := len(d) &^ 7
	if !reluVec || n == 0 {
		return 0
	}
	addReluGradAVX2(&d[0], &a[:n][0], &b[:n][0], &x[:n][0], n)
	return n
}
