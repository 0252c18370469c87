package optimizer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdamVectorMatchesGo: the eight-lane Adam kernel gives, bit for bit,
// the parameters and moments of the Go loop, for Adam with L2 decay,
// AdamW and maximize, at lengths with and without a tail, on random values
// mixed with zeros of both signs, subnormals, huge values, infinities and
// NaNs (a NaN must stay a NaN; its payload may differ).
func TestAdamVectorMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	val := func() float32 {
		switch rng.IntN(12) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		case 2:
			return float32(rng.NormFloat64() * 1e-40)
		case 3:
			return float32(rng.NormFloat64() * 1e30)
		case 4:
			return float32(math.Inf(rng.IntN(2)*2 - 1))
		case 5:
			return float32(math.NaN())
		}
		return float32(rng.NormFloat64())
	}
	for _, n := range []int{8, 13, 64, 1001} {
		for mode := range 3 {
			for _, maximize := range []bool{false, true} {
				mk := func() [][]float32 {
					ops := make([][]float32, 4)
					for k := range ops {
						ops[k] = make([]float32, n)
					}
					return ops
				}
				a := mk()
				for k := range a {
					for i := range a[k] {
						a[k][i] = val()
						if k == 3 { // v: mostly non-negative
							a[k][i] = float32(math.Abs(float64(a[k][i])))
						}
					}
				}
				b := mk()
				for k := range a {
					copy(b[k], a[k])
				}
				run := func(ops [][]float32, vector bool) {
					noVector = !vector
					defer func() { noVector = false }()
					st := &nodeState{n: 1, ops: ops, hyper: []float32{-1e-3 / 0.1, float32(math.Sqrt(0.001)), 0.01, 1 - 1e-5, 0}}
					st.adam = adamConsts{b1f: 0.9, b2f: 0.999, omb1: float32(1 - 0.9), omb2: float32(1 - 0.999), eps: 1e-8, maximize: maximize, decoupled: mode == 1}
					if mode == 2 {
						st.hyper[4] = 1 // L2
					}
					adamRun(st, 0, 0, n)
				}
				run(a, true)
				run(b, false)
				for k, name := range []string{"param", "grad", "exp_avg", "exp_avg_sq"} {
					for i := range a[k] {
						if math.IsNaN(float64(b[k][i])) {
							require.True(t, math.IsNaN(float64(a[k][i])), "n %d mode %d maximize %v: %s[%d] is not NaN", n, mode, maximize, name, i)
							continue // NaN payloads are not compared
						}
						require.Equal(t, math.Float32bits(b[k][i]), math.Float32bits(a[k][i]), "n %d mode %d maximize %v: %s[%d]", n, mode, maximize, name, i)
					}
				}
			}
		}
	}
}

// TestSGDVectorMatchesGo: the eight-lane SGD-with-momentum kernel gives,
// bit for bit, the parameters and buffers of the Go loop, with and without
// weight decay, maximize, Nesterov and dampening, on the first step and
// later ones, on the special values of TestAdamVectorMatchesGo.
func TestSGDVectorMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	val := func() float32 {
		switch rng.IntN(10) {
		case 0:
			return float32(math.Copysign(0, -1))
		case 1:
			return float32(rng.NormFloat64() * 1e-40)
		case 2:
			return float32(rng.NormFloat64() * 3e38)
		case 3:
			return float32(math.Inf(1))
		case 4:
			return float32(math.NaN())
		}
		return float32(rng.NormFloat64())
	}
	for _, n := range []int{8, 29, 1000} {
		for mode := range 16 {
			a := make([][]float32, 3)
			for k := range a {
				a[k] = make([]float32, n)
				for i := range a[k] {
					a[k][i] = val()
				}
			}
			b := [][]float32{append([]float32{}, a[0]...), append([]float32{}, a[1]...), append([]float32{}, a[2]...)}
			run := func(ops [][]float32, vector bool) {
				noVector = !vector
				defer func() { noVector = false }()
				wd, first := float32(0), float32(0)
				if mode&2 != 0 {
					wd = 1e-4
				}
				if mode&4 != 0 {
					first = 1
				}
				damp := float32(1)
				if mode&8 == 0 {
					damp = 0.9 // dampening 0.1 (Nesterov needs none)
				}
				st := &nodeState{n: 1, ops: ops, hyper: []float32{-0.05, wd, first}}
				st.sgd = sgdConsts{m32: 0.9, damp32: damp, maximize: mode&1 != 0, nesterov: mode&8 != 0, momentum: true}
				sgdRun(st, 0, 0, n)
			}
			run(a, true)
			run(b, false)
			for k, name := range []string{"param", "grad", "momentum_buffer"} {
				for i := range a[k] {
					if math.IsNaN(float64(b[k][i])) {
						require.True(t, math.IsNaN(float64(a[k][i])), "n %d mode %d: %s[%d] is not NaN", n, mode, name, i)
						continue
					}
					require.Equal(t, math.Float32bits(b[k][i]), math.Float32bits(a[k][i]), "n %d mode %d: %s[%d]", n, mode, name, i)
				}
			}
		}
	}
}
