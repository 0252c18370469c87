//go:build amd64 && !purego

package nn

import (
	"math"

	"golang.org/x/sys/cpu"
)

// poolAVX2 reports whether the CPU (and OS) support the assembly loops of
// the float32 max pools.
var poolAVX2 = cpu.X86.HasAVX2

// The loops are in pool_amd64.s.
//
//go:noescape
func poolVMaxAVX2(dst, a, b *float32, n int) (nan bool)

//go:noescape
func poolHMax3S2AVX2(dst, v *float32, blocks int)

//go:noescape
func poolHMax2S2AVX2(dst, v *float32, blocks int)

//go:noescape
func poolArgmax3x3S2AVX2(dst *int32, x *float32, s1, s2 int, blocks int) (nan bool)

// PoolVMax sets dst[i] = max(a[i], b[i]) (dst may be a; all of a's
// length) and reports whether any a[i] or b[i] is NaN, in which case the
// values written are unspecified. Zeros of both signs compare equal, so
// either may be written for a tie.
func PoolVMax(dst, a, b []float32) (nan bool) {
	n := len(a)
	dst, b = dst[:n], b[:n]
	v := n &^ 7
	if poolAVX2 && v > 0 {
		nan = poolVMaxAVX2(&dst[0], &a[0], &b[0], v)
	}
	for i := v; i < n; i++ {
		x, y := a[i], b[i]
		nan = nan || x != x || y != y
		dst[i] = max(x, y)
	}
	return nan
}

// poolHMaxS2 sets dst[i] = max(v[2i], ..., v[2i+k-1]) (k = 2 or 3) for
// blocks of 8 outputs and returns how many outputs it wrote (a multiple
// of 8); v must hold no NaN.
func poolHMaxS2(dst, v []float32, k int) int {
	blocks := len(dst) / 8
	if !poolAVX2 || blocks == 0 || len(v) < 16*blocks+k-2 {
		return 0
	}
	if k == 3 {
		poolHMax3S2AVX2(&dst[0], &v[0], blocks)
	} else {
		poolHMax2S2AVX2(&dst[0], &v[0], blocks)
	}
	return 8 * blocks
}

// PoolArgmax3x3S2 sets, for the len(dst) 3×3 windows whose top-left taps
// are x[2i] and whose rows start at x, x[s1:] and x[s1+s2:], dst[i] to the
// index 0..8 in row-major order of the window's first tap holding its
// maximum. (With s2 = 0 the last row repeats the second, so a window of
// two rows gets an index 0..5.) It reports whether it set them (not where
// there is no AVX2 loop or fewer than 8 windows) and whether a tap is NaN,
// in which case dst is unspecified.
func PoolArgmax3x3S2(dst []int32, x []float32, s1, s2 int) (ok, nan bool) {
	n := len(dst)
	if !poolAVX2 || n < 8 || len(x) < s1+s2+2*n+1 {
		return false, false
	}
	blocks := n / 8
	nan = poolArgmax3x3S2AVX2(&dst[0], &x[0], s1, s2, blocks)
	if last := n - 8; 8*blocks < n {
		nan = poolArgmax3x3S2AVX2(&dst[last], &x[2*last], s1, s2, 1) || nan
	}
	return true, nan
}

//go:noescape
func poolMax3S2PlaneAVX2(y, x, v *float32, iw, ow, colOff int, rows *span, nrows int) (bad bool)

// poolMax3S2Plane computes one float32 plane of a MaxPool whose windows
// are 3 columns wide two columns apart, the columns of output q being
// 2q+colOff-1 .. 2q+colOff+1 cut to the plane (colOff 0 or 1), and whose
// rows are the spans rows (1 to 3 rows each): y gets len(rows) rows of
// ow outputs. v is scratch of at least max(iw, 2·ow)+2 values. It
// reports false, with y unspecified, when there is no vector loop or a
// tap is NaN or -0 (whose maxima the scan orders otherwise); the caller
// then computes the plane another way. The caller checks the shapes
// (iw and ow at least 8, the spans inside x).
func poolMax3S2Plane(y, x, v []float32, iw, ow, colOff int, rows []span) bool {
	if !poolAVX2 || len(rows) == 0 {
		return false
	}
	n := max(iw, 2*ow) + 2
	v = v[:n]
	v[0] = float32(math.Inf(-1))
	for i := iw + 1; i < n; i++ {
		v[i] = float32(math.Inf(-1))
	}
	_ = y[len(rows)*ow-1]
	return !poolMax3S2PlaneAVX2(&y[0], &x[0], &v[0], iw, ow, colOff, &rows[0], len(rows))
}

//go:noescape
func poolArgmaxScatter3x3S2AVX2(dx, dy, x *float32, s1, s2, n int) (nan bool)

// PoolArgmaxScatter3x3S2 adds, window after window, dy[i] to dx at the
// first tap (row-major) holding the maximum of the 3×3 window whose
// top-left tap is x[2i] and whose rows start at x, x[s1:] and
// x[s1+s2:] (s2 = 0: a window of two rows), dx lying as x does. It
// reports whether it ran (not where there is no AVX2 loop or for fewer
// than 8 windows) and whether it met a NaN tap, in which case it stopped
// with part of the windows added.
func PoolArgmaxScatter3x3S2(dx, dy, x []float32, s1, s2 int) (ok, nan bool) {
	n := len(dy)
	if !poolAVX2 || n < 8 || len(x) < s1+s2+2*n+1 || len(dx) < s1+s2+2*n+1 {
		return false, false
	}
	return true, poolArgmaxScatter3x3S2AVX2(&dx[0], &dy[0], &x[0], s1, s2, n)
}

// PoolScatterLoop reports whether PoolArgmaxScatter3x3S2 has a vector
// loop (it then runs for 8 windows or more).
func PoolScatterLoop() bool { return poolAVX2 }

//go:noescape
func avgPlanes16AVX2(y, x *float32, size int, n float64)
