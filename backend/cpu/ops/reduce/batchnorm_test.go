package reduce

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestBatchNormStatsMatchTwoPass checks bnStats (one pass over shifted
// values, channels split over the goroutines) against the two-pass mean
// and population variance, on one goroutine and two, with a channel far
// from zero (mean 1000, standard deviation 0.01) where an unshifted
// one-pass variance would lose every digit.
func TestBatchNormStatsMatchTwoPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	b := blocks{outer: 4, r: 6, inner: 5000}
	x := make([]float32, b.outer*b.r*b.inner)
	for i := range x {
		v := rng.NormFloat64()*2 + 0.5
		if (i/b.inner)%b.r == 2 {
			v = 1000 + 0.01*rng.NormFloat64()
		}
		x[i] = float32(v)
	}
	count := float64(b.outer * b.inner)
	for _, procs := range []int{1, 2} {
		old := runtime.GOMAXPROCS(procs)
		mean, variance := bnStats(x, b)
		runtime.GOMAXPROCS(old)
		for p := 0; p < b.r; p++ {
			var s float64
			for o := 0; o < b.outer; o++ {
				for _, v := range x[(o*b.r+p)*b.inner : (o*b.r+p+1)*b.inner] {
					s += float64(v)
				}
			}
			m := s / count
			var q float64
			for o := 0; o < b.outer; o++ {
				for _, v := range x[(o*b.r+p)*b.inner : (o*b.r+p+1)*b.inner] {
					q += (float64(v) - m) * (float64(v) - m)
				}
			}
			assert.InDelta(t, m, mean[p], 1e-12*(1+math.Abs(m)), "mean[%d], GOMAXPROCS %d", p, procs)
			assert.InDelta(t, q/count, variance[p], 1e-9*q/count, "variance[%d], GOMAXPROCS %d", p, procs)
		}
	}
}

// benchBatchNorm times training-mode BatchNormalization on X of shape
// (32, c, hw, hw), ResNet-18's activations at batch 32 and 64×64 images.
func benchBatchNorm(b *testing.B, c, hw int) {
	spec, ok := kern.Lookup("", "BatchNormalization", 15)
	if !ok {
		b.Fatal("no BatchNormalization kernel")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, 32*c*hw*hw)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	param := func(v float32) *graph.Tensor {
		p := make([]float32, c)
		for i := range p {
			p[i] = v
		}
		return graph.FromFloat32(p, c)
	}
	n := &graph.Node{Name: "bn", OpType: "BatchNormalization", Outputs: []string{"y", "rm", "rv"}}
	n.SetAttr(&graph.Attr{Name: "training_mode", Type: graph.AttrInt, I: 1})
	in := []*graph.Tensor{graph.FromFloat32(xs, 32, c, hw, hw), param(1.5), param(0.25), param(0), param(1)}
	ctx := &kern.Context{Opset: 15}
	b.SetBytes(int64(4 * len(xs)))
	for b.Loop() {
		if _, err := spec.Fn(ctx, n, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBatchNormStem(b *testing.B)   { benchBatchNorm(b, 64, 32) }
func BenchmarkBatchNormLayer3(b *testing.B) { benchBatchNorm(b, 256, 4) }

// TestBNRowLoops checks the row loops of the batch-norm forward (the AVX2
// ones on amd64, with a Go tail for lengths that are not a multiple of 8)
// against float64 sums to 1e-12 relative, and the affine map (rounded
// after the product and the sum, Relu'd or not) exactly, including a
// NaN and a zero result under the Relu.
func TestBNRowLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 32, 37, 45, 64, 1003} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(3 + rng.NormFloat64())
		}
		const x0 = 2.75
		var ws, wq float64
		for _, v := range x {
			d := float64(v) - x0
			ws, wq = ws+d, wq+d*d
		}
		s, q := bnRowSums(x, x0)
		assert.InDelta(t, ws, s, 1e-12*(1+math.Abs(ws))*float64(n+1), "n = %d", n)
		assert.InDelta(t, wq, q, 1e-12*(1+math.Abs(wq))*float64(n+1), "n = %d", n)
		if n > 3 {
			x[1] = float32(math.NaN())
			x[2] = 3 // maps to +0 below
			x[3] = 3.5
		}
		const mul, add = float32(-2), float32(6)
		for _, relu := range []bool{false, true} {
			y := make([]float32, n)
			bnRowApply(y, x, mul, add, relu)
			for i, v := range x {
				p := v * mul
				want := p + add
				if relu && want < 0 {
					want = 0
				}
				if want != want {
					assert.True(t, y[i] != y[i], "n = %d, element %d: %v, want NaN", n, i, y[i])
					continue
				}
				assert.Equal(t, math.Float32bits(want), math.Float32bits(y[i]), "n = %d, element %d, relu %v", n, i, relu)
			}
		}
	}
}

// TestBNTrainShortRows checks the training forward on rows shorter than
// bnVecMin (bnApplyShort's one pass over each block of channels): the
// batch statistics against float64 sums, Y against the float64 affine
// map of the float64 statistics (to float32 rounding) and bit for bit
// against the per-channel map bnApplyChannel with the same statistics,
// with and without the Relu, including a NaN input.
func TestBNTrainShortRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, b := range []blocks{{outer: 3, r: 5, inner: 4}, {outer: 7, r: 9, inner: 1}, {outer: 2, r: 3, inner: 31}} {
		for _, relu := range []bool{false, true} {
			x := make([]float32, b.outer*b.r*b.inner)
			for i := range x {
				x[i] = float32(1 + rng.NormFloat64())
			}
			x[len(x)-1] = float32(math.NaN())
			scale := make([]float64, b.r)
			bias := make([]float64, b.r)
			for p := range scale {
				scale[p], bias[p] = rng.NormFloat64(), rng.NormFloat64()
			}
			const eps = 1e-5
			y := make([]float32, len(x))
			mean, variance := bnTrain(x, y, b, scale, bias, eps, relu)
			want := make([]float32, len(x))
			for p := 0; p < b.r; p++ {
				var s, q float64
				cnt := float64(b.outer * b.inner)
				for o := 0; o < b.outer; o++ {
					for i := 0; i < b.inner; i++ {
						v := float64(x[(o*b.r+p)*b.inner+i])
						s += v
						q += v * v
					}
				}
				m := s / cnt
				vr := q/cnt - m*m
				if p == b.r-1 {
					assert.True(t, math.IsNaN(mean[p]), "mean of the NaN channel")
				} else {
					assert.InDelta(t, m, mean[p], 1e-12*(1+math.Abs(m)))
					assert.InDelta(t, vr, variance[p], 1e-12*(1+vr))
				}
				for o := 0; o < b.outer; o++ {
					for i := 0; i < b.inner; i++ {
						k := (o*b.r+p)*b.inner + i
						r := (float64(x[k])-m)/math.Sqrt(vr+eps)*scale[p] + bias[p]
						if relu && r < 0 {
							r = 0
						}
						if math.IsNaN(r) {
							assert.True(t, math.IsNaN(float64(y[k])), "y[%d]", k)
						} else {
							assert.InDelta(t, r, float64(y[k]), 1e-5*(1+math.Abs(r)), "y[%d]", k)
						}
					}
				}
				bnApplyChannel(x, want, b, p, scale[p], bias[p], mean[p], variance[p], eps, relu)
			}
			for k := range y {
				if !assert.Equal(t, math.Float32bits(want[k]), math.Float32bits(y[k]), "%v relu=%v: y[%d] = %v, per channel %v", b, relu, k, y[k], want[k]) {
					return
				}
			}
		}
	}
}
