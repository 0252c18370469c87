//go:build amd64 && !purego

package elementwise

// divVVAVX2 and divVSAVX2 are in div_amd64.s (dst[i] = a[i] / b[i], and
// a[i] / b); n is a multiple of 8. arith_amd64.go dispatches to them.
//
//go:noescape
func divVVAVX2(dst, a, b *float32, n int)

//go:noescape
func divVSAVX2(dst, a *float32, n int, b float32)
