package optim

import (
	"math"
	"math/big"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// TestStepsAllocateNothing: once their state exists, SGD (with momentum)
// and Adam/AdamW steps allocate nothing, serial or split over goroutines,
// with several parameters of different sizes.
func TestStepsAllocateNothing(t *testing.T) {
	if raceEnabled {
		testutil.Skip(t, "the race detector changes allocation behaviour")
	}
	mk := func() []*Param {
		var ps []*Param
		for i, n := range []int{3<<16 + 5, 100, 1<<14 + 1} {
			ps = append(ps, &Param{Name: string(rune('a' + i)), Value: graph.Zeros(graph.Float32, n), Grad: graph.Zeros(graph.Float32, n)})
			for j := range ps[i].Grad.Float32s() {
				ps[i].Grad.Float32s()[j] = float32(j%7) * 1e-3
			}
		}
		return ps
	}
	adam, err := NewAdam(DefaultAdamWConfig(1e-3))
	require.NoError(t, err)
	adamw, err := NewAdamW(DefaultAdamWConfig(1e-3))
	require.NoError(t, err)
	sgd, err := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4})
	require.NoError(t, err)
	for _, procs := range []int{1, 4} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for name, o := range map[string]Optimizer{"sgd": sgd, "adam": adam, "adamw": adamw} {
				ps := mk()
				require.NoError(t, o.Step(ps))
				before := ps[0].Value.Float32s()[1]
				allocs := testing.AllocsPerRun(10, func() {
					if err := o.Step(ps); err != nil {
						panic(err)
					}
				})
				assert.Zero(t, allocs, "%s, GOMAXPROCS %d: allocations per step", name, procs)
				assert.NotEqual(t, before, ps[0].Value.Float32s()[1], "%s: the steps updated the parameter", name)
			}
		}()
	}
}

// TestPowWorkMatchesFloat64: the allocation-free pow gives exactly what
// rounding its 256-bit product with big.Float's own Float64 gives, for
// the betas optimizers use and a spread of step counts (results down to
// the subnormal range included), and for negative bases.
func TestPowWorkMatchesFloat64(t *testing.T) {
	var w powWork
	for _, x := range []float64{0.9, 0.99, 0.999, 0.9999, 0.5, 0.123456789, -0.7, 1, 0} {
		for _, n := range []int64{1, 2, 3, 7, 10, 100, 1000, 4321, 6000, 7000, 10000, 123457} {
			// Reference: the same square-and-multiply, rounded by Float64.
			r := new(big.Float).SetPrec(256).SetFloat64(1)
			b := new(big.Float).SetPrec(256).SetFloat64(x)
			for k := n; k > 0; k >>= 1 {
				if k&1 == 1 {
					r.Mul(r, b)
				}
				b.Mul(b, b)
			}
			want, _ := r.Float64()
			require.Equal(t, math.Float64bits(want), math.Float64bits(w.pow(x, n)), "%v**%d", x, n)
		}
	}
	assert.Zero(t, testing.AllocsPerRun(20, func() { w.pow(0.999, 4321) }))
}
