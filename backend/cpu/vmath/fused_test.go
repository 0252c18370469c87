package vmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func fusedInputs(n int, rng *rand.Rand) []float32 {
	x := make([]float32, n)
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -9.5, 13, 0.5, -0.70710677}
	for i := range x {
		if i%17 == 3 {
			x[i] = specials[(i/17)%len(specials)]
		} else {
			x[i] = float32(rng.NormFloat64() * 3)
		}
	}
	return x
}

func sameBits(t *testing.T, what string, i int, x, got, want float32) {
	t.Helper()
	if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
		t.Fatalf("%s[%d] at x = %g: %g, want %g (the unfused ops)", what, i, x, got, want)
	}
}

// GeluErf32 gives the bits of Div, Erf32, Add, Mul, Mul run one after
// another, at every length (tails included), and the closed form to a few
// float32 ulps (of 1, times x, where 1 + erf cancels).
func TestGeluErf32MatchesTheUnfusedOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c1, c2, c3 := float32(math.Sqrt2), float32(1), float32(0.5)
	for _, n := range []int{0, 1, 5, 8, 13, 16, 31, 1000} {
		x := fusedInputs(n, rng)
		y, d, a := make([]float32, n), make([]float32, n), make([]float32, n)
		GeluErf32(y, d, a, x, c1, c2, c3)
		for i, v := range x {
			dv := v / c1
			e := []float32{dv}
			Erf32(e, e)
			av := e[0] + c2
			yv := (v * av) * c3
			sameBits(t, "d", i, v, d[i], dv)
			sameBits(t, "a", i, v, a[i], av)
			sameBits(t, "y", i, v, y[i], yv)
			if xv := float64(v); v == v && !math.IsInf(xv, 0) && v > -3 {
				want := 0.5 * xv * math.Erfc(-xv/math.Sqrt2)
				// 1 + erf cancels for negative x: an absolute error of
				// a few ulps of 1, times x.
				require.InDelta(t, want, float64(y[i]), 4e-7*math.Abs(want)+2e-7*math.Abs(xv), "gelu(%g)", v)
			}
		}
		if n >= 8 {
			yg, dg, ag := make([]float32, n), make([]float32, n), make([]float32, n)
			m := n &^ 7
			geluErfGo(yg[:m], dg[:m], ag[:m], x[:m], c1, c2, c3)
			for i := range m {
				sameBits(t, "y (pure Go)", i, x[i], yg[i], y[i])
				sameBits(t, "a (pure Go)", i, x[i], ag[i], a[i])
			}
		}
	}
}

// ErfGrad32 gives the bits of Mul, Neg, Exp32, Mul, Mul, and the float64
// derivative to a few ulps.
func TestErfGrad32MatchesTheUnfusedOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c := float32(2 / math.SqrtPi)
	for _, n := range []int{0, 1, 7, 8, 9, 24, 1001} {
		x := fusedInputs(n, rng)
		dy := fusedInputs(n, rng)
		dst := make([]float32, n)
		ErfGrad32(dst, dy, x, c)
		for i, v := range x {
			e := []float32{-(v * v)}
			Exp32(e, e)
			want := dy[i] * (c * e[0])
			sameBits(t, "dx", i, v, dst[i], want)
			if xv, g := float64(v), float64(dy[i]); v == v && dy[i] == dy[i] && !math.IsInf(xv, 0) && !math.IsInf(g, 0) && math.Abs(xv) < 9 {
				ref := g * 2 / math.SqrtPi * math.Exp(-float64(v*v))
				require.InDelta(t, ref, float64(dst[i]), 3e-7*math.Abs(ref)+1e-44, "x=%g dy=%g", v, g)
			}
		}
		if n >= 8 {
			m := n &^ 7
			g := make([]float32, n)
			erfGradGo(g[:m], dy[:m], x[:m], c)
			for i := range m {
				sameBits(t, "dx (pure Go)", i, x[i], g[i], dst[i])
			}
		}
	}
}

// GeluErfGrad32 gives the bits of Mul, Mul, Mul, ErfGrad32, Div and Add
// run one after another, and GELU's float64 derivative to a few ulps.
func TestGeluErfGrad32MatchesTheUnfusedOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	c1, c3, k := float32(math.Sqrt2), float32(0.5), float32(2/math.SqrtPi)
	for _, n := range []int{0, 1, 7, 8, 9, 40, 1003} {
		x := fusedInputs(n, rng)
		dy := fusedInputs(n, rng)
		d, a, y := make([]float32, n), make([]float32, n), make([]float32, n)
		GeluErf32(y, d, a, x, c1, 1, c3)
		dst := make([]float32, n)
		GeluErfGrad32(dst, dy, x, d, a, c1, c3, k)
		for i, v := range x {
			m := dy[i] * c3
			dx1 := m * a[i]
			da := m * x[i]
			dd := []float32{0}
			ErfGrad32(dd, []float32{da}, []float32{d[i]}, k)
			want := dx1 + dd[0]/c1
			sameBits(t, "dx", i, v, dst[i], want)
			if xv, g := float64(v), float64(dy[i]); v == v && dy[i] == dy[i] && !math.IsInf(xv, 0) && !math.IsInf(g, 0) && xv > -3 {
				ref := g * (0.5*math.Erfc(-xv/math.Sqrt2) + xv*math.Exp(-xv*xv/2)/math.Sqrt(2*math.Pi))
				require.InDelta(t, ref, float64(dst[i]), 1e-6*math.Abs(ref)+3e-7*math.Abs(g)*(1+math.Abs(xv)), "x=%g dy=%g", v, g)
			}
		}
		if n >= 8 {
			m := n &^ 7
			g := make([]float32, n)
			geluErfGradGo(g[:m], dy[:m], x[:m], d[:m], a[:m], c1, c3, k)
			for i := range m {
				sameBits(t, "dx (pure Go)", i, x[i], g[i], dst[i])
			}
		}
	}
}

