package gradient

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestBNGradRowLoops checks the row loops of the batch-norm gradient (the
// AVX2 ones on amd64, with a Go tail for lengths that are not a multiple
// of 8), without and with a Relu mask (r > 0; r has zeros of both signs,
// NaN and negatives), against float64 sums and the rounded affine map
// written out here: the sums to 1e-12 relative, dX exactly (each
// operation is rounded as in the definition).
func TestBNGradRowLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), -1, 2}
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 32, 37, 45, 64, 1003} {
		x := make([]float32, n)
		dy := make([]float32, n)
		r := make([]float32, n)
		for i := range x {
			x[i] = float32(3 + rng.NormFloat64())
			dy[i] = float32(rng.NormFloat64())
			r[i] = float32(rng.NormFloat64())
			if rng.IntN(4) == 0 {
				r[i] = special[rng.IntN(len(special))]
			}
		}
		for _, mask := range [][]float32{nil, r} {
			g := make([]float64, n)
			for i := range g {
				if mask == nil || mask[i] > 0 {
					g[i] = float64(dy[i])
				}
			}
			const x0 = 2.75
			var wd, wdd, wg, wgd float64
			for i := range x {
				d := float64(x[i]) - x0
				wd, wdd, wg, wgd = wd+d, wdd+d*d, wg+g[i], wgd+g[i]*d
			}
			sd, sdd, sg, sgd := bnGradRowSums(dy, mask, x, x0, nil)
			for _, c := range [][2]float64{{wd, sd}, {wdd, sdd}, {wg, sg}, {wgd, sgd}} {
				assert.InDelta(t, c[0], c[1], 1e-12*(1+math.Abs(c[0]))*float64(n+1), "n = %d, masked %v", n, mask != nil)
			}
			k1, k2, k0 := 0.75, -0.125, 1.0/3
			dx := make([]float32, n)
			bnGradRowApply(dx, dy, mask, x, k1, k2, k0, 0)
			for i := range x {
				p := k1 * g[i]
				q := k2 * float64(x[i])
				want := float32((p + q) + k0)
				require.Equal(t, want, dx[i], "n = %d, element %d, masked %v", n, i, mask != nil)
			}
		}
	}
}

// benchBatchNormGrad times training-mode BatchNormalizationGrad on dy and
// X of shape (32, c, hw, hw), ResNet-18's activations at batch 32 and
// 64×64 images.
func benchBatchNormGrad(b *testing.B, c, hw int) {
	const n = 32
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n*c*hw*hw)
	dy := make([]float32, len(x))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		dy[i] = float32(rng.NormFloat64())
	}
	param := func(v float32) *graph.Tensor {
		p := make([]float32, c)
		for i := range p {
			p[i] = v
		}
		return graph.FromFloat32(p, c)
	}
	node := &graph.Node{Name: "bn", OpType: "BatchNormalizationGrad", Outputs: []string{"dx", "ds", "db", "dm", "dv"}}
	node.SetAttr(&graph.Attr{Name: "training_mode", Type: graph.AttrInt, I: 1})
	in := []*graph.Tensor{graph.FromFloat32(dy, n, c, hw, hw), graph.FromFloat32(x, n, c, hw, hw), param(1.5), param(0), param(1)}
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		if _, err := batchNormGrad(nil, node, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBatchNormGradStem(b *testing.B)   { benchBatchNormGrad(b, 64, 32) }
func BenchmarkBatchNormGradLayer3(b *testing.B) { benchBatchNormGrad(b, 256, 4) }
func BenchmarkBatchNormGradLayer4(b *testing.B) { benchBatchNormGrad(b, 512, 2) }

// TestBatchNormReluGradMatchesUnfused checks BatchNormReluGrad(dR, R, X,
// ...) bit for bit against BatchNormalizationGrad of the masked gradient
// (dR where R > 0, +0 elsewhere, written out here), in float32 and
// float64, training and inference mode, on rows shorter than the vector
// loops take and longer (with a tail); R has zeros of both signs and NaNs.
func TestBatchNormReluGradMatchesUnfused(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	special := []float64{0, math.Copysign(0, -1), math.NaN(), -1}
	for _, inner := range []int{4, 35} {
		for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
			for _, mode := range []int64{0, 1} {
				const n, c = 3, 5
				size := n * c * inner
				x, dr, r := make([]float64, size), make([]float64, size), make([]float64, size)
				masked := make([]float64, size)
				for i := range x {
					x[i] = 1 + rng.NormFloat64()
					dr[i] = rng.NormFloat64()
					r[i] = rng.NormFloat64()
					if rng.IntN(5) == 0 {
						r[i] = special[rng.IntN(len(special))]
					}
					if r[i] > 0 {
						masked[i] = dr[i]
					}
				}
				tensor := func(v []float64, shape ...int) *graph.Tensor {
					t64 := graph.FromFloat64(append([]float64(nil), v...), shape...)
					if dt == graph.Float64 {
						return t64
					}
					f := make([]float32, len(v))
					for i, e := range v {
						f[i] = float32(e)
					}
					return graph.FromFloat32(f, shape...)
				}
				param := func(base float64) *graph.Tensor {
					v := make([]float64, c)
					for i := range v {
						v[i] = base + 0.25*rng.NormFloat64()
					}
					return tensor(v, c)
				}
				scale, mean, variance := param(1), param(0), param(1)
				node := &graph.Node{Name: "bng", Outputs: []string{"dx", "ds", "db"}}
				node.SetAttr(&graph.Attr{Name: "training_mode", Type: graph.AttrInt, I: mode})
				xs := tensor(x, n, c, inner)
				fused, err := batchNormReluGrad(nil, node, []*graph.Tensor{tensor(dr, n, c, inner), tensor(r, n, c, inner), xs, scale, mean, variance})
				require.NoError(t, err)
				plain, err := batchNormGrad(nil, node, []*graph.Tensor{tensor(masked, n, c, inner), xs, scale, mean, variance})
				require.NoError(t, err)
				require.Len(t, fused, len(plain))
				for i := range plain {
					assert.Equal(t, bnBitsOf(plain[i]), bnBitsOf(fused[i]), "inner %d, %v, training_mode %d, output %d", inner, dt, mode, i)
				}
			}
		}
	}
}

