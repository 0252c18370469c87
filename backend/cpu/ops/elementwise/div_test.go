package elementwise

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDivFloat32MatchesScalarDivision: the vector loops of divVV and divVS
// give the scalar quotient's bits for every length (the 16- and 8-wide
// steps and the scalar tail), with zeros of both signs, infinities, NaNs
// and subnormals among the operands.
func TestDivFloat32MatchesScalarDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	specials := []float32{0, float32(math.Copysign(0, -1)), inf, -inf, nan, math.SmallestNonzeroFloat32, -1e-39, math.MaxFloat32, 1, -3}
	pick := func() float32 {
		if rng.IntN(4) == 0 {
			return specials[rng.IntN(len(specials))]
		}
		return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
	}
	same := func(t *testing.T, want, got float32, what string, i int) {
		if want != want && got != got {
			return
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "%s [%d]: %g, want %g", what, i, got, want)
	}
	for n := 0; n <= 70; n++ {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = pick(), pick()
		}
		got := make([]float32, n)
		divVV(got, a, b)
		for i := range a {
			same(t, a[i]/b[i], got[i], "divVV", i)
		}
		for _, s := range append([]float32{8, 3, 0.1}, specials...) {
			divVS(got, a, s)
			for i := range a {
				same(t, a[i]/s, got[i], "divVS", i)
			}
		}
	}
}