// None of the slice functions allocates, tails included.
func TestNoAllocations(t *testing.T) {
	x := fusedInputs(21, rand.New(rand.NewPCG(1, 1)))
	y, d, a, g := make([]float32, 21), make([]float32, 21), make([]float32, 21), make([]float32, 21)
	for name, f := range map[string]func(){
		"Exp32":         func() { Exp32(y, x) },
		"ExpShift32":    func() { ExpShift32(y, x, 0.5) },
		"Erf32":         func() { Erf32(y, x) },
		"GeluErf32":     func() { GeluErf32(y, d, a, x, 1.4, 1, 0.5) },
		"ErfGrad32":     func() { ErfGrad32(g, y, x, 1.1) },
		"GeluErfGrad32": func() { GeluErfGrad32(g, y, x, d, a, 1.4, 0.5, 1.1) },
	} {
		require.Zero(t, testing.AllocsPerRun(10, f), name)
	}
}

// geluRef is GeluErf32's y, d, a and GeluErfGrad32's dst by the pure-Go
// loops, one element at a time: the bits GeluErfBias32 and GeluErfGradX32
// must give.
func geluRef(x, dy []float32, c1, c2, c3, k float32) (y, dst []float32) {
	y, dst = make([]float32, len(x)), make([]float32, len(x))
	d, a := make([]float32, len(x)), make([]float32, len(x))
	geluErfGo(y, d, a, x, c1, c2, c3)
	if dy != nil {
		geluErfGradGo(dst, dy, x, d, a, c1, c3, k)
	}
	return y, dst
}

// GeluErfBias32 and GeluErfGradX32 give the bits of the bias add, GeluErf32
// and GeluErfGrad32 run one after another: at every length from 0 to 40
// and at a few long ones (blocks of fusedBlock and their tails), with and
// without the bias and y, dst over dy; the dispatched form, the blocked
// one and the one-pass one (what a CPU without AVX-512 runs: the AVX2
// loop over multiples of 8, the blocked form over the rest).
func TestGeluErfBiasAndGradXMatchTheSeparateCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	c1, c2, c3, k := float32(math.Sqrt2), float32(1), float32(0.5), float32(2/math.Sqrt(math.Pi))
	var lengths []int
	for n := 0; n <= 40; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 255, 256, 257, 1000)
	type biasFn func(y, p, bias []float32, c1, c2, c3 float32)
	type gradFn func(dst, y, dy, x []float32, c1, c2, c3, k float32)
	forms := []struct {
		name string
		bias biasFn
		grad gradFn
	}{{"dispatched", GeluErfBias32, GeluErfGradX32}, {"blocked", geluErfBiasBlocks, geluErfGradXBlocks},
		{"one-pass", geluErfBias, geluErfGradX}}
	for _, f := range forms {
		for _, n := range lengths {
			x, dy, bias := fusedInputs(n, rng), fusedInputs(n, rng), fusedInputs(n, rng)
			for _, withBias := range []bool{false, true} {
				p := append([]float32(nil), x...)
				wantP := append([]float32(nil), x...)
				var b []float32
				if withBias {
					b = bias
					for i := range wantP {
						wantP[i] += bias[i]
					}
				}
				wantY, _ := geluRef(wantP, nil, c1, c2, c3, k)
				y := make([]float32, n)
				f.bias(y, p, b, c1, c2, c3)
				for i := range p {
					sameBits(t, f.name+" bias p", i, x[i], p[i], wantP[i])
					sameBits(t, f.name+" bias y", i, x[i], y[i], wantY[i])
				}
			}
			wantY, wantD := geluRef(x, dy, c1, c2, c3, k)
			y, dst := make([]float32, n), make([]float32, n)
			f.grad(dst, y, dy, x, c1, c2, c3, k)
			g := append([]float32(nil), dy...)
			f.grad(g, nil, g, x, c1, c2, c3, k) // no y, dst over dy
			for i := range x {
				sameBits(t, f.name+" gradX y", i, x[i], y[i], wantY[i])
				sameBits(t, f.name+" gradX dst", i, x[i], dst[i], wantD[i])
				sameBits(t, f.name+" gradX in place", i, x[i], g[i], wantD[i])
			}
		}
	}
	// -0 stays -0 without a bias (adding +0 would make it +0).
	p, y := []float32{float32(math.Copysign(0, -1))}, []float32{1}
	GeluErfBias32(y, p, nil, c1, c2, c3)
	require.True(t, math.Signbit(float64(p[0])), "p = -0 is left as it is")
}
