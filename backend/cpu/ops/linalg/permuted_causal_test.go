package linalg

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// lowerTriangular is a random [BH, T, T] tensor with exact zeros strictly
// above the diagonal of each matrix (a causal softmax, or its gradient).
func lowerTriangular(r *rand.Rand, bh, t int) *graph.Tensor {
	x := randF32(r, bh, t, t)
	d := x.Float32s()
	for b := 0; b < bh; b++ {
		for i := 0; i < t; i++ {
			for j := i + 1; j < t; j++ {
				d[(b*t+i)*t+j] = 0
			}
		}
	}
	return x
}

// TestPermutedMatMulCausal: attention's six products (and the other
// structures the kernel knows) with the hints of MarkCausalAttention give
// the unhinted product's result bit for bit while T fits one k block of
// the GEMM (T ≤ 256), and agree with a float64 reference above that; the
// results the hints let the kernel skip hold the fill.
func TestPermutedMatMulCausal(t *testing.T) {
	for _, T := range []int{64, 128, 131, 200, 300} {
		testPermutedCausal(t, T, 24, 16)
	}
}

func testPermutedCausal(t *testing.T, T, BH, D int) {
	r := rand.New(rand.NewPCG(uint64(T), 3))
	q, k, v, dOut := randF32(r, T, BH, D), randF32(r, T, BH, D), randF32(r, T, BH, D), randF32(r, T, BH, D)
	p, dS := lowerTriangular(r, BH, T), lowerTriangular(r, BH, T)
	x := randF32(r, BH, D, T)
	heads := viewSteps{perm: []int64{1, 0, 2}}
	headsT := viewSteps{perm: []int64{1, 0, 2}, swap: true}
	none := viewSteps{}
	negInf := float32(math.Inf(-1))
	cases := []struct {
		name   string
		grad   int64
		permY  []int64
		bases  []*graph.Tensor
		steps  []viewSteps
		lower  []int64
		lowerY bool
		fill   float32
	}{
		{"scores q·kᵀ (C lower)", 0, nil, []*graph.Tensor{q, k}, []viewSteps{heads, headsT}, nil, true, negInf},
		{"scores stored transposed (C upper)", 0, []int64{0, 2, 1}, []*graph.Tensor{q, k}, []viewSteps{heads, headsT}, nil, true, negInf},
		{"P·v (A lower)", 0, []int64{1, 0, 2}, []*graph.Tensor{p, v}, []viewSteps{none, heads}, []int64{0}, false, 0},
		{"dP = dO·vᵀ (C lower)", 1, nil, []*graph.Tensor{dOut, p, v}, []viewSteps{heads, none, heads}, nil, true, 0},
		{"dv = Pᵀ·dO (A upper)", 2, []int64{1, 0, 2}, []*graph.Tensor{dOut, p, v}, []viewSteps{heads, none, heads}, []int64{1}, false, 0},
		{"dq = dS·k (A lower)", 1, nil, []*graph.Tensor{dS, q, k}, []viewSteps{none, heads, headsT}, []int64{0}, false, 0},
		{"dk = qᵀ·dS, stored [T, BH, D] (B lower, C column-major)", 2, []int64{2, 0, 1}, []*graph.Tensor{dS, q, k}, []viewSteps{none, heads, headsT}, []int64{0}, false, 0},
		{"x·P (B lower)", 0, nil, []*graph.Tensor{x, p}, []viewSteps{none, none}, []int64{1}, false, 0},
		{"dY·Pᵀ (B upper)", 1, nil, []*graph.Tensor{x, x, p}, []viewSteps{none, none, none}, []int64{2}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name+"/T="+strconv.Itoa(T), func(t *testing.T) {
			plain := permutedNode(c.grad, c.permY, c.bases, c.steps)
			plain.SetAttr(graph.FloatAttr("alpha", 0.125))
			want := run(t, permutedMatMulKernel, plain, c.bases...)[0].Float32s()
			hinted := permutedNode(c.grad, c.permY, c.bases, c.steps)
			hinted.SetAttr(graph.FloatAttr("alpha", 0.125))
			if c.lower != nil {
				hinted.SetAttr(graph.IntsAttr("lower", c.lower...))
			}
			if c.lowerY {
				hinted.SetAttr(graph.IntAttr("lowerY", 1))
				hinted.SetAttr(graph.FloatAttr("fillY", c.fill))
			}
			cuts := causalCuts.Load()
			got := run(t, permutedMatMulKernel, hinted, c.bases...)[0].Float32s()
			assert.Equal(t, cuts+1, causalCuts.Load(), "the product was cut")
			require.Len(t, got, len(want))
			ref := reference64(t, c.grad, c.permY, c.bases, c.steps)
			// above: element i of Y lies above the diagonal of R (where
			// the hints let the kernel write the fill instead).
			above := func(i int) bool {
				if !c.lowerY {
					return false
				}
				row, col := i/T%T, i%T // [BH, T, T]
				if c.permY != nil {    // [BH, T(col), T(row)]
					row, col = col, row
				}
				return col > row
			}
			filled := 0
			for i := range want {
				if above(i) && got[i] == c.fill && want[i] != c.fill {
					filled++
					continue
				}
				if T <= 256 {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "element %d: bit for bit (%v, %v)", i, want[i], got[i])
				}
				w := 0.125 * ref[i]
				require.InDelta(t, w, float64(got[i]), 1e-5*math.Max(1, math.Abs(w)), "element %d against float64", i)
			}
			if c.lowerY {
				// Outside the diagonal blocks: at least a quarter of the
				// T(T-1)/2 elements above the diagonal.
				assert.Greater(t, filled, BH*T*(T-1)/8, "elements filled")
			}
		})
	}
}

