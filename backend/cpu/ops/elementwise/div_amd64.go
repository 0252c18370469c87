//go:build amd64 && !purego

package elementwise

// divVVAVX2 and divVSAVX2 are in div_amd64.s; n is a multiple of 8.
//
//go:noescape
func divVVAVX2(dst, a, b *float32, n int)

//go:noescape
func divVSAVX2(dst, a *float32, n int, b float32)

// divVVVecPrefix sets dst[i] = a[i] / b[i] over the longest prefix whose
// length is a multiple of 8 (VDIVPS: IEEE division, so the bits of the
// scalar loop) and returns how many elements it did.
func divVVVecPrefix(dst, a, b []float32) int {
	n := len(a) &^ 7
	if !reluVec || n == 0 {
		return 0
	}
	divVVAVX2(&dst[:n][0], &a[0], &b[:n][0], n)
	return n
}

// divVSVecPrefix is divVVVecPrefix for a scalar divisor.
func divVSVecPrefix(dst, a []float32, b float32) int {
	n := len(a) &^ 7
	if !reluVec || n == 0 {
		return 0
	}
	divVSAVX2(&dst[:n][0], &a[0], n, b)
	return n
}
