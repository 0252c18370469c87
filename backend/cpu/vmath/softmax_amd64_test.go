//go:build amd64 && !purego

package vmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// softmaxRowRef is what softmaxRowAVX2 must give, in Go: the row's
// largest element, expShiftGo's exponentials (the AVX2 loop's bits, which
// TestAssemblyMatchesPureGoBitForBit checks) with mh = m and ml = +0, and
// each one times 1/Σ rounded once.
func softmaxRowRef(dst, src []float32) {
	m := src[0]
	for _, v := range src {
		if v > m {
			m = v
		}
	}
	s := expShiftGo(dst, src, m, 0)
	inv := 1 / s
	for i, v := range dst {
		dst[i] = float32(float64(v) * inv)
	}
}

// The fused AVX2 softmax row gives the bits of its three steps done apart,
// on every length from 8 to 300 (each tail of the eight- and sixteen-
// element steps), misaligned, on rows whose exponentials reach the
// subnormal band and underflow, rows holding -Inf, equal elements, and
// +Inf or NaN (NaNs out, as from the steps apart); the elements after the
// row are left alone.
func TestSoftmaxRowAVX2MatchesSteps(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	rng := rand.New(rand.NewPCG(31, 32))
	inf := float32(math.Inf(1))
	kinds := []func(i, n int) float32{
		func(int, int) float32 { return float32(3 * rng.NormFloat64()) },
		func(int, int) float32 { return float32(1e4 + 40*rng.NormFloat64()) }, // reaches e^-87…e^-104 and below
		func(i, n int) float32 {
			if i == n/2 {
				return -inf
			}
			return float32(rng.NormFloat64())
		},
		func(int, int) float32 { return -2.5 },
		func(i, n int) float32 {
			if i == n-1 {
				return inf
			}
			return float32(rng.NormFloat64())
		},
		func(i, n int) float32 {
			if i == n/3 {
				return float32(math.NaN())
			}
			return float32(rng.NormFloat64())
		},
	}
	for n := 8; n <= 300; n++ {
		for k, gen := range kinds {
			buf := make([]float32, n+9)
			src := buf[1 : 1+n]
			for i := range src {
				src[i] = gen(i, n)
			}
			want := make([]float32, n)
			softmaxRowRef(want, src)
			out := make([]float32, n+9)
			for i := range out {
				out[i] = -7
			}
			got := out[1 : 1+n]
			require.True(t, SoftmaxRow32(got, src) || AVX512(), "the fused row runs where the AVX2 loops do")
			softmaxRowAVX2(&got[0], &src[0], n, &avxConst[0], &tailMask[0])
			for i := range got {
				g, w := got[i], want[i]
				if g != g && w != w {
					continue
				}
				if math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("n=%d kind %d: element %d is %v (%#x), want %v (%#x)", n, k, i, g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
			require.Equal(t, float32(-7), out[0], "n=%d: element before the row", n)
			for i := 1 + n; i < len(out); i++ {
				require.Equal(t, float32(-7), out[i], "n=%d: element %d after the row", n, i-1-n)
			}
		}
	}
}
