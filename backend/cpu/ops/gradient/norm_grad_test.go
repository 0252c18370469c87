package gradient

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randomFloat64s(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

// withProcs runs fn with GOMAXPROCS set to p.
func withProcs(p int, fn func()) {
	old := runtime.GOMAXPROCS(p)
	defer runtime.GOMAXPROCS(old)
	fn()
}

// TestLayerNormRowsBackwardMatchesDefinition checks the blocked, parallel
// LayerNorm backward against its definition (computed here row by row,
// independently of normRowsBackward) on a shape large enough to be split
// over the cores, and that the result does not depend on GOMAXPROCS.
func TestLayerNormRowsBackwardMatchesDefinition(t *testing.T) {
	const rows, size, eps = 300, 96, 1e-5
	rng := rand.New(rand.NewPCG(3, 4))
	x, dy, scale := randomFloat64s(rng, rows*size), randomFloat64s(rng, rows*size), randomFloat64s(rng, size)

	wantDx := make([]float64, rows*size)
	wantDs, wantDb := make([]float64, size), make([]float64, size)
	for j := 0; j < rows; j++ {
		xr, gr := x[j*size:(j+1)*size], dy[j*size:(j+1)*size]
		var m, v float64
		for _, e := range xr {
			m += e
		}
		m /= size
		for _, e := range xr {
			v += (e - m) * (e - m)
		}
		inv := 1 / math.Sqrt(v/size+eps)
		// dx_i = inv·(g_i − mean(g) − x̂_i·mean(g·x̂)), g = dy·scale.
		var mg, mgx float64
		for i, e := range xr {
			g := gr[i] * scale[i]
			mg += g / size
			mgx += g * (e - m) * inv / size
		}
		for i, e := range xr {
			xh := (e - m) * inv
			wantDx[j*size+i] = inv * (gr[i]*scale[i] - mg - xh*mgx)
			wantDs[i] += gr[i] * xh
			wantDb[i] += gr[i]
		}
	}

	run := func() (dx, ds, db []float64) {
		dx, ds, db = make([]float64, rows*size), make([]float64, size), make([]float64, size)
		layerNormRowsBackward(dy, x, dx, rows, size, eps, scale, ds, db)
		return dx, ds, db
	}
	var dx1, ds1, db1, dx2, ds2, db2 []float64
	withProcs(1, func() { dx1, ds1, db1 = run() })
	withProcs(2, func() { dx2, ds2, db2 = run() })
	withProcs(2, func() {
		require.Equal(t, 2, gradWorkers((rows+layerNormRowsBlock-1)/layerNormRowsBlock, 8*layerNormRowsBlock*size), "the shape is split over 2 goroutines")
	})
	assert.InDeltaSlice(t, wantDx, dx2, 1e-12)
	assert.InDeltaSlice(t, wantDs, ds2, 1e-10)
	assert.InDeltaSlice(t, wantDb, db2, 1e-10)
	assert.Equal(t, dx1, dx2, "dx is the same with 1 and 2 goroutines")
	assert.Equal(t, ds1, ds2, "dscale is the same with 1 and 2 goroutines")
	assert.Equal(t, db1, db2, "dbias is the same with 1 and 2 goroutines")

	// Float32 data takes the same path (rounded once at the end).
	x32, dy32, dx32 := make([]float32, len(x)), make([]float32, len(dy)), make([]float32, len(x))
	for i := range x {
		x32[i], dy32[i] = float32(x[i]), float32(dy[i])
	}
	ds32, db32 := make([]float64, size), make([]float64, size)
	layerNormRowsBackward(dy32, x32, dx32, rows, size, eps, scale, ds32, db32)
	for i := range dx32 {
		require.InDelta(t, wantDx[i], float64(dx32[i]), 1e-4*(1+math.Abs(wantDx[i])), "dx[%d]", i)
	}
}

// TestSoftmaxBackwardParallelMatchesDefinition: dx = y·(dy − Σ dy·y) along
// the softmax axis, dx = dy − exp(y)·Σ dy for log-softmax, on a shape split
// over the cores, equal with 1 and 2 goroutines.
func TestSoftmaxBackwardParallelMatchesDefinition(t *testing.T) {
	withProcs(2, func() {
		require.Equal(t, 2, gradWorkers((700+63)/64, 4*64*65), "the first shape is split over 2 goroutines")
	})
	for _, b := range []layout{{outer: 700, r: 65, inner: 1}, {outer: 40, r: 9, inner: 70}} {
		for _, log := range []bool{false, true} {
			rng := rand.New(rand.NewPCG(5, 6))
			n := b.outer * b.r * b.inner
			dy, y := randomFloat64s(rng, n), make([]float64, n)
			for i := range y {
				y[i] = rng.Float64()
				if log {
					y[i] = math.Log(y[i])
				}
			}
			want := make([]float64, n)
			for o := 0; o < b.outer; o++ {
				for i := 0; i < b.inner; i++ {
					at := func(k int) int { return (o*b.r+k)*b.inner + i }
					var s float64
					for k := 0; k < b.r; k++ {
						if log {
							s += dy[at(k)]
						} else {
							s += dy[at(k)] * y[at(k)]
						}
					}
					for k := 0; k < b.r; k++ {
						if log {
							want[at(k)] = dy[at(k)] - math.Exp(y[at(k)])*s
						} else {
							want[at(k)] = y[at(k)] * (dy[at(k)] - s)
						}
					}
				}
			}
			dx1, dx2 := make([]float64, n), make([]float64, n)
			withProcs(1, func() { softmaxBackward(log, dy, y, dx1, b) })
			withProcs(2, func() { softmaxBackward(log, dy, y, dx2, b) })
			assert.InDeltaSlice(t, want, dx2, 1e-12, "layout %+v log %v", b, log)
			assert.Equal(t, dx1, dx2, "layout %+v log %v: same with 1 and 2 goroutines", b, log)
		}
	}
}

// TestBatchNormBackwardMatchesDefinition checks training-mode bnBackward
// (one pass for the batch statistics and sums, channels split over the
// goroutines) against PyTorch's formula evaluated here with two-pass
// statistics: dX = scale·invstd·(dy − mean(dy) − x̂·mean(dy·x̂)),
// dscale = Σdy·x̂, dB = Σdy. One channel sits far from zero (mean 1000,
// standard deviation 0.01), where a one-pass variance without a shift
// would lose every digit.
func TestBatchNormBackwardMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const n, c, inner = 6, 5, 4000
	x := make([]float32, n*c*inner)
	dy := make([]float32, n*c*inner)
	for i := range x {
		ch := (i / inner) % c
		v := rng.NormFloat64()
		if ch == 3 {
			v = 1000 + 0.01*v
		}
		x[i] = float32(v)
		dy[i] = float32(rng.NormFloat64())
	}
	scale := []float64{0.5, -1.5, 2, 1.25, 0.75}
	const eps = 1e-5
	for _, procs := range []int{1, 2} {
		withProcs(procs, func() {
			dx := make([]float32, len(x))
			g := bnBackward(dy, x, dx, layout{outer: n, r: c, inner: inner}, scale, make([]float64, c), make([]float64, c), eps, true)
			count := float64(n * inner)
			for p := 0; p < c; p++ {
				var s float64
				for o := 0; o < n; o++ {
					for i := 0; i < inner; i++ {
						s += float64(x[(o*c+p)*inner+i])
					}
				}
				m := s / count
				var q float64
				for o := 0; o < n; o++ {
					for i := 0; i < inner; i++ {
						d := float64(x[(o*c+p)*inner+i]) - m
						q += d * d
					}
				}
				inv := 1 / math.Sqrt(q/count+eps)
				var sumDy, sumDyXhat float64
				for o := 0; o < n; o++ {
					for i := 0; i < inner; i++ {
						k := (o*c+p)*inner + i
						sumDy += float64(dy[k])
						sumDyXhat += float64(dy[k]) * (float64(x[k]) - m) * inv
					}
				}
				assert.InDelta(t, sumDy, g.bias[p], 1e-9*count, "dB[%d]", p)
				assert.InDelta(t, sumDyXhat, g.scale[p], 1e-6*(1+math.Abs(sumDyXhat)), "dscale[%d]", p)
				bad := 0
				for o := 0; o < n; o++ {
					for i := 0; i < inner; i++ {
						k := (o*c+p)*inner + i
						xhat := (float64(x[k]) - m) * inv
						want := scale[p] * inv * (float64(dy[k]) - sumDy/count - xhat*sumDyXhat/count)
						if math.Abs(float64(dx[k])-want) > 1e-5*(1+math.Abs(want)) {
							bad++
						}
					}
				}
				assert.Zero(t, bad, "channel %d: %d of %d dX elements differ (GOMAXPROCS %d)", p, bad, n*inner, procs)
			}
		})
	}
}
