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
	checkSoftmaxRowMatchesSteps(t, 8, func(dst, src []float32) {
		require.True(t, SoftmaxRow32(dst, src, 0) || AVX512(), "the fused row runs where the AVX2 loops do")
		softmaxRowAVX2(&dst[0], &src[0], len(src), &avxConst[0], &tailMask[0], 0)
	})
}

// The fused AVX-512 softmax row (what SoftmaxRow32 runs where vmath runs
// its AVX-512 loops) gives the same bits as the AVX2 one's steps apart, on
// every length from 16 to 300 and the same rows.
func TestSoftmaxRow512MatchesSteps(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512 on this CPU (or ONNXTRAIN_NO_AVX512 set)")
	}
	checkSoftmaxRowMatchesSteps(t, 16, func(dst, src []float32) {
		require.True(t, SoftmaxRow32(dst, src, 0), "the fused row runs from 16 elements")
	})
	require.False(t, SoftmaxRow32(make([]float32, 15), make([]float32, 15), 0), "a row of 15 is left to the caller")
}

// checkSoftmaxRowMatchesSteps runs a fused softmax row (run) on rows of
// every length from minN to 300 of the kinds above and checks each
// element against softmaxRowRef bit for bit (NaN for NaN) and that the
// elements around the row are untouched.
func checkSoftmaxRowMatchesSteps(t *testing.T, minN int, run func(dst, src []float32)) {
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
	for n := minN; n <= 300; n++ {
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
			run(got, src)
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

// The AVX2 sum with the next row's maximum in its loop gives
// SumExpShift32's bits and the next row's largest element (exactly: no
// NaN), for lengths around the eight-element blocks and the 512-element
// chunks up to a GPT vocabulary, misaligned, rows with -Inf and rows
// wholly below zero (a lane maximum started at 0 would win); a NaN in the
// next row gives a maximum whose sum is NaN.
func TestSumExpShiftMaxMatches(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	rng := rand.New(rand.NewPCG(33, 34))
	for _, n := range []int{8, 9, 15, 16, 17, 24, 100, 511, 512, 513, 1031, 4099, 50257} {
		for _, off := range []float64{0, -300} {
			buf := make([]float32, 2*n+1)
			for i := range buf {
				buf[i] = float32(off + 4*rng.NormFloat64())
			}
			row, next := buf[1:1+n], buf[1+n:]
			if n > 20 {
				row[n/2] = float32(math.Inf(-1))
				next[n/3] = float32(math.Inf(-1))
			}
			m := row[0]
			for _, v := range row {
				m = max(m, v)
			}
			want := next[0]
			for _, v := range next {
				want = max(want, v)
			}
			s, got := sumExpShiftMax32(row, m, next)
			require.Equal(t, math.Float64bits(SumExpShift32(row, m)), math.Float64bits(s), "n=%d: the sum", n)
			require.Equal(t, want, got, "n=%d: the next row's maximum", n)
			saved := next[n-1]
			next[n-1] = float32(math.NaN())
			_, withNaN := sumExpShiftMax32(row, m, next)
			require.True(t, math.IsNaN(SumExpShift32(next, withNaN)), "n=%d: a NaN in the next row gives a NaN sum", n)
			next[n-1] = saved
		}
	}
	_, _, ok := SumExpShiftMax32(make([]float32, 7), 0, make([]float32, 7))
	require.False(t, ok, "rows shorter than a block are left to the caller")
	_, _, ok = SumExpShiftMax32(make([]float32, 16), 0, make([]float32, 15))
	require.False(t, ok, "rows of different lengths are left to the caller")
}

// TestSoftmaxRowNextSameBits: the fused softmax rows that fetch the next
// row's destination (SoftmaxRow32 with a prefetch distance, and the AVX2 loop with its
// prefetch distance set, which runs on AVX-512 hosts too) give the bits
// of the same rows without it, rows end to end as attention writes P.
func TestSoftmaxRowNextSameBits(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cols := range []int{8, 9, 16, 23, 128, 197} {
		const rows = 13
		src := make([]float32, rows*cols)
		for i := range src {
			src[i] = float32(3 * rng.NormFloat64())
		}
		want, got := make([]float32, len(src)), make([]float32, len(src))
		want2, got2 := make([]float32, len(src)), make([]float32, len(src))
		for r := 0; r < rows; r++ {
			o := r * cols
			s := src[o : o+cols]
			require.Equal(t, SoftmaxRow32(want[o:o+cols], s, 0), SoftmaxRow32(got[o:o+cols], s, 4*cols))
			softmaxRowAVX2(&want2[o], &s[0], cols, &avxConst[0], &tailMask[0], 0)
			softmaxRowAVX2(&got2[o], &s[0], cols, &avxConst[0], &tailMask[0], 4*cols)
		}
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "cols %d, element %d", cols, i)
			require.Equal(t, math.Float32bits(want2[i]), math.Float32bits(got2[i]), "AVX2 loop, cols %d, element %d", cols, i)
		}
	}
}
