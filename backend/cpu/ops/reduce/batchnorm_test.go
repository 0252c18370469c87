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
		s, q := bnRowSums(x, x0, nil, nil)
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
			bnRowApply(y, x, mul, add, relu, nil)
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
// bnVecMin (bnShortTask's blocks of channels, with the vector loops'
// column tails): the batch statistics against two-pass float64 sums, Y
// against the float64 affine map of those statistics (to float32
// rounding) and bit for bit against the per-channel map bnApplyChannel
// with the same statistics, with and without the Relu, on one goroutine
// and two (the same bits), including a NaN input and a channel far from
// zero (mean 1000, standard deviation 0.01) where an unshifted one-pass
// variance would lose every digit. The inference map bnApply on the same
// rows must give the same Y.
func TestBNTrainShortRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	shapes := []blocks{
		{outer: 3, r: 5, inner: 4}, {outer: 7, r: 9, inner: 1}, {outer: 2, r: 3, inner: 31},
		{outer: 1, r: 6, inner: 4}, {outer: 5, r: 301, inner: 4}, {outer: 3, r: 70, inner: 3},
		{outer: 4, r: 130, inner: 2}, {outer: 6, r: 40, inner: 16}, {outer: 2, r: 20, inner: 9},
	}
	for _, b := range shapes {
		for _, relu := range []bool{false, true} {
			x := make([]float32, b.outer*b.r*b.inner)
			for i := range x {
				v := 1 + rng.NormFloat64()
				if (i/b.inner)%b.r == 1 {
					v = 1000 + 0.01*rng.NormFloat64()
				}
				x[i] = float32(v)
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
			cnt := float64(b.outer * b.inner)
			for p := 0; p < b.r; p++ {
				var s float64
				for o := 0; o < b.outer; o++ {
					for i := 0; i < b.inner; i++ {
						s += float64(x[(o*b.r+p)*b.inner+i])
					}
				}
				m := s / cnt
				var q float64
				for o := 0; o < b.outer; o++ {
					for i := 0; i < b.inner; i++ {
						d := float64(x[(o*b.r+p)*b.inner+i]) - m
						q += d * d
					}
				}
				vr := q / cnt
				if p == b.r-1 {
					assert.True(t, math.IsNaN(mean[p]), "%v: mean of the NaN channel", b)
				} else {
					assert.InDelta(t, m, mean[p], 1e-12*(1+math.Abs(m)), "%v: mean[%d]", b, p)
					assert.InDelta(t, vr, variance[p], 1e-9*vr+1e-15, "%v: variance[%d]", b, p)
				}
				for o := 0; o < b.outer; o++ {
					for i := 0; i < b.inner; i++ {
						k := (o*b.r+p)*b.inner + i
						r := (float64(x[k])-m)/math.Sqrt(vr+eps)*scale[p] + bias[p]
						if relu && r < 0 {
							r = 0
						}
						if math.IsNaN(r) {
							assert.True(t, math.IsNaN(float64(y[k])), "%v: y[%d]", b, k)
						} else {
							// The map runs in float32: x·mul and the sum round
							// (which matters for the channel far from zero).
							a := scale[p] / math.Sqrt(vr+eps)
							tol := 1e-5*(1+math.Abs(r)) + 0x1p-22*(math.Abs(float64(x[k])*a)+math.Abs(bias[p]-m*a))
							assert.InDelta(t, r, float64(y[k]), tol, "%v: y[%d]", b, k)
						}
					}
				}
				bnApplyChannel(x, want, b, p, scale[p], bias[p], mean[p], variance[p], eps, relu)
			}
			y1 := make([]float32, len(x))
			old := runtime.GOMAXPROCS(1)
			mean1, variance1 := bnTrain(x, y1, b, scale, bias, eps, relu)
			runtime.GOMAXPROCS(2)
			mean2, variance2 := bnTrain(x, make([]float32, len(x)), b, scale, bias, eps, relu)
			runtime.GOMAXPROCS(old)
			for p := range mean {
				assert.Equal(t, math.Float64bits(mean1[p]), math.Float64bits(mean2[p]), "%v: mean[%d], 1 and 2 goroutines", b, p)
				assert.Equal(t, math.Float64bits(variance1[p]), math.Float64bits(variance2[p]), "%v: variance[%d], 1 and 2 goroutines", b, p)
			}
			yi := make([]float32, len(x))
			bnApply(x, nil, yi, b, scale, bias, mean, variance, eps, relu)
			for k := range y {
				if !assert.Equal(t, math.Float32bits(want[k]), math.Float32bits(y[k]), "%v relu=%v: y[%d] = %v, per channel %v", b, relu, k, y[k], want[k]) ||
					!assert.Equal(t, math.Float32bits(want[k]), math.Float32bits(yi[k]), "%v relu=%v: inference y[%d] = %v, per channel %v", b, relu, k, yi[k], want[k]) ||
					!assert.Equal(t, math.Float32bits(y[k]), math.Float32bits(y1[k]), "%v relu=%v: y[%d] on one goroutine", b, relu, k) {
					return
				}
			}
		}
	}
}

// TestBNShortLoops checks bnShortSums and bnShortApply (the AVX2 loops on
// amd64, with a Go tail for column counts that are not a multiple of 8)
// directly, on rows with a gap between them: the sums against float64
// sums to 1e-12 relative, the map exactly (rounded after the product and
// the sum), Relu'd or not, with a NaN and a zero result, and the gap
// between the rows untouched.
func TestBNShortLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 24, 31, 40, 100, 256} {
		for _, rows := range []int{1, 2, 5} {
			stride := n + 3
			x := make([]float32, (rows-1)*stride+n)
			for i := range x {
				x[i] = float32(3 + rng.NormFloat64())
			}
			x0 := make([]float64, n)
			mul, add := make([]float32, n), make([]float32, n)
			for j := range x0 {
				x0[j] = 2.5 + float64(j%3)
				mul[j], add[j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			s, q := make([]float64, n), make([]float64, n)
			for j := range s {
				s[j], q[j] = 99, 99 // overwritten, not added to
			}
			bnShortSums(x, stride, rows, x0, s, q)
			for j := range n {
				var ws, wq float64
				for o := range rows {
					d := float64(x[o*stride+j]) - x0[j]
					ws, wq = ws+d, wq+d*d
				}
				assert.InDelta(t, ws, s[j], 1e-12*(1+math.Abs(ws)), "n %d rows %d: s[%d]", n, rows, j)
				assert.InDelta(t, wq, q[j], 1e-12*(1+wq), "n %d rows %d: q[%d]", n, rows, j)
			}
			x[0] = float32(math.NaN())
			if n > 2 {
				x[1] = -add[1] / mul[1] // near zero after the map
			}
			for _, relu := range []bool{false, true} {
				y := make([]float32, len(x))
				for i := range y {
					y[i] = 7
				}
				bnShortApply(y, x, stride, rows, mul, add, relu)
				for i := range y {
					j := i % stride
					if j >= n {
						assert.Equal(t, float32(7), y[i], "n %d rows %d: gap element %d written", n, rows, i)
						continue
					}
					p := x[i] * mul[j]
					want := p + add[j]
					if relu && want < 0 {
						want = 0
					}
					if want != want {
						assert.True(t, y[i] != y[i], "n %d rows %d: y[%d] = %v, want NaN", n, rows, i, y[i])
						continue
					}
					assert.Equal(t, math.Float32bits(want), math.Float32bits(y[i]), "n %d rows %d relu %v: y[%d]", n, rows, relu, i)
				}
			}
		}
	}
}