// bnBitsOf returns the bit patterns of a float32 or float64 tensor.
func bnBitsOf(t *graph.Tensor) []uint64 {
	switch d := t.Data.(type) {
	case []float32:
		out := make([]uint64, len(d))
		for i, v := range d {
			out[i] = uint64(math.Float32bits(v))
		}
		return out
	case []float64:
		out := make([]uint64, len(d))
		for i, v := range d {
			out[i] = math.Float64bits(v)
		}
		return out
	}
	return nil
}

// TestBNBackwardShortMatchesChannel checks the channel-block path for short
// float32 rows in training mode (bnBackwardShort, taken by
// bnBackwardMasked) bit for bit against the per-channel path
// (bnBackwardChannel), without and with a Relu mask (zeros of both signs,
// NaN), for row lengths from 1 to just under bnVecMin and channel counts
// that span more than one block and do not divide evenly among workers.
func TestBNBackwardShortMatchesChannel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, inner := range []int{1, 3, 4, 9, 16, bnVecMin - 1} {
		for _, c := range []int{1, 5, bnShortBlock + 3} {
			for _, masked := range []bool{false, true} {
				const n = 3
				size := n * c * inner
				x, dy, dxA, dxB := make([]float32, size), make([]float32, size), make([]float32, size), make([]float32, size)
				var r []float32
				if masked {
					r = make([]float32, size)
				}
				for i := range x {
					x[i] = float32(2 + rng.NormFloat64())
					dy[i] = float32(rng.NormFloat64())
					if masked {
						switch i % 7 {
						case 0:
							r[i] = 0
						case 1:
							r[i] = float32(math.Copysign(0, -1))
						case 2:
							r[i] = float32(math.NaN())
						default:
							r[i] = float32(rng.NormFloat64())
						}
					}
				}
				scale, mean, variance := make([]float64, c), make([]float64, c), make([]float64, c)
				for p := range scale {
					scale[p] = 0.5 + rng.Float64()
				}
				b := layout{outer: n, r: c, inner: inner}
				got := bnBackwardMasked(dy, r, x, dxA, b, scale, mean, variance, 1e-5, true)
				want := bnGrads{make([]float64, c), make([]float64, c), make([]float64, c), make([]float64, c)}
				for p := 0; p < c; p++ {
					bnBackwardChannel(dy, r, x, dxB, b, p, float64(n*inner), scale, mean, variance, 1e-5, true, &want)
				}
				for i := range dxA {
					require.Equal(t, math.Float32bits(dxB[i]), math.Float32bits(dxA[i]), "inner %d c %d masked %v: dx[%d]", inner, c, masked, i)
				}
				for p := 0; p < c; p++ {
					require.Equal(t, math.Float64bits(want.scale[p]), math.Float64bits(got.scale[p]), "dscale[%d]", p)
					require.Equal(t, math.Float64bits(want.bias[p]), math.Float64bits(got.bias[p]), "dB[%d]", p)
					require.Zero(t, got.mean[p])
					require.Zero(t, got.variance[p])
				}
			}
		}
	}
}
