package elementwise

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArithFloat32MatchesScalar: the vector loops of Add, Sub, Mul and
// Div (tensor op tensor, tensor op scalar, scalar op tensor) give the
// scalar operation's bits for every length (the 32- and 8-wide steps and
// the scalar tail), with zeros of both signs, infinities, NaNs and
// subnormals among the operands.
func TestArithFloat32MatchesScalar(t *testing.T) {
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
	ops := []struct {
		name   string
		vv     func(dst, a, b []float32)
		vs     func(dst, a []float32, s float32)
		sv     func(dst []float32, s float32, b []float32)
		scalar func(x, y float32) float32
	}{
		{"add", addVV[float32], addVS[float32], addSV[float32], func(x, y float32) float32 { return x + y }},
		{"sub", subVV[float32], subVS[float32], subSV[float32], func(x, y float32) float32 { return x - y }},
		{"mul", mulVV[float32], mulVS[float32], mulSV[float32], func(x, y float32) float32 { return x * y }},
		{"div", divVV[float32], divVS[float32], divSV[float32], func(x, y float32) float32 { return x / y }},
	}
	for n := 0; n <= 80; n++ {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = pick(), pick()
		}
		got := make([]float32, n)
		for _, op := range ops {
			op.vv(got, a, b)
			for i := range a {
				same(t, op.scalar(a[i], b[i]), got[i], op.name+"VV", i)
			}
			for _, s := range append([]float32{8, 3, 0.1}, specials...) {
				op.vs(got, a, s)
				for i := range a {
					same(t, op.scalar(a[i], s), got[i], op.name+"VS", i)
				}
				op.sv(got, s, b)
				for i := range b {
					same(t, op.scalar(s, b[i]), got[i], op.name+"SV", i)
				}
			}
		}
	}
	// In place (dst is a), as the kernels run on donated inputs.
	a, b := make([]float32, 77), make([]float32, 77)
	for i := range a {
		a[i], b[i] = pick(), pick()
	}
	want := make([]float32, len(a))
	for i := range a {
		want[i] = a[i] * b[i]
	}
	mulVV(a, a, b)
	for i := range a {
		same(t, want[i], a[i], "mulVV in place", i)
	}
}
