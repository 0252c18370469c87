package vmath

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sweep returns about 2^22 float32 values spread over every bit pattern
// (both signs, subnormals, normals, ±Inf and NaNs), plus the special values,
// and every float32 in small windows around the points where the code
// switches range or interval.
func sweep() []float32 {
	var xs []float32
	const stride = 1021 // prime, so the low mantissa bits vary too
	for bits := uint64(0); bits < 1<<32; bits += stride {
		xs = append(xs, math.Float32frombits(uint32(bits)))
	}
	inf := float32(math.Inf(1))
	for _, v := range []float32{0, 1, 0.5, 1.5, 2, 3.5, 4, 88.72, 88.73, 89, -87.33, -103.97, -104, -110, 100, 1e-45, 1e-40, math.MaxFloat32, math.SmallestNonzeroFloat32, inf, float32(math.NaN())} {
		xs = append(xs, v, -v, math.Nextafter32(v, inf), math.Nextafter32(v, -inf))
	}
	// Erf's range switch (0.5), interval edges (0.5 + 7i/16), its top (4)
	// and where erf rounds to 1 (3.92); exp's overflow (88.72), normal
	// limit (-87.34), underflow to 0 (-103.97) and the reduction's half
	// steps (±ln2/2).
	edges := []float64{0.5, 3.92, 4, 88.7228, -87.3365, -103.972, math.Ln2 / 2, -math.Ln2 / 2, 1.5 * math.Ln2}
	for i := 1; i < 8; i++ {
		edges = append(edges, 0.5+7*float64(i)/16)
	}
	for _, e := range edges {
		for _, s := range []float64{1, -1} {
			c := math.Float32bits(float32(s * e))
			for d := uint32(0); d < 1<<13; d++ {
				xs = append(xs, math.Float32frombits(c-1<<12+d))
			}
		}
	}
	return xs
}

func maxULP(got, xs []float32, ref func(float64) float64) (worst int64, at int) {
	for i, x := range xs {
		if d := ULPDistance32(got[i], float32(ref(float64(x)))); d > worst {
			worst, at = d, i
		}
	}
	return worst, at
}

func checkWithinOneULP(t *testing.T, name string, got []float32, xs []float32, ref func(float64) float64) {
	t.Helper()
	worst, at := maxULP(got, xs, ref)
	assert.LessOrEqual(t, worst, int64(1), "%s: worst at x = %g: got %g, want %g", name, xs[at], got[at], float32(ref(float64(xs[at]))))
	t.Logf("%s: max error %d ulp over %d values", name, worst, len(xs))
}

func TestExp32WithinOneULPOverTheFloat32Range(t *testing.T) {
	xs := sweep()
	got := make([]float32, len(xs))
	Exp32(got, xs)
	checkWithinOneULP(t, "Exp32", got, xs, math.Exp)

	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	one := func(x float32) float32 { d := []float32{x}; Exp32(d, d); return d[0] }
	assert.Equal(t, float32(1), one(0))
	assert.Equal(t, float32(1), one(negZero))
	assert.Equal(t, inf, one(inf))
	assert.Equal(t, float32(0), one(-inf))
	assert.True(t, math.IsNaN(float64(one(float32(math.NaN())))))
	assert.Equal(t, inf, one(88.73))                                        // above ln(MaxFloat32)
	assert.Equal(t, float32(math.Exp(-100)), one(-100))                     // subnormal result (gradual underflow, not flushed)
	assert.Equal(t, float32(0), one(-104))                                  // below half the smallest subnormal
	assert.Equal(t, float32(math.Exp(1e-40)), one(1e-40))                   // subnormal input
	assert.Equal(t, float32(math.Exp(float64(float32(-87.5)))), one(-87.5)) // near the normal limit
	assert.Equal(t, float32(math.SmallestNonzeroFloat32), one(-103.9))      // e^-103.9 = 8.1e-46 > 2^-150
}

