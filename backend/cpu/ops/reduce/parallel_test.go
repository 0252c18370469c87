package reduce

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParallelRowsVisitsEveryRowOnce(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	for _, c := range []struct{ rows, size int }{{0, 5}, {1, 1 << 20}, {7, 3}, {4160, 128}, {3, 1 << 16}} {
		seen := make([]int32, c.rows)
		var calls atomic.Int32
		parallelRows(c.rows, c.size, func(lo, hi int) {
			calls.Add(1)
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&seen[i], 1)
			}
		})
		for i, n := range seen {
			require.Equal(t, int32(1), n, "rows %d size %d: row %d", c.rows, c.size, i)
		}
		if c.rows*c.size >= 2*parallelGrain && c.rows >= 2 {
			assert.Equal(t, int32(2), calls.Load(), "rows %d size %d: split over 2 goroutines", c.rows, c.size)
		} else {
			assert.Equal(t, int32(1), calls.Load(), "rows %d size %d: one call", c.rows, c.size)
		}
	}
}

func TestLayerNormRowsParallelMatchesDefinition(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	const rows, size, eps = 600, 128, 1e-5
	x := make([]float32, rows*size)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37) * float64(1+i%7))
	}
	scale, bias := make([]float64, size), make([]float64, size)
	for i := range scale {
		scale[i], bias[i] = 1+float64(i)/size, float64(i%5)-2
	}
	y := make([]float32, len(x))
	mean, inv := make([]float64, rows), make([]float64, rows)
	layerNormRows(x, y, rows, size, scale, bias, eps, mean, inv)
	for j := 0; j < rows; j++ {
		var m, v float64
		for _, e := range x[j*size : (j+1)*size] {
			m += float64(e)
		}
		m /= size
		for _, e := range x[j*size : (j+1)*size] {
			v += (float64(e) - m) * (float64(e) - m)
		}
		is := 1 / math.Sqrt(v/size+eps)
		require.InDelta(t, m, mean[j], 1e-9, "mean of row %d", j)
		require.InDelta(t, is, inv[j], 1e-9*is, "invstd of row %d", j)
		for i := 0; i < size; i++ {
			want := (float64(x[j*size+i])-m)*is*scale[i] + bias[i]
			require.InDelta(t, want, float64(y[j*size+i]), 1e-5*(1+math.Abs(want)), "y[%d][%d]", j, i)
		}
	}
}
