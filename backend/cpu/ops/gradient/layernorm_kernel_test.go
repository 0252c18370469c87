package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"

	"github.com/stretchr/testify/require"
)

// layerNormGradReference is the LayerNorm backward by its formula in
// float64, row by row with a two-pass variance: x̂ = (x − m)·inv,
// g = dy·scale, dx = inv·(g − mean(g) − x̂·mean(g·x̂)), dscale = Σ dy·x̂,
// dbias = Σ dy over the rows. scaleOf[j] is inv·max|g| of row j, the size
// of its dx terms, for tolerances.
func layerNormGradReference(dy, x []float64, rows, size int, eps float64, scale []float64) (dx, ds, db, dsAbs, scaleOf []float64) {
	dx, ds, db, dsAbs = make([]float64, rows*size), make([]float64, size), make([]float64, size), make([]float64, size)
	scaleOf = make([]float64, rows)
	for j := 0; j < rows; j++ {
		xr, gr := x[j*size:(j+1)*size], dy[j*size:(j+1)*size]
		var m, v float64
		for _, e := range xr {
			m += e
		}
		m /= float64(size)
		for _, e := range xr {
			v += (e - m) * (e - m)
		}
		inv := 1 / math.Sqrt(v/float64(size)+eps)
		var mg, mgx, gmax float64
		for i, e := range xr {
			g := gr[i] * scale[i]
			mg += g
			mgx += g * (e - m) * inv
			gmax = max(gmax, math.Abs(g))
		}
		mg /= float64(size)
		mgx /= float64(size)
		scaleOf[j] = inv * gmax
		for i, e := range xr {
			xh := (e - m) * inv
			dx[j*size+i] = inv * (gr[i]*scale[i] - mg - xh*mgx)
			ds[i] += gr[i] * xh
			dsAbs[i] += math.Abs(gr[i] * xh)
			db[i] += gr[i]
		}
	}
	return dx, ds, db, dsAbs, scaleOf
}

// TestLayerNormRowsBackwardOddSizes checks layerNormRowsBackward on float64
// and float32 data against layerNormGradReference for row lengths 1, 7, 128
// and 257 (the unrolled loops' remainders), with rows enough that both
// goroutines work, for centred rows and rows whose mean is 300 standard
// deviations from 0 (where a naive one-pass variance would fail), and that
// the result is the same with 1 and 2 goroutines; through the assembly row
// kernels and through their Go fallbacks.
func TestLayerNormRowsBackwardOddSizes(t *testing.T) {
	forEachRowPath(t, testLayerNormRowsBackwardOddSizes)
}

