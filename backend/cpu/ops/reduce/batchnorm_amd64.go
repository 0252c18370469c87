//go:build amd64 && !purego

package reduce

import "golang.org/x/sys/cpu"

// bnAVX2 reports whether the CPU (and OS) support the assembly loops of
// batch normalisation.
var bnAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// bnSumsAVX2 and bnApplyAVX2 are in batchnorm_amd64.s; n is a multiple
// of 8.
//
//go:noescape
func bnSumsAVX2(x *float32, n int, x0 float64) (s, q float64)

//go:noescape
func bnApplyAVX2(dst, src *float32, n int, mul, add float32, relu bool)

// bnRowSums returns Σ(v-x0) and Σ(v-x0)² over x, in float64.
func bnRowSums(x []float32, x0 float64) (s, q float64) {
	n := len(x) &^ 7
	if !bnAVX2 || n == 0 {
		return bnRowSumsGo(x, x0)
	}
	s, q = bnSumsAVX2(&x[0], n, x0)
	if n < len(x) {
		s2, q2 := bnRowSumsGo(x[n:], x0)
		s, q = s+s2, q+q2
	}
	return s, q
}

// bnRowApply writes src·mul + add into dst (Relu'd when relu is set).
func bnRowApply(dst, src []float32, mul, add float32, relu bool) {
	n := len(src) &^ 7
	if !bnAVX2 || n == 0 {
		bnRowApplyGo(dst, src, mul, add, relu)
		return
	}
	dst = dst[:len(src)]
	bnApplyAVX2(&dst[0], &src[0], n, mul, add, relu)
	if n < len(src) {
		bnRowApplyGo(dst[n:], src[n:], mul, add, relu)
	}
}
