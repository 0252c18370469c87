package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayerNormRowsOddSizes checks layerNormRows on float64 and float32 data
// against a two-pass float64 evaluation of (x − mean)/sqrt(var + eps)·scale
// + bias, for row lengths 1, 7, 128 and 257 (the unrolled loops'
// remainders), with and without bias, for centred rows and rows whose mean
// is 300 standard deviations from 0 (where a naive one-pass variance would
// fail), with rows enough that both goroutines work; through the assembly
// row kernels and through their Go fallbacks.
func TestLayerNormRowsOddSizes(t *testing.T) {
	forEachRowPath(t, testLayerNormRowsOddSizes)
}

func testLayerNormRowsOddSizes(t *testing.T) {
	const eps = 1e-5
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	for _, size := range []int{1, 7, 128, 257} {
		for _, offset := range []float64{0, 300} {
			t.Run(fmt.Sprintf("size%d_offset%g", size, offset), func(t *testing.T) {
				rows := max(300, 4*parallelGrain/size)
				rng := rand.New(rand.NewPCG(uint64(size), 5))
				x := make([]float64, rows*size)
				for i := range x {
					x[i] = float64(float32(offset + rng.NormFloat64()))
				}
				scale, bias := make([]float64, size), make([]float64, size)
				for i := range scale {
					scale[i], bias[i] = rng.NormFloat64(), rng.NormFloat64()
				}
				wantY, wantYNoBias := make([]float64, len(x)), make([]float64, len(x))
				wantMean, wantInv := make([]float64, rows), make([]float64, rows)
				for j := 0; j < rows; j++ {
					r := x[j*size : (j+1)*size]
					var m, v float64
					for _, e := range r {
						m += e
					}
					m /= float64(size)
					for _, e := range r {
						v += (e - m) * (e - m)
					}
					inv := 1 / math.Sqrt(v/float64(size)+eps)
					wantMean[j], wantInv[j] = m, inv
					for i, e := range r {
						wantYNoBias[j*size+i] = (e - m) * inv * scale[i]
						wantY[j*size+i] = wantYNoBias[j*size+i] + bias[i]
					}
				}
				check := func(name string, got func(i int) float64, want []float64, tol float64) {
					t.Helper()
					for i := range want {
						if math.Abs(got(i)-want[i]) > tol*(1+math.Abs(want[i])) || math.IsNaN(got(i)) {
							require.InDelta(t, want[i], got(i), tol*(1+math.Abs(want[i])), "%s[%d]", name, i)
						}
					}
				}
				for _, b := range [][]float64{bias, nil} {
					want := wantY
					if b == nil {
						want = wantYNoBias
					}
					y64, mean, inv := make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
					layerNormRows(x, y64, rows, size, scale, b, eps, mean, inv)
					check("float64 y", func(i int) float64 { return y64[i] }, want, 1e-10)
					check("mean", func(i int) float64 { return mean[i] }, wantMean, 1e-12)
					check("invstd", func(i int) float64 { return inv[i] }, wantInv, 1e-9)

					x32, y32 := make([]float32, len(x)), make([]float32, len(x))
					for i := range x {
						x32[i] = float32(x[i])
					}
					layerNormRows(x32, y32, rows, size, scale, b, eps, mean, inv)
					check("float32 y", func(i int) float64 { return float64(y32[i]) }, want, 1e-6)
				}
			})
		}
	}
}
