package linalg

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The in-projection's input gradient dX = dY·W, with x [B, T, E] viewed
// as [T, B, E] and W [F, E] shared by the batch, cut by rows over the
// workers (flatByRows): the one-worker product bit for bit whatever the
// worker count, with the result's rows scattered back into x's layout or
// stacked in place, row counts off the kernel's strips, and within
// float32 rounding of a float64 reference.
func TestPermutedFlatGradARowSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	xT := viewSteps{perm: []int64{1, 0, 2}}
	wT := viewSteps{perm: []int64{1, 0}}
	for _, c := range []struct {
		name       string
		B, T, E, F int
		permY      []int64
		dyPermuted bool
	}{
		{"ViT-like, dX back in x's layout", 3, 101, 40, 600, []int64{1, 0, 2}, false},
		{"dX as [T, B, E]", 2, 199, 24, 520, nil, false},
		{"odd rows, k below a block", 5, 61, 33, 200, []int64{1, 0, 2}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := randF32(r, c.B, c.T, c.E)
			w := randF32(r, c.F, c.E)
			dy := randF32(r, c.T, c.B, c.F)
			bases := []*graph.Tensor{dy, x, w}
			steps := []viewSteps{{}, xT, wT}
			n := permutedNode(1, c.permY, bases, steps)
			runWith := func(procs int) []float32 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				return append([]float32(nil), run(t, permutedMatMulKernel, n, bases...)[0].Float32s()...)
			}
			one := runWith(1)
			rows := c.B * c.T
			for _, procs := range []int{2, 3} {
				before, fallbacks := flatRowSplits.Load(), permutedFallbacks.Load()
				got := runWith(procs)
				split := flatRowPieces(1, rows, c.E, c.F, procs) > 1
				if split {
					assert.Equal(t, before+1, flatRowSplits.Load(), "%d workers: cut by rows", procs)
				} else {
					assert.Equal(t, before, flatRowSplits.Load(), "%d workers: not cut", procs)
				}
				assert.Equal(t, fallbacks, permutedFallbacks.Load(), "no fallback")
				require.Equal(t, one, got, "%d workers: the one-worker product bit for bit", procs)
			}
			assert.Equal(t, c.name != "odd rows, k below a block", flatRowPieces(1, rows, c.E, c.F, 2) > 1, "cut at two workers")
			ref := reference64(t, 1, c.permY, bases, steps)
			for i, want := range ref {
				require.InDelta(t, want, float64(one[i]), 1e-5*math.Max(1, math.Abs(want))*math.Sqrt(float64(c.F)), "element %d", i)
			}
		})
	}
}

// flatRowPieces cuts only the input gradient, and only products whose
// every piece gets enough rows and work.
func TestFlatRowPieces(t *testing.T) {
	assert.Equal(t, 2, flatRowPieces(1, 788, 768, 2304, 2), "ViT-B/16's in-projection dX")
	assert.Equal(t, 2, flatRowPieces(1, 512, 768, 2304, 2), "the GPT's")
	assert.Equal(t, 1, flatRowPieces(0, 788, 768, 2304, 2), "the forward: the GEMM's split")
	assert.Equal(t, 1, flatRowPieces(2, 788, 768, 2304, 2), "the weight gradient")
	assert.Equal(t, 1, flatRowPieces(1, 788, 768, 2304, 1), "one worker")
	mr, _ := gemm.KernelShape()
	fewest := flatMinStrips * mr * 2 // rows that give two workers flatMinStrips strips each
	assert.Equal(t, 2, flatRowPieces(1, fewest, 768, 2304, 2), "just enough rows a worker")
	assert.Equal(t, 1, flatRowPieces(1, fewest-1, 768, 2304, 2), "too few rows a worker")
	assert.Equal(t, 1, flatRowPieces(1, 400, 8, 8, 2), "too little work")
	assert.Equal(t, 3, flatRowPieces(1, 788, 768, 2304, 3), "three workers")
}

// The shared-weight products whose x view does not stack into rows (x
// [B, T, E] viewed as [T, B, E]) gather it first, spread over the
// workers when it is large: the forward and the weight gradient give the
// one-worker results bit for bit, and agree with a float64 reference.
func TestPermutedFlatGatherSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const B, T, E, F = 3, 101, 440, 48 // 303 rows of 440: above gatherMinElems
	x := randF32(r, B, T, E)
	w := randF32(r, F, E)
	dy := randF32(r, T, B, F)
	xT := viewSteps{perm: []int64{1, 0, 2}}
	wT := viewSteps{perm: []int64{1, 0}}
	for _, c := range []struct {
		name  string
		grad  int64
		permY []int64
		bases []*graph.Tensor
		steps []viewSteps
		tol   float64
	}{
		{"y = xᵀ·Wᵀ", 0, nil, []*graph.Tensor{x, w}, []viewSteps{xT, wT}, 1e-5 * math.Sqrt(E)},
		{"y = xᵀ·Wᵀ, result moved", 0, []int64{1, 0, 2}, []*graph.Tensor{x, w}, []viewSteps{xT, wT}, 1e-5 * math.Sqrt(E)},
		{"dW = Σ xᵀ·dy", 2, []int64{1, 0}, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}, 1e-5 * math.Sqrt(B*T)},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := permutedNode(c.grad, c.permY, c.bases, c.steps)
			runWith := func(procs int) []float32 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				return append([]float32(nil), run(t, permutedMatMulKernel, n, c.bases...)[0].Float32s()...)
			}
			gathers := gatherSplits.Load()
			one := runWith(1)
			assert.Equal(t, gathers, gatherSplits.Load(), "one worker: one copy")
			for _, procs := range []int{2, 3} {
				before := gatherSplits.Load()
				got := runWith(procs)
				assert.Equal(t, before+1, gatherSplits.Load(), "%d workers: the gather spread", procs)
				require.Equal(t, one, got, "%d workers: the one-worker result bit for bit", procs)
			}
			ref := reference64(t, c.grad, c.permY, c.bases, c.steps)
			for i, want := range ref {
				require.InDelta(t, want, float64(one[i]), c.tol*math.Max(1, math.Abs(want)), "element %d", i)
			}
		})
	}
}
