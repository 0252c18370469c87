//go:build amd64 && !purego

package nn

import "github.com/onnxtrain/onnxtrain/backend/cpu/gemm"

// poolAVX512 reports whether the AVX-512 loop of poolArgmaxMax3x3S2 may
// run: where the GEMM's AVX-512 kernels do (the CPU has AVX-512F and
// ONNXTRAIN_NO_AVX512 is not set).
var poolAVX512 = poolAVX2 && gemm.AVX512()

// The loops are in pool_argmax_amd64.s.
//
//go:noescape
func poolArgmaxMax3x3S2AVX2(codes *uint8, y, x *float32, s1, s2 int, blocks int, pf int)

//go:noescape
func poolArgmaxMax3x3S2AVX512(codes *uint8, y, x *float32, s1, s2 int, n int, pf int)

// poolArgmaxMax3x3S2 sets, for the len(codes) 3×3 windows whose top-left
// taps are x[2i] and whose rows start at x, x[s1:] and x[s1+s2:],
// codes[i] to the index 0..8, in row-major order, of the tap the
// row-major scan keeps (the first, replaced only by a strictly greater
// one, so ties keep the earliest tap and a NaN wins only as the first) and
// y[i] to that tap's value. (With s2 = 0 the last row repeats the second,
// never strictly greater, so a window of two rows gets an index 0..5.) It
// reports whether it set them: not where there is no AVX2 loop or for
// fewer than 8 windows. As they go, the loops fetch the lines pf and
// pf + 4·s1 bytes past those of the first window row (pf ≥ 0).
func poolArgmaxMax3x3S2(codes []uint8, y, x []float32, s1, s2, pf int) bool {
	n := len(codes)
	if !poolAVX2 || n < 8 || len(y) < n || len(x) < s1+s2+2*n+1 {
		return false
	}
	if poolAVX512 {
		// Sixteen windows at a time (the last block masked) read x up to
		// x[32·⌈n/16⌉+1] in each row; where that is past x, the full
		// blocks, and the rest as below.
		if s1+s2+32*((n+15)/16)+2 <= len(x) {
			poolArgmaxMax3x3S2AVX512(&codes[0], &y[0], &x[0], s1, s2, n, pf)
			return true
		}
		if z := 16 * (min(n, (len(x)-s1-s2-2)/2) / 16); z > 0 {
			poolArgmaxMax3x3S2AVX512(&codes[0], &y[0], &x[0], s1, s2, z, pf)
			if z == n {
				return true
			}
			if n-z < 8 {
				// The last eight windows again, overlapping those done.
				last := n - 8
				poolArgmaxMax3x3S2AVX2(&codes[last], &y[last], &x[2*last], s1, s2, 1, pf)
				return true
			}
			codes, y, x = codes[z:], y[z:], x[2*z:]
			n -= z
		}
	}
	blocks := n / 8
	poolArgmaxMax3x3S2AVX2(&codes[0], &y[0], &x[0], s1, s2, blocks, pf)
	if last := n - 8; 8*blocks < n {
		poolArgmaxMax3x3S2AVX2(&codes[last], &y[last], &x[2*last], s1, s2, 1, pf)
	}
	return true
}
