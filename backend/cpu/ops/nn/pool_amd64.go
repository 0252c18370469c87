//go:build amd64 && !purego

package nn

import "golang.org/x/sys/cpu"

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
