//go:build !amd64 || purego

package nn

// PoolVMax sets dst[i] = max(a[i], b[i]) (dst may be a; all of a's
// length) and reports whether any a[i] or b[i] is NaN, in which case the
// values written are unspecified. Zeros of both signs compare equal, so
// either may be written for a tie.
func PoolVMax(dst, a, b []float32) (nan bool) {
	dst, b = dst[:len(a)], b[:len(a)]
	for i, x := range a {
		y := b[i]
		nan = nan || x != x || y != y
		dst[i] = max(x, y)
	}
	return nan
}

// poolHMaxS2 has no vector loop here: it writes nothing.
func poolHMaxS2(dst, v []float32, k int) int { return 0 }

// PoolArgmax3x3S2 has no vector loop here: it sets nothing.
func PoolArgmax3x3S2(dst []int32, x []float32, s1, s2 int) (ok, nan bool) { return false, false }

// poolMax3S2Plane has no vector loop here: it computes nothing.
func poolMax3S2Plane(y, x, v []float32, iw, ow, colOff int, rows []span) bool { return false }

// PoolArgmaxScatter3x3S2 has no vector loop here: it adds nothing.
func PoolArgmaxScatter3x3S2(dx, dy, x []float32, s1, s2 int) (ok, nan bool) { return false, false }

// PoolScatterLoop reports whether PoolArgmaxScatter3x3S2 has a vector
// loop: not here.
func PoolScatterLoop() bool { return false }

// poolArgmaxMax3x3S2 has no vector loop here: it sets nothing.
func poolArgmaxMax3x3S2(codes []uint8, y, x []float32, s1, s2, pf int) bool { return false }

// poolAVX2: no vector loops here, so avgPlanes16AVX2 is never called.
const poolAVX2 = false

func avgPlanes16AVX2(y, x *float32, size int, n float64) { panic("no AVX2 loops") }
