package linalg_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/graph"
)

// causalMask is PyTorch's triu(full((T, T), neg), diagonal=1): neg
// strictly above the diagonal, 0 elsewhere.
func causalMask(T int, neg float32) *graph.Tensor {
	d := make([]float32, T*T)
	for i := 0; i < T; i++ {
		for j := i + 1; j < T; j++ {
			d[i*T+j] = neg
		}
	}
	return graph.FromFloat32(d, T, T)
}

// runAttention compiles m on the CPU and runs it twice (the second run in
// the memory plan), returning the outputs of the second run, how many
// products of that run followed a causal hint, and how many compiled
// nodes carry one (a causal attention node, or a product, Softmax or
// gradient with its own hint).
func runAttention(t *testing.T, m *graph.Model, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, int64, int) {
	t.Helper()
	exe, err := (&cpu.Backend{}).Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	var out map[string]*graph.Tensor
	var cuts int64
	for i := 0; i < 2; i++ {
		before := linalg.CausalCuts.Load()
		out, err = exe.Run(context.Background(), inputs)
		require.NoError(t, err)
		cuts = linalg.CausalCuts.Load() - before
	}
	hinted := 0
	pi, ok := exe.(backend.PlanInspector)
	require.True(t, ok)
	for _, n := range pi.LastRunNodes() {
		if n.Attr(graph.CausalLowerAttr) != nil || n.Attr(graph.CausalLowerYAttr) != nil || n.Attr(graph.CausalMaskedAttr) != nil ||
			n.Attr(graph.AttnCausal) != nil || n.Attr(graph.AttnDP+graph.CausalLowerYAttr) != nil {
			hinted++
		}
	}
	res := map[string]*graph.Tensor{}
	for k, v := range out {
		res[k] = v.Clone()
	}
	return res, cuts, hinted
}

