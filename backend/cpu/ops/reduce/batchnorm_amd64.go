//go:build amd64 && !purego

package reduce

import (
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// bnAVX2 reports whether the CPU (and OS) support the assembly loops of
// batch normalisation.
var bnAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// bnSumsAVX2 and bnApplyAVX2 are in batchnorm_amd64.s; n is a multiple
// of 8.
//
//go:noescape
func bnSumsAVX2(x *float32, n int, x0 float64, pf1, pf2 *float32) (s, q float64)

//go:noescape
func bnApplyAVX2(dst, src *float32, n int, mul, add float32, relu bool, pf *float32)

// bnRowSums returns Σ(v-x0) and Σ(v-x0)² over x, in float64, and asks the
// memory system for pf1 and pf2 (each nil, or at least as long as x) as
// it reads x: the rows the caller's next pass writes or reads.
func bnRowSums(x []float32, x0 float64, pf1, pf2 []float32) (s, q float64) {
	n := len(x) &^ 7
	if !bnAVX2 || n == 0 {
		return bnRowSumsGo(x, x0)
	}
	s, q = bnSumsAVX2(&x[0], n, x0, kern.PrefetchAddr(pf1, n), kern.PrefetchAddr(pf2, n))
	if n < len(x) {
		s2, q2 := bnRowSumsGo(x[n:], x0)
		s, q = s+s2, q+q2
	}
	return s, q
}

// bnRowApply writes src·mul + add into dst (Relu'd when relu is set) and
// asks for pf (nil, or at least as long as src) into L2 as it reads src:
// the row the caller reads next.
func bnRowApply(dst, src []float32, mul, add float32, relu bool, pf []float32) {
	n := len(src) &^ 7
	if !bnAVX2 || n == 0 {
		bnRowApplyGo(dst, src, mul, add, relu)
		return
	}
	dst = dst[:len(src)]
	bnApplyAVX2(&dst[0], &src[0], n, mul, add, relu, kern.PrefetchAddr(pf, n))
	if n < len(src) {
		bnRowApplyGo(dst[n:], src[n:], mul, add, relu)
	}
}

// bnShortSumsAVX2 and bnShortApplyAVX2 are bnShortSums's and
// bnShortApply's loops over the first n columns (a multiple of 8); rows is
// at least 1.
//
//go:noescape
func bnShortSumsAVX2(x *float32, stride, rows, n int, x0, s, q *float64)

//go:noescape
func bnShortApplyAVX2(dst, src *float32, stride, rows, n int, mul, add *float32, relu bool)

// bnShortSums sets, for each column j < len(s) of the rows o < rows that
// start stride elements apart in x, s[j] = Σ (x[o·stride+j] − x0[j]) and
// q[j] = Σ (x[o·stride+j] − x0[j])², in float64 and in row order.
func bnShortSums(x []float32, stride, rows int, x0, s, q []float64) {
	n := len(s)
	if rows <= 0 || n == 0 {
		clear(s)
		clear(q[:n])
		return
	}
	x, x0, q = x[:(rows-1)*stride+n], x0[:n], q[:n]
	m := n &^ 7
	if !bnAVX2 || m == 0 {
		m = 0
	} else {
		bnShortSumsAVX2(&x[0], stride, rows, m, &x0[0], &s[0], &q[0])
	}
	if m < n {
		bnShortSumsGo(x, stride, rows, x0, s, q, m)
	}
}

// bnShortApply writes src·mul[j] + add[j] (Relu'd when relu is set, as
// bnRowApply) into column j < len(mul) of the rows o < rows that start
// stride elements apart in x and y.
func bnShortApply(y, x []float32, stride, rows int, mul, add []float32, relu bool) {
	n := len(mul)
	if rows <= 0 || n == 0 {
		return
	}
	span := (rows-1)*stride + n
	x, y, add = x[:span], y[:span], add[:n]
	m := n &^ 7
	if !bnAVX2 || m == 0 {
		m = 0
	} else {
		bnShortApplyAVX2(&y[0], &x[0], stride, rows, m, &mul[0], &add[0], relu)
	}
	if m < n {
		bnShortApplyGo(y, x, stride, rows, mul, add, relu, m)
	}
}

// bnApplyAddReluAVX2 and bnShortApplyAddReluAVX2 are bnApplyAVX2's and
// bnShortApplyAVX2's loops with relu and a residual added before the
// Relu (batchnorm_amd64.s).
//
//go:noescape
func bnApplyAddReluAVX2(dst, src, res *float32, n int, mul, add float32, pf *float32)

//go:noescape
func bnShortApplyAddReluAVX2(dst, src, res *float32, stride, rows, n int, mul, add *float32)

// bnRowApplyAddRelu writes Relu(src·mul + add + res) into dst, rounded
// after the product and each sum, with bnRowApply's pf.
func bnRowApplyAddRelu(dst, src, res []float32, mul, add float32, pf []float32) {
	n := len(src) &^ 7
	if !bnAVX2 || n == 0 {
		bnRowApplyAddReluGo(dst, src, res, mul, add)
		return
	}
	dst, res = dst[:len(src)], res[:len(src)]
	bnApplyAddReluAVX2(&dst[0], &src[0], &res[0], n, mul, add, kern.PrefetchAddr(pf, n))
	if n < len(src) {
		bnRowApplyAddReluGo(dst[n:], src[n:], res[n:], mul, add)
	}
}

// bnShortApplyAddRelu is bnShortApply with relu and the residual r (y's
// layout) added before the Relu.
func bnShortApplyAddRelu(y, x, r []float32, stride, rows int, mul, add []float32) {
	n := len(mul)
	if rows <= 0 || n == 0 {
		return
	}
	span := (rows-1)*stride + n
	x, y, r, add = x[:span], y[:span], r[:span], add[:n]
	m := n &^ 7
	if !bnAVX2 || m == 0 {
		m = 0
	} else {
		bnShortApplyAddReluAVX2(&y[0], &x[0], &r[0], stride, rows, m, &mul[0], &add[0])
	}
	if m < n {
		bnShortApplyAddReluGo(y, x, r, stride, rows, mul, add, m)
	}
}
