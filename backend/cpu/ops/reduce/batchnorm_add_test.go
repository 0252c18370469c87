package reduce

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addRelu32 is the Add then Relu kernels' result on one element: the sum
// rounded to float32, negative sums +0 (-0 and NaN stay).
func addRelu32(y, r float32) float32 {
	s := y + r
	if s < 0 {
		return 0
	}
	return s
}

// TestBNRowApplyAddRelu checks the residual row map (the AVX2 loop and its
// Go tail) against the BatchNormalization map followed by the Add and Relu
// roundings, bit for bit, at every length to 70, with a NaN, sums that
// cancel to +0 and -0, and negative sums.
func TestBNRowApplyAddRelu(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	const mul, add = float32(-1.7), float32(0.3)
	for n := 0; n <= 70; n++ {
		x, r := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], r[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		if n > 4 {
			x[0] = float32(math.NaN())
			x[1] = 1
			r[1] = -(x[1]*mul + add) // the sum is +0
			x[2] = add / -mul
			r[2] = float32(math.Copysign(0, -1))
			r[3] = -100 // a negative sum
		}
		y := make([]float32, n)
		bnRowApplyAddRelu(y, x, r, mul, add, nil)
		for i := range x {
			bn := x[i]*mul + add
			want := addRelu32(bn, r[i])
			if want != want {
				assert.True(t, y[i] != y[i], "n=%d: y[%d] = %v, want NaN", n, i, y[i])
				continue
			}
			assert.Equal(t, math.Float32bits(want), math.Float32bits(y[i]), "n=%d: y[%d] = %v, want %v", n, i, y[i], want)
		}
	}
}

// TestBNTrainAddRelu checks the training and inference maps with a
// residual against the same maps without it followed by the Add and Relu
// roundings: bit for bit, on long rows (the per-channel vector loops),
// short rows (bnShortTask's blocks of channels, their column tails), and
// on one goroutine and two; the statistics are the residual-free ones.
func TestBNTrainAddRelu(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	shapes := []blocks{
		{outer: 3, r: 4, inner: 35}, {outer: 2, r: 5, inner: 67}, {outer: 3, r: 5, inner: 4},
		{outer: 2, r: 40, inner: 9}, {outer: 5, r: 301, inner: 4}, {outer: 2, r: 3, inner: 31},
		{outer: 7, r: 9, inner: 1},
	}
	for _, b := range shapes {
		size := b.outer * b.r * b.inner
		x, r := make([]float32, size), make([]float32, size)
		for i := range x {
			x[i], r[i] = float32(2+rng.NormFloat64()), float32(rng.NormFloat64())
		}
		scale, bias := make([]float64, b.r), make([]float64, b.r)
		for p := range scale {
			scale[p], bias[p] = rng.NormFloat64(), rng.NormFloat64()
		}
		const eps = 1e-5
		plain := make([]float32, size)
		mean, variance := bnTrain(x, plain, b, scale, bias, eps, false)
		want := make([]float32, size)
		for i := range want {
			want[i] = addRelu32(plain[i], r[i])
		}
		for _, procs := range []int{1, 2} {
			old := runtime.GOMAXPROCS(procs)
			y := make([]float32, size)
			m, v := make([]float64, b.r), make([]float64, b.r)
			bnTrainInto(x, r, y, b, scale, bias, eps, true, m, v)
			yi := make([]float32, size)
			bnApply(x, r, yi, b, scale, bias, mean, variance, eps, true)
			runtime.GOMAXPROCS(old)
			require.Equal(t, mean, m, "%v: batch mean", b)
			require.Equal(t, variance, v, "%v: batch variance", b)
			zeros := 0
			for k := range want {
				if !assert.Equal(t, math.Float32bits(want[k]), math.Float32bits(y[k]), "%v, %d goroutines: y[%d]", b, procs, k) ||
					!assert.Equal(t, math.Float32bits(want[k]), math.Float32bits(yi[k]), "%v, %d goroutines: inference y[%d]", b, procs, k) {
					return
				}
				if y[k] == 0 {
					zeros++
				}
			}
			assert.Greater(t, zeros, size/10, "%v: the Relu cut some sums", b)
			assert.Less(t, zeros, size*9/10, "%v: the Relu left some sums", b)
		}
	}
	// float64: the generic loop, against the same roundings in float64.
	b := blocks{outer: 2, r: 3, inner: 11}
	x, r := make([]float64, 66), make([]float64, 66)
	for i := range x {
		x[i], r[i] = rng.NormFloat64(), rng.NormFloat64()
	}
	scale, bias := []float64{1, 0.5, -2}, []float64{0.1, 0, -0.3}
	plain := make([]float64, 66)
	bnTrain(x, plain, b, scale, bias, 1e-5, false)
	y := make([]float64, 66)
	bnTrainInto(x, r, y, b, scale, bias, 1e-5, true, make([]float64, 3), make([]float64, 3))
	for k := range y {
		assert.Equal(t, math.Max(plain[k]+r[k], 0), y[k], "float64 y[%d]", k)
	}
}