// TestCausalAttentionSkipsMaskedHalf: attention with a causal mask (T =
// 128) runs as a causal AttentionSoftmax and its gradient whose six
// products are cut to the unmasked half, and gives the
// output and the gradient of the whole products bit for bit (the hints
// switched off in the kernel); both agree with a float64 reference written
// out here (output) and its central differences (gradient). A mask with
// one −inf moved below the diagonal, or with −1e9 for −inf, is not causal:
// no hint, the whole products.
func TestCausalAttentionSkipsMaskedHalf(t *testing.T) {
	const B, T, H, D = 2, 128, 2, 16
	rng := rand.New(rand.NewPCG(11, 12))
	inputs := attentionInputs(rng, B, T, H, D)
	x, dy := inputs["x"], inputs["dy"]
	negInf := float32(math.Inf(-1))
	mask := causalMask(T, negInf)
	m := maskedAttentionGraph(t, B, T, H, D, false, mask)
	got, cuts, hinted := runAttention(t, m, inputs)
	assert.Equal(t, 2, hinted, "the causal AttentionSoftmax and its gradient, whose products carry the hints")
	// T = 8·D: the gradient recomputes P (graph.RecomputeMinRatio), so
	// the scores' product runs again, cut as in the forward.
	assert.Equal(t, int64(7), cuts, "the six products and the recomputed scores were cut")
	whole, cuts0 := func() (map[string]*graph.Tensor, int64) {
		*linalg.FollowCausalHints = false
		defer func() { *linalg.FollowCausalHints = true }() // also when runAttention fails
		out, cuts, _ := runAttention(t, m, inputs)
		return out, cuts
	}()
	assert.Zero(t, cuts0)
	require.Len(t, got, 2)
	for name, w := range whole {
		require.Equal(t, w.Shape, got[name].Shape, name)
		assert.Equal(t, w.Float32s(), got[name].Float32s(), "%s: cut and whole products differ", name)
	}

	// Reference: the masked attention in float64, L = Σ y·dy.
	mk := mask.Float32s()
	forward := func(xs []float64) (y []float64, loss float64) {
		const C = H * D
		y = make([]float64, B*T*C)
		at := func(b, n, s, h, d int) float64 { return xs[((b*T+n)*3+s)*C+h*D+d] }
		scale := 0.17677669
		row := make([]float64, T)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for i := 0; i < T; i++ {
					mx := math.Inf(-1)
					for j := 0; j < T; j++ {
						s := 0.0
						for d := 0; d < D; d++ {
							s += at(b, i, 0, h, d) * at(b, j, 1, h, d)
						}
						row[j] = float64(float32(scale))*s + float64(mk[i*T+j])
						mx = math.Max(mx, row[j])
					}
					sum := 0.0
					for j := range row {
						row[j] = math.Exp(row[j] - mx)
						sum += row[j]
					}
					for d := 0; d < D; d++ {
						o := 0.0
						for j := 0; j < T; j++ {
							o += row[j] / sum * at(b, j, 2, h, d)
						}
						y[(b*T+i)*C+h*D+d] = o
					}
				}
			}
		}
		for i, v := range y {
			loss += v * float64(dy.Float32s()[i])
		}
		return y, loss
	}
	xs := make([]float64, x.Size())
	for i, v := range x.Float32s() {
		xs[i] = float64(v)
	}
	yRef, _ := forward(xs)
	for i, w := range yRef {
		require.InDelta(t, w, float64(got["y"].Float32s()[i]), 1e-5*math.Max(1, math.Abs(w)), "y[%d]", i)
	}
	var dx []float32
	for name, v := range got {
		if name != "y" {
			dx = v.Float32s()
		}
	}
	require.Len(t, dx, len(xs))
	for probe := 0; probe < 24; probe++ {
		i := rng.IntN(len(xs))
		const h = 1e-4
		xs[i] += h
		_, up := forward(xs)
		xs[i] -= 2 * h
		_, down := forward(xs)
		xs[i] += h
		fd := (up - down) / (2 * h)
		assert.InDelta(t, fd, float64(dx[i]), 1e-3*math.Max(1, math.Abs(fd)), "dx[%d]: central difference %v", i, fd)
	}

	moved := causalMask(T, negInf)
	moved.Float32s()[3*T+70], moved.Float32s()[70*T+3] = 0, negInf
	for _, c := range []struct {
		name string
		mask *graph.Tensor
		same bool // the output equals the causal one
	}{
		{"one −inf moved below the diagonal", moved, false},
		// exp(−1e9 − max) underflows to 0 in float32 as exp(−inf) is 0,
		// so the whole products give the causal result here.
		{"−1e9 for −inf", causalMask(T, -1e9), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := maskedAttentionGraph(t, B, T, H, D, false, c.mask)
			out, cuts, hinted := runAttention(t, m, inputs)
			assert.Zero(t, hinted, "no hints")
			assert.Zero(t, cuts, "no product cut")
			assert.Equal(t, c.same, slices.Equal(got["y"].Float32s(), out["y"].Float32s()), "output equal to the causal mask's")
		})
	}
}