func testLayerNormRowsBackwardOddSizes(t *testing.T) {
	const eps = 1e-5
	for _, size := range []int{1, 7, 128, 257} {
		for _, offset := range []float64{0, 300} {
			t.Run(fmt.Sprintf("size%d_offset%g", size, offset), func(t *testing.T) {
				rows := max(300, 20000/size)
				withProcs(2, func() {
					blocks := (rows + layerNormRowsBlock - 1) / layerNormRowsBlock
					require.Equal(t, 2, gradWorkers(blocks, 8*layerNormRowsBlock*size), "rows %d of %d are split over 2 goroutines", rows, size)
				})
				rng := rand.New(rand.NewPCG(uint64(size), 11))
				x, dy, scale := randomFloat64s(rng, rows*size), randomFloat64s(rng, rows*size), randomFloat64s(rng, size)
				// Round to float32 so both element types see the same data.
				for i := range x {
					x[i] = float64(float32(x[i] + offset))
					dy[i] = float64(float32(dy[i]))
				}
				wantDx, wantDs, wantDb, dsAbs, rowScale := layerNormGradReference(dy, x, rows, size, eps, scale)

				dx64, ds64, db64 := make([]float64, rows*size), make([]float64, size), make([]float64, size)
				withProcs(2, func() { layerNormRowsBackward(dy, x, dx64, rows, size, eps, scale, ds64, db64) })
				for i := range dx64 {
					require.InDelta(t, wantDx[i], dx64[i], 1e-9*(rowScale[i/size]+1e-300), "float64 dx[%d]", i)
				}
				for i := range ds64 {
					require.InDelta(t, wantDs[i], ds64[i], 1e-10*(dsAbs[i]+1), "float64 dscale[%d]", i)
					require.InDelta(t, wantDb[i], db64[i], 1e-10*float64(rows), "float64 dbias[%d]", i)
				}

				x32, dy32 := make([]float32, len(x)), make([]float32, len(dy))
				for i := range x {
					x32[i], dy32[i] = float32(x[i]), float32(dy[i])
				}
				run32 := func(procs int) (dx []float32, ds, db []float64) {
					dx, ds, db = make([]float32, rows*size), make([]float64, size), make([]float64, size)
					withProcs(procs, func() { layerNormRowsBackward(dy32, x32, dx, rows, size, eps, scale, ds, db) })
					return dx, ds, db
				}
				dx32, ds32, db32 := run32(2)
				// Float32 arithmetic in the element pass: a few roundings of
				// terms of size inv·max|g| (x − mean stays accurate when the
				// mean is far from 0), and float32 sums over a block of rows.
				const tol = 4e-6
				for i := range dx32 {
					require.InDelta(t, wantDx[i], float64(dx32[i]), tol*rowScale[i/size]+1e-30, "float32 dx[%d]", i)
				}
				for i := range ds32 {
					require.InDelta(t, wantDs[i], ds32[i], tol*(dsAbs[i]+1), "float32 dscale[%d]", i)
					require.InDelta(t, wantDb[i], db32[i], 1e-5*float64(rows), "float32 dbias[%d]", i)
				}
				dx1, ds1, db1 := run32(1)
				require.Equal(t, dx1, dx32, "dx is the same with 1 and 2 goroutines")
				require.Equal(t, ds1, ds32, "dscale is the same with 1 and 2 goroutines")
				require.Equal(t, db1, db32, "dbias is the same with 1 and 2 goroutines")
			})
		}
	}
}