func TestErf32WithinOneULPOverTheFloat32Range(t *testing.T) {
	xs := sweep()
	got := make([]float32, len(xs))
	Erf32(got, xs)
	checkWithinOneULP(t, "Erf32", got, xs, math.Erf)

	negZero := float32(math.Copysign(0, -1))
	one := func(x float32) float32 { d := []float32{x}; Erf32(d, d); return d[0] }
	assert.Equal(t, math.Float32bits(negZero), math.Float32bits(one(negZero)), "erf(-0) is -0")
	assert.Equal(t, float32(1), one(float32(math.Inf(1))))
	assert.Equal(t, float32(-1), one(float32(math.Inf(-1))))
	assert.Equal(t, float32(1), one(4))
	assert.Equal(t, float32(-1), one(-1e30))
	assert.True(t, math.IsNaN(float64(one(float32(math.NaN())))))
	sub := float32(1e-40)
	assert.Equal(t, float32(math.Erf(float64(sub))), one(sub), "subnormal input")
	assert.Equal(t, float32(math.Erf(float64(-sub))), one(-sub), "subnormal input")
}

// The assembly and the pure-Go loop give the same bits, so results do not
// depend on the machine or on where a slice's tail falls.
func TestAssemblyMatchesPureGoBitForBit(t *testing.T) {
	xs := sweep()
	a, b := make([]float32, len(xs)), make([]float32, len(xs))
	n := len(xs) &^ 7
	same := func(what string, x, p, q float32) {
		if math.Float32bits(p) != math.Float32bits(q) && !(p != p && q != q) {
			t.Fatalf("%s at x = %g: assembly %g, Go %g", what, x, p, q)
		}
	}
	exp(a[:n], xs[:n])
	expGo(b[:n], xs[:n])
	for i := range n {
		same("exp", xs[i], a[i], b[i])
	}
	for _, m := range [][2]float32{{0.75, 0}, {-3.25, 1e-9}, {88, -2e-7}} {
		sa := expShiftAll(a, xs, m[0], m[1], nil, nil) // any length: the masked tail too
		sb := expShiftGo(b, xs, m[0], m[1])
		for i := range xs {
			same("expShift", xs[i], a[i], b[i])
		}
		if !(math.IsNaN(sa) && math.IsNaN(sb)) {
			assert.InEpsilon(t, sb, sa, 1e-12)
		}
	}
	erf(a[:n], xs[:n])
	erfGo(b[:n], xs[:n])
	for i := range n {
		same("erf", xs[i], a[i], b[i])
	}
}

// fma32 is the correctly rounded a·b+c: checked against exact big.Float
// arithmetic rounded once to float32, on random operands of every scale
// and on cases built to sit on or next to a rounding midpoint.
func TestFMA32RoundsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(400).Mul(big.NewFloat(float64(a)).SetPrec(400), big.NewFloat(float64(b)).SetPrec(400))
		s := new(big.Float).SetPrec(400).Add(p, big.NewFloat(float64(c)).SetPrec(400))
		f, _ := s.Float32()
		return f
	}
	rnd := func() float32 {
		return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(80)-40)))
	}
	for i := 0; i < 200000; i++ {
		a, b, c := rnd(), rnd(), rnd()
		if i%4 == 1 { // c cancels most of a·b: the result needs the low product bits
			c = -float32(float64(a) * float64(b))
		}
		if i%4 == 2 { // a·b + c near a float32 midpoint
			c = float32(float64(a)*float64(b)) * (1 + 0x1p-24)
		}
		want := exact(a, b, c)
		require.Equal(t, math.Float32bits(want), math.Float32bits(fma32(a, b, c)), "fma32(%g, %g, %g)", a, b, c)
	}
	// a·b exactly halfway between two float32 (1 + 2^-24 = (1+2^-12)² - 2^-24·...):
	// x = 1+2^-12, x·x = 1 + 2^-11 + 2^-24, tie broken by c = ±2^-60.
	x := float32(1 + 0x1p-12)
	assert.Equal(t, exact(x, x, 0x1p-60), fma32(x, x, 0x1p-60))
	assert.Equal(t, exact(x, x, -0x1p-60), fma32(x, x, -0x1p-60))
	assert.Equal(t, exact(x, x, 0), fma32(x, x, 0))
	assert.True(t, math.IsNaN(float64(fma32(float32(math.NaN()), 1, 1))))
	assert.Equal(t, float32(math.Inf(1)), fma32(1, 1, float32(math.Inf(1))))
	assert.Equal(t, float32(math.Inf(1)), fma32(math.MaxFloat32, 2, 0))
}

