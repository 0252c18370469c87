//go:build amd64 && !purego

package nn

// The loop is in pool_argmax_amd64.s.
//
//go:noescape
func poolArgmaxMax3x3S2AVX2(codes *uint8, y, x *float32, s1, s2 int, blocks int)

// poolArgmaxMax3x3S2 sets, for the len(codes) 3×3 windows whose top-left
// taps are x[2i] and whose rows start at x, x[s1:] and x[s1+s2:],
// codes[i] to the index 0..8, in row-major order, of the tap the
// row-major scan keeps (the first, replaced only by a strictly greater
// one, so ties keep the earliest tap and a NaN wins only as the first) and
// y[i] to that tap's value. (With s2 = 0 the last row repeats the second,
// never strictly greater, so a window of two rows gets an index 0..5.) It
// reports whether it set them: not where there is no AVX2 loop or for
// fewer than 8 windows.
func poolArgmaxMax3x3S2(codes []uint8, y, x []float32, s1, s2 int) bool {
	n := len(codes)
	if !poolAVX2 || n < 8 || len(y) < n || len(x) < s1+s2+2*n+1 {
		return false
	}
	blocks := n / 8
	poolArgmaxMax3x3S2AVX2(&codes[0], &y[0], &x[0], s1, s2, blocks)
	if last := n - 8; 8*blocks < n {
		poolArgmaxMax3x3S2AVX2(&codes[last], &y[last], &x[2*last], s1, s2, 1)
	}
	return true
}
