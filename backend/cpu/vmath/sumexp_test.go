package vmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SumExpShift32 against the float64 sum of the exact terms, over row
// widths from one block's tail to a GPT vocabulary, with m the row's
// largest element (the log-sum-exp's case) and with other shifts.
func TestSumExpShift32Accuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{1, 3, 8, 13, 64, 511, 512, 513, 1000, 4099, 50257} {
		for _, scale := range []float64{1, 4, 30} {
			src := make([]float32, n)
			m := float32(math.Inf(-1))
			for i := range src {
				src[i] = float32(rng.NormFloat64() * scale)
				m = max(m, src[i])
			}
			for _, shift := range []float32{m, m + 2.5, m - 3} {
				want := 0.0
				for _, v := range src {
					want += math.Exp(float64(v) - float64(shift))
				}
				got := SumExpShift32(src, shift)
				require.InEpsilon(t, want, got, 4e-6, "n=%d scale=%g shift=%g", n, scale, shift)
				// and the sum ExpShift32 reports, the one it replaces in a loss
				old := ExpShift32(make([]float32, n), src, float64(shift))
				require.InEpsilon(t, old, got, 4e-6, "n=%d scale=%g shift=%g", n, scale, shift)
			}
		}
	}
}

// The assembly gives the pure-Go loop's bits, special values included.
func TestSumExpShift32AssemblyMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, n := range []int{8, 16, 24, 40, 256, 504, 512} {
		for trial := range 20 {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * 20)
			}
			m := float32(rng.NormFloat64() * 10)
			switch trial {
			case 1:
				src[n/2] = -inf
			case 2:
				src[n-1] = -200 // below the clamp
			case 3:
				src[0] = nan
			case 4:
				m = inf
			case 5:
				src[3] = inf
			}
			a, g := sumExpShift(src, m, nil), sumExpShiftGo(src, m)
			if math.IsNaN(g) {
				require.True(t, math.IsNaN(a), "n=%d trial %d: assembly %g, Go NaN", n, trial, a)
				continue
			}
			require.Equal(t, math.Float64bits(g), math.Float64bits(a), "n=%d trial %d: assembly %g, Go %g", n, trial, a, g)
		}
	}
}

func TestSumExpShift32SpecialValues(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for n := 1; n <= 20; n++ {
		src := make([]float32, n)
		src[n-1] = nan
		assert.True(t, math.IsNaN(SumExpShift32(src, 0)), "NaN at the end of %d", n)
		src[n-1] = -inf
		assert.Equal(t, float64(n-1), SumExpShift32(src, 0), "-Inf adds 0 (n=%d)", n)
		src[0] = inf
		assert.True(t, math.IsInf(SumExpShift32(src, 0), 1), "+Inf term (n=%d)", n)
		assert.True(t, math.IsNaN(SumExpShift32(src, inf)), "Inf - Inf (n=%d)", n)
	}
	assert.Zero(t, SumExpShift32(nil, 0))
}

func BenchmarkSumExpShift32(b *testing.B) {
	x := benchInput()
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		SumExpShift32(x, 1.5)
	}
}

// The Ahead forms prefetch a second row as they go: their results, and
// ExpShiftAhead32's exponentials, are the plain forms' bits whatever ahead
// is (the next row, a shorter slice that is not fetched, nil), and ahead
// is left as it was.
func TestAheadFormsKeepTheBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, n := range []int{1, 7, 8, 16, 100, 512, 1000, 50257} {
		rows := make([]float32, 2*n)
		for i := range rows {
			rows[i] = float32(rng.NormFloat64() * 5)
		}
		row, next := rows[:n], rows[n:]
		saved := append([]float32(nil), next...)
		m := row[0]
		for _, v := range row {
			m = max(m, v)
		}
		want := SumExpShift32(row, m)
		wantExp := make([]float32, n)
		wantSum := ExpShift32(wantExp, row, float64(m))
		for _, ahead := range [][]float32{next, next[:n-1], nil, rows} {
			got := SumExpShiftAhead32(row, m, ahead)
			require.Equal(t, math.Float64bits(want), math.Float64bits(got), "n=%d len(ahead)=%d", n, len(ahead))
			gotExp := make([]float32, n)
			gotSum := ExpShiftAhead32(gotExp, row, float64(m), ahead, ahead)
			require.Equal(t, math.Float64bits(wantSum), math.Float64bits(gotSum), "n=%d len(ahead)=%d", n, len(ahead))
			for i := range gotExp {
				require.Equal(t, math.Float32bits(wantExp[i]), math.Float32bits(gotExp[i]), "n=%d element %d", n, i)
			}
		}
		assert.Equal(t, saved, next, "n=%d: ahead is only read", n)
	}
}