// BenchmarkLayerNormRowsBackward is the float32 LayerNorm backward on the
// ViT benchmark's shape (64 images × 65 tokens, dim 128).
func BenchmarkLayerNormRowsBackward(b *testing.B) {
	const rows, size = 64 * 65, 128
	rng := rand.New(rand.NewPCG(1, 2))
	x, dy, dx := make([]float32, rows*size), make([]float32, rows*size), make([]float32, rows*size)
	for i := range x {
		x[i], dy[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	scale := randomFloat64s(rng, size)
	ds, db := make([]float64, size), make([]float64, size)
	b.SetBytes(int64(rows * size * 12))
	cpuLoop(b, func() { layerNormRowsBackward(dy, x, dx, rows, size, 1e-5, scale, ds, db) })
}

// BenchmarkSoftmaxBackwardViT is the float32 softmax backward of the ViT
// benchmark's attention (64·4·65 rows of 65).
func BenchmarkSoftmaxBackwardViT(b *testing.B) {
	const rows, size = 64 * 4 * 65, 65
	rng := rand.New(rand.NewPCG(7, 8))
	dy, y, dx := make([]float32, rows*size), make([]float32, rows*size), make([]float32, rows*size)
	for i := range y {
		dy[i], y[i] = float32(rng.NormFloat64()), float32(rng.Float64()/size)
	}
	b.SetBytes(int64(rows * size * 12))
	cpuLoop(b, func() { softmaxBackward(false, dy, y, dx, layout{outer: rows, r: size, inner: 1}) })
}

// BenchmarkSumToShapeBias is SumToShape of a ViT bias gradient: (64, 65,
// 384) summed to (384).
func BenchmarkSumToShapeBias(b *testing.B) {
	benchSumToShape(b, []int{64, 65, 384}, []int{384})
}

// BenchmarkSumToShapePosEmbed is SumToShape of the ViT position
// embedding's gradient: (64, 65, 128) summed to (1, 65, 128).
func BenchmarkSumToShapePosEmbed(b *testing.B) {
	benchSumToShape(b, []int{64, 65, 128}, []int{1, 65, 128})
}

// BenchmarkSumToShapePosEmbedGPT is the GPT decoder's (4 × 128 tokens,
// width 768): four rows of 98,304 columns.
func BenchmarkSumToShapePosEmbedGPT(b *testing.B) {
	benchSumToShape(b, []int{4, 128, 768}, []int{1, 128, 768})
}

func benchSumToShape(b *testing.B, from, to []int) {
	rng := rand.New(rand.NewPCG(9, 10))
	g := make([]float32, product(from))
	for i := range g {
		g[i] = float32(rng.NormFloat64())
	}
	in := []*graph.Tensor{graph.FromFloat32(g, from...), graph.FromFloat32(make([]float32, product(to)), to...)}
	n := &graph.Node{OpType: "SumToShape", Domain: graph.InternalDomain, Outputs: []string{"y"}}
	b.SetBytes(int64(4 * len(g)))
	cpuLoop(b, func() {
		if _, err := sumToShape(&kern.Context{}, n, in); err != nil {
			b.Fatal(err)
		}
	})
}

// cpuLoop runs fn b.N times and reports the CPU time of the process per
// call (steadier than wall time on a loaded machine).
func cpuLoop(b *testing.B, fn func()) {
	cpu0 := processCPU()
	for b.Loop() {
		fn()
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-us/op")
}

// TestLayerNormRowsBackwardAddsResidual checks LayerNormGradAdd's row
// loop: with a residual gradient, every element of dx is the bits of the
// plain backward's dx plus the residual, rounded once in the element type
// (what LayerNormalizationGrad followed by the Add kernel gives), for row
// lengths with and without the vector loops' remainders, float32 and
// float64, through the assembly row kernels (the residual added inside
// them) and through their Go fallbacks; dscale and dbias do not change.
func TestLayerNormRowsBackwardAddsResidual(t *testing.T) {
	forEachRowPath(t, func(t *testing.T) {
		for _, size := range []int{1, 7, 8, 128, 257, 768} {
			t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
				rows := 70
				rng := rand.New(rand.NewPCG(uint64(size), 12))
				x, dy, res, scale := randomFloat64s(rng, rows*size), randomFloat64s(rng, rows*size), randomFloat64s(rng, rows*size), randomFloat64s(rng, size)
				x32, dy32, res32 := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
				for i := range x {
					x32[i], dy32[i], res32[i] = float32(x[i]), float32(dy[i]), float32(res[i])
				}
				checkAddsResidual(t, dy32, x32, res32, rows, size, scale)
				checkAddsResidual(t, dy, x, res, rows, size, scale)
			})
		}
	})
}

// checkAddsResidual runs layerNormRowsBackwardWith with and without res
// and requires dx to be the plain one plus res, rounded once in F (bits
// compared through float64, which holds every float32 exactly, the sign of
// zero included), and dscale and dbias unchanged.
func checkAddsResidual[F float](t *testing.T, dy, x, res []F, rows, size int, scale []float64) {
	t.Helper()
	plain, ds0, db0 := make([]F, len(x)), make([]float64, size), make([]float64, size)
	layerNormRowsBackward(dy, x, plain, rows, size, 1e-5, scale, ds0, db0)
	added, ds1, db1 := make([]F, len(x)), make([]float64, size), make([]float64, size)
	layerNormRowsBackwardWith(new(lnGradTask[F]), dy, x, added, res, rows, size, 1e-5, scale, ds1, db1)
	for i := range added {
		want := plain[i] + res[i]
		require.Equal(t, math.Float64bits(float64(want)), math.Float64bits(float64(added[i])), "%T dx[%d]: %v + %v", want, i, plain[i], res[i])
	}
	require.Equal(t, ds0, ds1, "%T dscale", dy)
	require.Equal(t, db0, db1, "%T dbias", dy)
}
