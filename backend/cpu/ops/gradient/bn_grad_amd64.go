//go:build amd64 && !purego

package gradient

import (
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// bnGradAVX2 reports whether the CPU (and OS) support the assembly loops
// of the batch-normalisation gradient.
var bnGradAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The loops below are in bn_grad_amd64.s; n is a multiple of 8. The Relu
// forms take r, the Relu output whose gradient mask (r > 0) applies to dy.
//
//go:noescape
func bnGradSumsAVX2(dy, x *float32, n int, x0 float64, pf *float32) (sd, sdd, sg, sgd float64)

//go:noescape
func bnGradApplyAVX2(dx, dy, x *float32, n int, k1, k2, k0 float64, pf int)

//go:noescape
func bnGradSumsReluAVX2(dy, r, x *float32, n int, x0 float64, pf *float32) (sd, sdd, sg, sgd float64)

//go:noescape
func bnGradApplyReluAVX2(dx, dy, r, x *float32, n int, k1, k2, k0 float64, pf int)

//go:noescape
func bnGradApplyCoefAVX2(dx, dy, x *float32, k1, k2, k0 *float64, n int)

//go:noescape
func bnGradApplyCoefReluAVX2(dx, dy, r, x *float32, k1, k2, k0 *float64, n int)

//go:noescape
func bnGradShortSumsAVX2(dy, r, x *float32, w, nc int, x0, acc *float64, stride int)

// bnGradRowSums returns, with d = x - x0 and g = dy (masked by r > 0 when r
// is not nil), Σd, Σd², Σg and Σg·d over one row, in float64. As it reads
// x it asks for the same elements of pf (nil, or at least as long as x):
// the row of dx that the caller writes next.
func bnGradRowSums(dy, r, x []float32, x0 float64, pf []float32) (sd, sdd, sg, sgd float64) {
	n := len(x) &^ 7
	if !bnGradAVX2 || n == 0 {
		return bnGradRowSumsGo(dy, r, x, x0)
	}
	dy = dy[:len(x)]
	if r != nil {
		r = r[:len(x)]
		sd, sdd, sg, sgd = bnGradSumsReluAVX2(&dy[0], &r[0], &x[0], n, x0, kern.PrefetchAddr(pf, n))
		r = r[n:]
	} else {
		sd, sdd, sg, sgd = bnGradSumsAVX2(&dy[0], &x[0], n, x0, kern.PrefetchAddr(pf, n))
	}
	if n < len(x) {
		a, b, c, d := bnGradRowSumsGo(dy[n:], r, x[n:], x0)
		sd, sdd, sg, sgd = sd+a, sdd+b, sg+c, sgd+d
	}
	return sd, sdd, sg, sgd
}

// bnGradRowApply writes float32(k1·g + k2·x + k0) into dx over one row,
// with g = dy masked by r > 0 when r is not nil. As it reads the row it
// asks for the lines ahead elements on of dy, r and x (into L2; 0: none):
// the next channel's rows, which the caller's next sums pass reads.
func bnGradRowApply(dx, dy, r, x []float32, k1, k2, k0 float64, ahead int) {
	n := len(x) &^ 7
	if !bnGradAVX2 || n == 0 {
		bnGradRowApplyGo(dx, dy, r, x, k1, k2, k0)
		return
	}
	dy, dx = dy[:len(x)], dx[:len(x)]
	if r != nil {
		r = r[:len(x)]
		bnGradApplyReluAVX2(&dx[0], &dy[0], &r[0], &x[0], n, k1, k2, k0, 4*ahead)
		r = r[n:]
	} else {
		bnGradApplyAVX2(&dx[0], &dy[0], &x[0], n, k1, k2, k0, 4*ahead)
	}
	if n < len(x) {
		bnGradRowApplyGo(dx[n:], dy[n:], r, x[n:], k1, k2, k0)
	}
}

// bnGradApplyCoef writes float32((k1[i]·g[i] + k2[i]·x[i]) + k0[i]) into
// dx[i], with g = dy masked by r > 0 when r is not nil; dy, r (when not
// nil), dx and the coefficients have at least len(x) elements.
func bnGradApplyCoef(dx, dy, r, x []float32, k1, k2, k0 []float64) {
	n := len(x) &^ 7
	if !bnGradAVX2 || n == 0 {
		bnGradApplyCoefGo(dx, dy, r, x, k1, k2, k0)
		return
	}
	dy, dx, k1, k2, k0 = dy[:len(x)], dx[:len(x)], k1[:len(x)], k2[:len(x)], k0[:len(x)]
	if r != nil {
		r = r[:len(x)]
		bnGradApplyCoefReluAVX2(&dx[0], &dy[0], &r[0], &x[0], &k1[0], &k2[0], &k0[0], n)
		r = r[n:]
	} else {
		bnGradApplyCoefAVX2(&dx[0], &dy[0], &x[0], &k1[0], &k2[0], &k0[0], n)
	}
	if n < len(x) {
		bnGradApplyCoefGo(dx[n:], dy[n:], r, x[n:], k1[n:], k2[n:], k0[n:])
	}
}

// bnGradShortSums adds, for as many of the nc rows of w elements at x, dy
// and r (nil for no mask) as it takes, each row's sums (bnGradRowSumsGo's,
// with x0[k] for row k) to acc[k], acc[stride+k], acc[2·stride+k] and
// acc[3·stride+k], and returns how many rows it took (from the first; a
// multiple of 4, 0 unless w is one).
func bnGradShortSums(dy, r, x []float32, w, nc int, x0, acc []float64, stride int) int {
	n4 := nc &^ 3
	if !bnGradAVX2 || w%4 != 0 || w <= 0 || n4 == 0 || len(x) < n4*w || len(dy) < n4*w ||
		(r != nil && len(r) < n4*w) || len(x0) < n4 || stride < n4 || len(acc) < 3*stride+n4 {
		return 0
	}
	var rp *float32
	if r != nil {
		rp = &r[0]
	}
	bnGradShortSumsAVX2(&dy[0], rp, &x[0], w, n4, &x0[0], &acc[0], stride)
	return n4
}
