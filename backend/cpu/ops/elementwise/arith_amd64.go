//go:build amd64 && !purego

package elementwise

// The float32 arithmetic loops of arith_amd64.s; n is a multiple of 8.
// The VS and SV forms take the scalar s; SV computes s op a[i].

//go:noescape
func addVVAVX2(dst, a, b *float32, n int)

//go:noescape
func subVVAVX2(dst, a, b *float32, n int)

//go:noescape
func mulVVAVX2(dst, a, b *float32, n int)

//go:noescape
func divVVAVX2(dst, a, b *float32, n int)

//go:noescape
func addVSAVX2(dst, a *float32, n int, s float32)

//go:noescape
func subVSAVX2(dst, a *float32, n int, s float32)

//go:noescape
func mulVSAVX2(dst, a *float32, n int, s float32)

//go:noescape
func divVSAVX2(dst, a *float32, n int, s float32)

//go:noescape
func subSVAVX2(dst, a *float32, n int, s float32)

//go:noescape
func divSVAVX2(dst, a *float32, n int, s float32)

// vvPrefix sets dst[i] = a[i] op b[i] over the longest prefix whose length
// is a multiple of 8 and returns how many elements it did (0 without
// AVX2, or for an op without a loop).
func vvPrefix(op arithOp, dst, a, b []float32) int {
	n := vecLen(len(a))
	if n == 0 {
		return 0
	}
	d, x, y := &dst[:n][0], &a[0], &b[:n][0]
	switch op {
	case opAdd:
		addVVAVX2(d, x, y, n)
	case opSub:
		subVVAVX2(d, x, y, n)
	case opMul:
		mulVVAVX2(d, x, y, n)
	case opDiv:
		divVVAVX2(d, x, y, n)
	default:
		return 0
	}
	return n
}

// scalarPrefix is vvPrefix for x[i] op s, or with sv for s op x[i] (the
// same loop where op commutes).
func scalarPrefix(op arithOp, sv bool, dst, x []float32, s float32) int {
	n := vecLen(len(x))
	if n == 0 {
		return 0
	}
	d, y := &dst[:n][0], &x[0]
	switch {
	case op == opAdd:
		addVSAVX2(d, y, n, s)
	case op == opMul:
		mulVSAVX2(d, y, n, s)
	case op == opSub && !sv:
		subVSAVX2(d, y, n, s)
	case op == opSub:
		subSVAVX2(d, y, n, s)
	case op == opDiv && !sv:
		divVSAVX2(d, y, n, s)
	case op == opDiv:
		divSVAVX2(d, y, n, s)
	default:
		return 0
	}
	return n
}