// TestPermutedMatMulCausalIgnored: hints the kernel cannot follow (too
// small a T, a hint on an input read through a view, a matrix that is
// not square) leave the product whole, with the unhinted result.
func TestPermutedMatMulCausalIgnored(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	heads := viewSteps{perm: []int64{1, 0, 2}}
	headsT := viewSteps{perm: []int64{1, 0, 2}, swap: true}
	small := lowerTriangular(r, 24, 32)
	q, k := randF32(r, 96, 24, 16), randF32(r, 64, 24, 16)
	cases := []struct {
		name  string
		grad  int64
		bases []*graph.Tensor
		steps []viewSteps
		attr  *graph.Attr
	}{
		{"T below the minimum", 0, []*graph.Tensor{small, randF32(r, 32, 24, 16)}, []viewSteps{{}, heads}, graph.IntsAttr("lower", 0)},
		{"hint on a view", 0, []*graph.Tensor{q, q}, []viewSteps{heads, headsT}, graph.IntsAttr("lower", 0)},
		{"rectangular scores", 0, []*graph.Tensor{q, k}, []viewSteps{heads, headsT}, graph.IntAttr("lowerY", 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := run(t, permutedMatMulKernel, permutedNode(c.grad, nil, c.bases, c.steps), c.bases...)[0]
			n := permutedNode(c.grad, nil, c.bases, c.steps)
			n.SetAttr(c.attr)
			cuts := causalCuts.Load()
			got := run(t, permutedMatMulKernel, n, c.bases...)[0]
			assert.Equal(t, cuts, causalCuts.Load(), "not cut")
			assert.Equal(t, want.Float32s(), got.Float32s())
		})
	}
}

// BenchmarkAttentionCausalGPT times attention's six products at the GPT's
// shapes (T=128, batch 4 × 12 heads of 64, as the step lays them out)
// whole and cut by the causal hints (as one product skipping tiles, or as
// GEMMs over blocks of two sizes), alternately;
// the metrics: the whole product's GFLOP/s and the cut one's time over
// the whole one's.
func BenchmarkAttentionCausalGPT(b *testing.B) {
	const T, BH, D = 128, 48, 64
	r := rand.New(rand.NewPCG(1, 2))
	q, k := randF32(r, T, BH, D), randF32(r, T, BH, D)
	qc := randF32(r, BH, T, D)
	p := lowerTriangular(r, BH, T)
	ctx := &kern.Context{Opset: 17}
	flop := float64(2 * BH * T * T * D)
	cases := attentionProducts(q, k, qc, p)
	// The hints the mark-causal-attention pass gives each product.
	hints := []*graph.Attr{graph.IntAttr(graph.CausalLowerYAttr, 1), graph.IntsAttr(graph.CausalLowerAttr, 0),
		graph.IntAttr(graph.CausalLowerYAttr, 1), graph.IntsAttr(graph.CausalLowerAttr, 1),
		graph.IntsAttr(graph.CausalLowerAttr, 0), graph.IntsAttr(graph.CausalLowerAttr, 0)}
	for ci, c := range cases {
		for _, bs := range []int{0, 32, 64} {
			name := "/tiles"
			if bs > 0 {
				name = "/block" + strconv.Itoa(bs)
			}
			b.Run(c.name+name, func(b *testing.B) {
				whole := permutedNode(c.grad, c.permY, c.bases, c.steps)
				cut := permutedNode(c.grad, c.permY, c.bases, c.steps)
				cut.SetAttr(hints[ci])
				defer func(old int, tiles bool) { causalBlockSize, causalTiles = old, tiles }(causalBlockSize, causalTiles)
				causalBlockSize, causalTiles = max(bs, 64), bs == 0
				for _, n := range []*graph.Node{whole, cut} {
					bindReuse(b, n)
				}
				cuts := causalCuts.Load()
				// Alternating, so that a disturbance hits both.
				var tWhole, tCut time.Duration
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if _, err := permutedMatMulKernel(ctx, whole, c.bases); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if _, err := permutedMatMulKernel(ctx, cut, c.bases); err != nil {
						b.Fatal(err)
					}
					tWhole += t1.Sub(t0)
					tCut += time.Since(t1)
				}
				if causalCuts.Load()-cuts != int64(b.N) {
					b.Fatal("not cut")
				}
				b.ReportMetric(flop*float64(b.N)/tWhole.Seconds()/1e9, "whole-GFLOP/s")
				b.ReportMetric(tCut.Seconds()/tWhole.Seconds(), "cut/whole")
			})
		}
	}
}
