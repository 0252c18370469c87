package elementwise

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

// fastExp32 and fastErf32 run the float32 Exp and Erf loops on one element.
func fastExp32(x float32) float32 {
	d := []float32{x}
	expLoop32(d, d)
	return d[0]
}

func fastErf32(x float32) float32 {
	d := []float32{x}
	erfLoop32(d, d)
	return d[0]
}

// sweepFloat32 calls fn on about 2^22 float32 values spread over every bit
// pattern (both signs, subnormals, normals, Inf and NaN among them).
func sweepFloat32(fn func(x float32)) {
	const stride = 1021 // prime, so the low mantissa bits vary too
	for bits := uint64(0); bits < 1<<32; bits += stride {
		fn(math.Float32frombits(uint32(bits)))
	}
}

func TestFastExp32WithinOneULPOfCorrectlyRounded(t *testing.T) {
	worst, worstX := int64(0), float32(0)
	sweepFloat32(func(x float32) {
		want := float32(math.Exp(float64(x))) // float64 exp rounded once: the float32 reference
		if d := vmath.ULPDistance32(fastExp32(x), want); d > worst {
			worst, worstX = d, x
		}
	})
	assert.LessOrEqual(t, worst, int64(1), "worst at x = %g: %g, want %g", worstX, fastExp32(worstX), float32(math.Exp(float64(worstX))))

	inf := float32(math.Inf(1))
	assert.Equal(t, float32(1), fastExp32(0))
	assert.Equal(t, float32(1), fastExp32(float32(math.Copysign(0, -1))))
	assert.Equal(t, inf, fastExp32(inf))
	assert.Equal(t, float32(0), fastExp32(-inf))
	assert.Equal(t, inf, fastExp32(88.8))                                                                            // above ln(MaxFloat32)
	assert.LessOrEqual(t, vmath.ULPDistance32(float32(math.Exp(float64(float32(88.7)))), fastExp32(88.7)), int64(1)) // finite just below it
	assert.LessOrEqual(t, vmath.ULPDistance32(float32(math.Exp(-100)), fastExp32(-100)), int64(1))                   // a subnormal result
	assert.Less(t, fastExp32(-100), float32(1.2e-38))
	assert.Equal(t, float32(0), fastExp32(-104)) // below the smallest subnormal
	assert.True(t, math.IsNaN(float64(fastExp32(float32(math.NaN())))), "exp(NaN) is NaN")
}

func TestFastErf32WithinOneULPOfCorrectlyRounded(t *testing.T) {
	worst, worstX := int64(0), float32(0)
	sweepFloat32(func(x float32) {
		want := float32(math.Erf(float64(x)))
		if d := vmath.ULPDistance32(fastErf32(x), want); d > worst {
			worst, worstX = d, x
		}
	})
	assert.LessOrEqual(t, worst, int64(1), "worst at x = %g: %g, want %g", worstX, fastErf32(worstX), float32(math.Erf(float64(worstX))))

	// Dense around the interval edges of the piecewise fit, where a wrong
	// interval index or centre would show.
	for _, edge := range []float64{1, 1.5, 2, 2.5, 3, 3.5, 4} {
		for _, x := range []float64{edge - 1e-6, edge, edge + 1e-6} {
			for _, s := range []float64{1, -1} {
				v := float32(s * x)
				assert.LessOrEqual(t, vmath.ULPDistance32(fastErf32(v), float32(math.Erf(float64(v)))), int64(1), "x = %g", v)
			}
		}
	}
	inf := float32(math.Inf(1))
	assert.Equal(t, float32(1), fastErf32(inf))
	assert.Equal(t, float32(-1), fastErf32(-inf))
	assert.Equal(t, float32(0.8427008), fastErf32(1)) // erf(1) = 0.8427007929...
	negZero := fastErf32(float32(math.Copysign(0, -1)))
	assert.True(t, negZero == 0 && math.Signbit(float64(negZero)), "erf(-0) is -0")
	assert.Equal(t, float32(1e-30*2/math.SqrtPi), fastErf32(1e-30))
	assert.True(t, math.IsNaN(float64(fastErf32(float32(math.NaN())))), "erf(NaN) is NaN")
}

func TestGeluErfLoop32KeepsTheNegativeTail(t *testing.T) {
	// Down to -6 (below, 1 + erf cancels even in float64: the float64 form
	// gives 0 at -12 too).
	src := []float32{-6, -5, -3.5, -1.5, -1.4, -0.3, 0, 0.3, 1.5, 3.5, 6}
	dst := make([]float32, len(src))
	geluErfLoop32(dst, src)
	for i, v := range src {
		x := float64(v)
		want := float32(0.5 * x * math.Erfc(-x/math.Sqrt2)) // 0.5·x·(1+erf(x/√2)) without cancellation
		assert.LessOrEqual(t, vmath.ULPDistance32(dst[i], want), int64(1), "gelu(%g) = %g, want %g", v, dst[i], want)
	}
}

func TestFloat32ExpAndErfKernelsUseTheFastPathsAndFloat64StaysExact(t *testing.T) {
	x := []float64{-2.5, -0.7, 0, 0.3, 1.2, 3.9}
	exp64, err := run(t, "Exp", 13, nil, tensorOf(graph.Float64, x, len(x)))
	require.NoError(t, err)
	erf64, err := run(t, "Erf", 13, nil, tensorOf(graph.Float64, x, len(x)))
	require.NoError(t, err)
	for i, v := range x {
		assert.Equal(t, math.Exp(v), exp64.Data.([]float64)[i], "float64 Exp(%g) is math.Exp's", v)
		assert.Equal(t, math.Erf(v), erf64.Data.([]float64)[i], "float64 Erf(%g) is math.Erf's", v)
	}
	x32 := make([]float32, len(x))
	for i, v := range x {
		x32[i] = float32(v)
	}
	exp32, err := run(t, "Exp", 13, nil, tensorOf(graph.Float32, x32, len(x32)))
	require.NoError(t, err)
	erf32, err := run(t, "Erf", 13, nil, tensorOf(graph.Float32, x32, len(x32)))
	require.NoError(t, err)
	for i, v := range x32 {
		assert.Equal(t, fastExp32(v), exp32.Data.([]float32)[i])
		assert.Equal(t, fastErf32(v), erf32.Data.([]float32)[i])
	}
}

// BenchmarkFloat32Transcendentals compares the float32 loops with the
// float64 math functions rounded to float32 (the peer in the same run).
func BenchmarkFloat32Transcendentals(b *testing.B) {
	src := make([]float32, 1<<14)
	for i := range src {
		src[i] = float32(i-len(src)/2) / 2048
	}
	dst := make([]float32, len(src))
	for _, c := range []struct {
		name string
		loop func(dst, src []float32)
	}{
		{"exp/fast", expLoop32},
		{"exp/math", mapFloat(math.Exp).f32},
		{"erf/fast", erfLoop32},
		{"erf/math", mapFloat(math.Erf).f32},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				c.loop(dst, src)
			}
		})
	}
}