// TestCausalAttentionFused: attention with a causal mask added to its
// scores runs as one causal AttentionSoftmax and one gradient node (no
// Add, Softmax, SoftmaxGrad or PermutedMatMul left beside them) and gives
// the output and the gradient of x that the unfused nodes give (the
// products with MarkCausalAttention's hints, the masked Softmax) bit for
// bit: at T = 17 (products whole), 64 and 128 (the six products cut) and
// 200 (a last block of 8 rows), and with one head of 300 (split over
// the cores, whole products), and so does the forward alone (P not
// kept); again at T = 100 (blocks of 50) and 200 with the cut products
// as GEMMs over blocks instead of one call each (their reads past the
// diagonal reach a block further). A mask with a finite value on the diagonal (added to the scores
// there) or −1e9 for −inf is not fused.
func TestCausalAttentionFused(t *testing.T) {
	const B, H, D = 2, 2, 16
	for _, c := range []struct {
		b, h, T int
		blocks  bool
	}{{B, H, 17, false}, {B, H, 64, false}, {B, H, 128, false}, {B, H, 200, false}, {1, 1, 300, false}, {B, H, 100, true}, {B, H, 200, true}} {
		T := c.T
		t.Run(fmt.Sprintf("heads=%d,T=%d,blocks=%v", c.b*c.h, T, c.blocks), func(t *testing.T) {
			defer func(was bool) { *linalg.CausalTiles = was }(*linalg.CausalTiles)
			*linalg.CausalTiles = !c.blocks
			rng := rand.New(rand.NewPCG(uint64(T), 21))
			inputs := attentionInputs(rng, c.b, T, c.h, D)
			m := maskedAttentionGraph(t, int64(c.b), int64(T), int64(c.h), D, false, causalMask(T, float32(math.Inf(-1))))
			cuts := linalg.CausalCuts.Load()
			fused, fops := runCounting(t, &cpu.Backend{}, m, inputs)
			switch {
			case c.b*c.h == 1 && kern.Workers() > 1:
				// One head is split over the cores itself: whole products.
				assert.Equal(t, cuts, linalg.CausalCuts.Load(), "no product cut for one head")
			case T >= 64:
				// T ≥ 4·D: the gradient recomputes P (graph.RecomputeMinRatio)
				// with a seventh product, the scores again, cut too.
				require.GreaterOrEqual(t, T, graph.RecomputeMinRatio*D)
				assert.Equal(t, int64(14), linalg.CausalCuts.Load()-cuts, "six products and the recomputed scores cut in each of the two runs")
			default:
				assert.Equal(t, cuts, linalg.CausalCuts.Load(), "no product cut below T = 64")
			}
			plain, pops := runCounting(t, withoutAttentionSoftmax(), m, inputs)
			assert.Equal(t, 1, fops[graph.AttentionSoftmax], "%v", fops)
			assert.Equal(t, 1, fops[graph.AttentionSoftmaxGrad]+fops[graph.AttentionSoftmaxGradConcat], "%v", fops)
			for _, op := range []string{graph.PermutedMatMul, "Add", "Softmax", "SoftmaxGrad"} {
				assert.Zero(t, fops[op], "%s left beside the attention nodes: %v", op, fops)
			}
			assert.Equal(t, 6, pops[graph.PermutedMatMul], "%v", pops)
			assert.Equal(t, 1, pops["Softmax"], "%v", pops)
			assertSameOutputs(t, plain, fused)

			// Inference: the output alone, each head's P in the kernel's
			// buffer.
			fusedY, fops := runCounting(t, &cpu.Backend{}, forwardOnly(m), inputs)
			assert.Equal(t, 1, fops[graph.AttentionSoftmax], "%v", fops)
			assert.Equal(t, plain["y"].Float32s(), fusedY["y"].Float32s(), "the forward alone")
		})
	}
	rng := rand.New(rand.NewPCG(5, 21))
	const T = 64
	inputs := attentionInputs(rng, B, T, H, D)
	diagonal := causalMask(T, float32(math.Inf(-1)))
	diagonal.Float32s()[5*T+5] = 0.5
	for name, mask := range map[string]*graph.Tensor{"0.5 on the diagonal": diagonal, "−1e9 for −inf": causalMask(T, -1e9)} {
		t.Run(name, func(t *testing.T) {
			m := maskedAttentionGraph(t, B, T, H, D, false, mask)
			fused, fops := runCounting(t, &cpu.Backend{}, m, inputs)
			assert.Zero(t, fops[graph.AttentionSoftmax], "%v", fops)
			assert.Equal(t, 1, fops["Add"], "%v", fops)
			plain, _ := runCounting(t, withoutAttentionSoftmax(), m, inputs)
			assert.Equal(t, plain["y"].Float32s(), fused["y"].Float32s())
		})
	}
}
