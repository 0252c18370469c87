package vmath

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sweep returns about 2^22 float32 values spread over every bit pattern
// (both signs, subnormals, normals, ±Inf and NaNs), plus the special values
// and the boundaries of the ranges the code switches at.
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
	return xs
}

func checkWithinOneULP(t *testing.T, name string, got []float32, xs []float32, ref func(float64) float64) {
	t.Helper()
	worst, at := int64(0), 0
	for i, x := range xs {
		if d := ULPDistance32(got[i], float32(ref(float64(x)))); d > worst {
			worst, at = d, i
		}
	}
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
	assert.Equal(t, float32(math.Exp(-100)), one(-100))                     // subnormal result
	assert.Equal(t, float32(0), one(-104))                                  // below half the smallest subnormal
	assert.Equal(t, float32(math.Exp(1e-40)), one(1e-40))                   // subnormal input
	assert.Equal(t, float32(math.Exp(float64(float32(-87.5)))), one(-87.5)) // near the normal limit
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
	assert.True(t, math.IsNaN(float64(one(float32(math.NaN())))))
	assert.LessOrEqual(t, ULPDistance32(one(1e-40), float32(math.Erf(float64(float32(1e-40))))), int64(1), "subnormal input")
}

// The assembly and the pure-Go loop give the same bits, so results do not
// depend on the machine or on where a slice's tail falls.
func TestAssemblyMatchesPureGoBitForBit(t *testing.T) {
	xs := sweep()
	a, b := make([]float32, len(xs)), make([]float32, len(xs))
	n := len(xs) &^ 7
	sa := expShift(a[:n], xs[:n], 0.75)
	sb := expShiftGo(b[:n], xs[:n], 0.75)
	for i := range n {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("exp at x = %g: assembly %g, Go %g", xs[i], a[i], b[i])
		}
	}
	if !(math.IsNaN(sa) && math.IsNaN(sb)) {
		assert.InEpsilon(t, sb, sa, 1e-12)
	}
	erf(a[:n], xs[:n])
	erfGo(b[:n], xs[:n])
	for i := range n {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("erf at x = %g: assembly %g, Go %g", xs[i], a[i], b[i])
		}
	}
}

func TestExpShift32SumsTheUnroundedExponentials(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 17, 100} {
		src := make([]float32, n)
		want := 0.0
		for i := range src {
			src[i] = float32(i%13)*0.37 - 2
			want += math.Exp(float64(src[i]) - 1.25)
		}
		dst := make([]float32, n)
		got := ExpShift32(dst, src, 1.25)
		require.InEpsilon(t, want, got, 1e-10, "n=%d", n)
		for i, v := range src {
			require.LessOrEqual(t, ULPDistance32(dst[i], float32(math.Exp(float64(v)-1.25))), int64(1), "n=%d i=%d", n, i)
		}
	}
}
