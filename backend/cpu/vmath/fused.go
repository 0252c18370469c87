package vmath

// GeluErf32 is the erf form of GELU as the graph writes it, with its two
// intermediates: for i < len(x), d[i] = x[i]/c1, a[i] = erf(d[i]) + c2 and
// y[i] = (x[i]·a[i])·c3, each operation rounded to float32 (so the bits
// are those of Div, Erf32, Add, Mul, Mul run one after another), in one
// pass over memory. y, d and a must be at least as long as x.
func GeluErf32(y, d, a, x []float32, c1, c2, c3 float32) {
	y, d, a = y[:len(x)], d[:len(x)], a[:len(x)]
	if hasAVX512 {
		wideGeluErf(y, d, a, x, c1, c2, c3)
		return
	}
	n := len(x) &^ (block - 1)
	if n > 0 {
		geluErf(y[:n], d[:n], a[:n], x[:n], c1, c2, c3)
	}
	if r := len(x) - n; r > 0 {
		var xb, yb, db, ab [block]float32
		copy(xb[:], x[n:])
		geluErf(yb[:], db[:], ab[:], xb[:], c1, c2, c3)
		copy(y[n:], yb[:r])
		copy(d[n:], db[:r])
		copy(a[n:], ab[:r])
	}
}

// ErfGrad32 is erf's derivative chain as the graph writes it: for i <
// len(x), dst[i] = dy[i]·(c·e^-(x[i]·x[i])), each operation rounded to
// float32 (the bits of Mul, Neg, Exp32, Mul, Mul), in one pass. dst and dy
// must be at least as long as x.
func ErfGrad32(dst, dy, x []float32, c float32) {
	dst, dy = dst[:len(x)], dy[:len(x)]
	if hasAVX512 {
		wideErfGrad(dst, dy, x, c)
		return
	}
	n := len(x) &^ (block - 1)
	if n > 0 {
		erfGrad(dst[:n], dy[:n], x[:n], c)
	}
	if r := len(x) - n; r > 0 {
		var xb, gb, ob [block]float32
		copy(xb[:], x[n:])
		copy(gb[:], dy[n:])
		erfGrad(ob[:], gb[:], xb[:], c)
		copy(dst[n:], ob[:r])
	}
}

func geluErfGo(y, d, a, x []float32, c1, c2, c3 float32) {
	y, d, a = y[:len(x)], d[:len(x)], a[:len(x)]
	for i, v := range x {
		di := v / c1
		d[i] = di
		ai := erfOne32(di) + c2
		a[i] = ai
		y[i] = (v * ai) * c3
	}
}

func erfGradGo(dst, dy, x []float32, c float32) {
	dst, dy = dst[:len(x)], dy[:len(x)]
	for i, v := range x {
		e := expCore(-(v * v), 0, false)
		dst[i] = dy[i] * (c * e)
	}
}

// GeluErfGrad32 is the gradient of GeluErf32's y as the graph writes it:
// for i < len(dst), with m = dy[i]·c3,
//
//	dst[i] = m·a[i] + ((m·x[i])·(k·e^-(d[i]·d[i])))/c1
//
// each operation rounded to float32 (the bits of the unfused Mul, Mul, Mul,
// ErfGrad32, Div and Add), in one pass. dy, x, d and a must be at least as
// long as dst.
func GeluErfGrad32(dst, dy, x, d, a []float32, c1, c3, k float32) {
	dy, x, d, a = dy[:len(dst)], x[:len(dst)], d[:len(dst)], a[:len(dst)]
	if hasAVX512 {
		wideGeluErfGrad(dst, dy, x, d, a, c1, c3, k)
		return
	}
	n := len(dst) &^ (block - 1)
	if n > 0 {
		geluErfGrad(dst[:n], dy[:n], x[:n], d[:n], a[:n], c1, c3, k)
	}
	if r := len(dst) - n; r > 0 {
		var ob, gb, xb, db, ab [block]float32
		copy(gb[:], dy[n:])
		copy(xb[:], x[n:])
		copy(db[:], d[n:])
		copy(ab[:], a[n:])
		geluErfGrad(ob[:], gb[:], xb[:], db[:], ab[:], c1, c3, k)
		copy(dst[n:], ob[:r])
	}
}

func geluErfGradGo(dst, dy, x, d, a []float32, c1, c3, k float32) {
	dy, x, d, a = dy[:len(dst)], x[:len(dst)], d[:len(dst)], a[:len(dst)]
	for i := range dst {
		m := dy[i] * c3
		e := expCore(-(d[i] * d[i]), 0, false)
		dd := (m * x[i]) * (k * e)
		dst[i] = float32(m*a[i]) + float32(dd/c1)
	}
}
