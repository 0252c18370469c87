package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// maskedScores returns batch T×T float32 and float64 matrices holding
// random scores on and below the diagonal (centred at offset) and −inf
// above it (a causal mask added); with past set, the elements past each
// row's prefix (MaskedPrefix) hold past instead.
func maskedScores(rng *rand.Rand, batch, t int, offset float64, past float64) (*graph.Tensor, *graph.Tensor) {
	x32, x64 := make([]float32, batch*t*t), make([]float64, batch*t*t)
	for i := range x32 {
		r, c := i/t%t, i%t
		v := math.Inf(-1)
		switch {
		case c <= r:
			v = offset + 4*rng.NormFloat64()
		case c >= MaskedPrefix(r, t):
			v = past
		}
		x32[i], x64[i] = float32(v), float64(float32(v))
	}
	return graph.FromFloat32(x32, batch, t, t), graph.FromFloat64(x64, batch, t, t)
}

// sameBits fails at the first element whose bits differ.
func sameBits(t *testing.T, want, got []float32, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got), what)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			require.Failf(t, what, "[%d]: %v (%#x), want %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestMaskedSoftmaxMatchesWholeRows: with graph.CausalMaskedAttr, Softmax
// computes a prefix of each row of a masked T×T matrix (MaskedPrefix) and
// writes +0 past it; every value, +0s included, is the whole rows'
// softmax bit for bit, in float32 through every row path (AVX-512, AVX2,
// Go) and in float64, at sizes around the kernels' eight-element steps.
// The elements past each row's prefix are not read: NaNs there (which
// make the whole rows NaN) change nothing in the hinted result.
func TestMaskedSoftmaxMatchesWholeRows(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	inf, nan := math.Inf(-1), math.NaN()
	for _, size := range []int{1, 3, 7, 8, 9, 15, 16, 17, 33, 64, 128, 131, 200} {
		for _, offset := range []float64{0, -60, 1e4} {
			rng := rand.New(rand.NewPCG(uint64(size), 3))
			x32, x64 := maskedScores(rng, 3, size, offset, inf)
			n32, _ := maskedScores(rand.New(rand.NewPCG(uint64(size), 3)), 3, size, offset, nan)
			if size > 8 {
				require.True(t, math.IsNaN(float64(n32.Float32s()[size-1])), "a NaN past row 0's prefix")
			}
			t.Run(fmt.Sprintf("size%d_offset%g", size, offset), func(t *testing.T) {
				forEachRowPath(t, func(t *testing.T) {
					whole := mustRun(t, 17, node("Softmax"), x32)[0].Float32s()
					hint := graph.IntAttr(graph.CausalMaskedAttr, 1)
					got := mustRun(t, 17, node("Softmax", hint), x32)[0].Float32s()
					sameBits(t, whole, got, "float32")
					fromNaN := mustRun(t, 17, node("Softmax", hint), n32)[0].Float32s()
					sameBits(t, whole, fromNaN, "NaNs past the prefixes were read")
				})
				whole := mustRun(t, 17, node("Softmax"), x64)[0].Float64s()
				got := mustRun(t, 17, node("Softmax", graph.IntAttr(graph.CausalMaskedAttr, 1)), x64)[0].Float64s()
				require.Equal(t, whole, got, "float64")
				for i, v := range got {
					if i%size > i/size%size {
						require.False(t, math.Signbit(v) || v != 0, "[%d] above the diagonal: %v", i, v)
					}
				}
			})
		}
	}
}

// TestMaskedSoftmaxHintIgnored: the hint only applies along the last axis
// of square matrices; elsewhere Softmax reads every element (here: no −inf
// above the diagonal, so a prefix would give other values).
func TestMaskedSoftmaxHintIgnored(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	hint := graph.IntAttr(graph.CausalMaskedAttr, 1)
	for name, c := range map[string]struct {
		shape []int
		axis  int64
	}{
		"not square":       {[]int{2, 5, 7}, -1},
		"along axis 1":     {[]int{2, 6, 6}, 1},
		"rank 1":           {[]int{9}, -1},
		"square, no batch": {[]int{12, 12}, 0},
	} {
		x := make([]float32, product(c.shape))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		in := graph.FromFloat32(x, c.shape...)
		axis := graph.IntAttr("axis", c.axis)
		want := mustRun(t, 17, node("Softmax", axis), in)[0].Float32s()
		got := mustRun(t, 17, node("Softmax", axis, hint), in)[0].Float32s()
		sameBits(t, want, got, name)
	}
}
