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

// fusedBlock is how many elements GeluErfBias32 and GeluErfGradX32 take at
// a time where they run GeluErf32 and GeluErfGrad32 one after the other
// (without AVX2: the pure-Go loops; with AVX2 but not AVX-512, the tail
// past the last multiple of 8): the intermediates live in stack scratch,
// in L1. With AVX2 the multiples of 8 run one-pass loops
// (geluErfBiasAVX2, geluErfGradXAVX2) that keep d and a in registers and
// add the bias there too, as the AVX-512 loops do.
const fusedBlock = 256

// GeluErfBias32 is a bias add followed by GeluErf32's y, as a GEMM's
// epilogue applies them to a row: for i < len(p), p[i] = p[i] + bias[i]
// (rounded; p is left as it is when bias is nil) and y[i] = GeluErf32's
// y of the new p[i], in one pass without the intermediates d and a. y and
// bias (when not nil) must be at least as long as p.
func GeluErfBias32(y, p, bias []float32, c1, c2, c3 float32) {
	y = y[:len(p)]
	if bias != nil {
		bias = bias[:len(p)]
	}
	if hasAVX512 {
		wideGeluErfBias(y, p, bias, c1, c2, c3)
		return
	}
	geluErfBias(y, p, bias, c1, c2, c3)
}

func geluErfBiasBlocks(y, p, bias []float32, c1, c2, c3 float32) {
	var d, a [fusedBlock]float32
	for i := 0; i < len(p); i += fusedBlock {
		j := min(i+fusedBlock, len(p))
		if bias != nil {
			for k, b := range bias[i:j] {
				p[i+k] += b
			}
		}
		GeluErf32(y[i:j], d[:j-i], a[:j-i], p[i:j], c1, c2, c3)
	}
}

// GeluErfGradX32 is GeluErf32 followed by GeluErfGrad32 on its
// intermediates, in one pass without them: for i < len(x), with d = x/c1
// and a = erf(d) + c2 rounded as GeluErf32 rounds them, y[i] = (x[i]·a)·c3
// when y is not nil, and dst[i] = m·a + ((m·x[i])·(k·e^-(d·d)))/c1 with m
// = dy[i]·c3, the bits of the two calls. dst may be dy; dst, dy and y
// (when not nil) must be at least as long as x.
func GeluErfGradX32(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	dst, dy = dst[:len(x)], dy[:len(x)]
	if y != nil {
		y = y[:len(x)]
	}
	if hasAVX512 {
		wideGeluErfGradX(dst, y, dy, x, c1, c2, c3, k)
		return
	}
	geluErfGradX(dst, y, dy, x, c1, c2, c3, k)
}

func geluErfGradXBlocks(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	var ys, d, a [fusedBlock]float32
	for i := 0; i < len(x); i += fusedBlock {
		j := min(i+fusedBlock, len(x))
		yb := ys[:j-i]
		if y != nil {
			yb = y[i:j]
		}
		GeluErf32(yb, d[:j-i], a[:j-i], x[i:j], c1, c2, c3)
		GeluErfGrad32(dst[i:j], dy[i:j], x[i:j], d[:j-i], a[:j-i], c1, c3, k)
	}
}