func TestExpShift32SumsTheResults(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 17, 100} {
		src := make([]float32, n)
		want := 0.0
		for i := range src {
			src[i] = float32(i%13)*0.37 - 2
			want += math.Exp(float64(src[i]) - 1.25)
		}
		dst := make([]float32, n)
		got := ExpShift32(dst, src, 1.25)
		require.InEpsilon(t, want, got, 1e-7, "n=%d", n)
		sum := 0.0
		for i, v := range src {
			require.LessOrEqual(t, ULPDistance32(dst[i], float32(math.Exp(float64(v)-1.25))), int64(1), "n=%d i=%d", n, i)
			sum += float64(dst[i])
		}
		require.InEpsilon(t, sum, got, 1e-14, "n=%d: the sum of the float32 results", n)
	}
}

// The difference x - m is exact (a two-sum, m in two parts), so e^(x-m)
// stays within 1 ulp even where x - m is not a float32 and far from 0.
func TestExpShift32TakesTheDifferenceExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, m := range []float64{0, 1, -1.0000001, 3.3, 87.9, -50.123456789, 1e-9, 30 + 1e-7} {
		src := make([]float32, 1003)
		for i := range src {
			src[i] = float32(m + rng.Float64()*200 - 150)
		}
		src[0] = float32(m)
		dst := make([]float32, len(src))
		sum := ExpShift32(dst, src, m)
		want := 0.0
		for i, v := range src {
			e := math.Exp(float64(v) - m)
			want += e
			require.LessOrEqual(t, ULPDistance32(dst[i], float32(e)), int64(1), "m=%g x=%g: %g, want %g", m, v, dst[i], float32(e))
		}
		if !math.IsInf(want, 0) {
			require.InEpsilon(t, want, sum, 1e-6, "m=%g", m)
		}
	}
	inf := float32(math.Inf(1))
	dst := make([]float32, 3)
	s := ExpShift32(dst, []float32{-inf, 5, inf}, math.Inf(1))
	assert.Equal(t, float32(0), dst[0])
	assert.Equal(t, float32(0), dst[1])
	assert.True(t, math.IsNaN(float64(dst[2])), "e^(Inf-Inf) is NaN")
	assert.True(t, math.IsNaN(s))
	s = ExpShift32(dst, []float32{-inf, 0, 1}, 0)
	assert.Equal(t, []float32{0, 1, float32(math.E)}, dst)
	assert.InEpsilon(t, 1+float64(float32(math.E)), s, 1e-15)
	s = ExpShift32(dst[:1], []float32{5}, math.Inf(-1))
	assert.Equal(t, inf, dst[0])
	assert.True(t, math.IsInf(s, 1), "padding lanes of the tail do not turn the sum into NaN")
}

func TestErf64For32(t *testing.T) {
	for x := -5.0; x <= 5; x += 0.001 {
		if math.Abs(x) < 4 {
			require.InDelta(t, math.Erf(x), Erf64For32(x), 2e-9*math.Abs(math.Erf(x)), "x=%g", x)
		} else { // saturated: 1 - erf(4) = 1.5e-8 is below half a float32 ulp of 1
			require.Equal(t, float32(math.Erf(x)), float32(Erf64For32(x)), "x=%g", x)
		}
	}
	assert.True(t, math.Signbit(Erf64For32(math.Copysign(0, -1))))
	assert.Equal(t, -1.0, Erf64For32(math.Inf(-1)))
	assert.True(t, math.IsNaN(Erf64For32(math.NaN())))
}

// Every short length (the masked tail of the assembly alone or after whole
// blocks) gives the pure-Go bits, writes nothing past len(src), and sums
// only the results.
func TestExpShift32ShortLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for n := 1; n <= 24; n++ {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 4)
		}
		got := make([]float32, n+8)
		for i := range got {
			got[i] = -7 // sentinels past the end
		}
		want := make([]float32, n)
		s := ExpShift32(got[:n], src, 0.25)
		sg := expShiftGo(want, src, 0.25, 0)
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "n=%d [%d]", n, i)
		}
		for i := n; i < len(got); i++ {
			require.Equal(t, float32(-7), got[i], "n=%d: [%d] past the end was written", n, i)
		}
		require.InEpsilon(t, sg, s, 1e-15, "n=%d", n)
	}
}
