package linalg_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestAttentionSoftmaxFused: attention's core and its gradient as the
// exporter writes them (attentionGraph: the scale a Mul, the gradient's
// a Mul of dS) run as one AttentionSoftmax and one AttentionSoftmaxGrad
// node, with no PermutedMatMul, Softmax, SoftmaxGrad or Mul left, and give
// what the PermutedMatMul, Softmax, SoftmaxGrad and Mul kernels give (the
// plan without the fusion) bit for bit: the attention output and the
// gradient of x, at sizes the packed GEMM takes (heads of 17 and 50
// tokens) and below them, and for the forward alone (inference: P not
// kept, each head's Softmax back in the kernel's buffer).
func TestAttentionSoftmaxFused(t *testing.T) {
	for _, c := range []struct {
		name       string
		b, n, h, d int64
	}{{"packed", 3, 17, 2, 16}, {"wide", 2, 50, 3, 32}, {"small", 2, 5, 2, 4}} {
		t.Run(c.name, func(t *testing.T) {
			m := attentionGraph(t, c.b, c.n, c.h, c.d, false)
			rng := rand.New(rand.NewPCG(uint64(c.n), 12))
			inputs := attentionInputs(rng, int(c.b), int(c.n), int(c.h), int(c.d))
			before := linalg.PermutedFallbacks.Load()
			fused, fops := runCounting(t, &cpu.Backend{}, m, inputs)
			assert.Equal(t, before, linalg.PermutedFallbacks.Load(), "no product took the materialising fallback")
			plain, pops := runCounting(t, withoutAttentionSoftmax(), m, inputs)
			assert.Equal(t, 1, fops[graph.AttentionSoftmax], "%v", fops)
			assert.Equal(t, 1, fops[graph.AttentionSoftmaxGrad], "%v", fops)
			for _, op := range []string{graph.PermutedMatMul, "Softmax", "SoftmaxGrad", "Mul"} {
				assert.Zero(t, fops[op], "%s left beside the attention nodes: %v", op, fops)
			}
			assert.Equal(t, 6, pops[graph.PermutedMatMul], "%v", pops)
			require.Len(t, fused, 2)
			assertSameOutputs(t, plain, fused)

			// Inference: the output alone.
			fusedY, fops := runCounting(t, &cpu.Backend{}, forwardOnly(m), inputs)
			assert.Equal(t, map[string]int{graph.AttentionSoftmax: 1, "Reshape": 2}, fops)
			assert.Equal(t, plain["y"].Float32s(), fusedY["y"].Float32s(), "the forward alone, P in the kernel's buffer")
		})
	}
}

// assertSameOutputs checks that got holds want's outputs, shapes and
// values bit for bit.
func assertSameOutputs(t *testing.T, want, got map[string]*graph.Tensor) {
	t.Helper()
	require.Len(t, got, len(want))
	for name, w := range want {
		require.NotNil(t, got[name], name)
		assert.Equal(t, w.Shape, got[name].Shape, name)
		assert.Equal(t, w.Float32s(), got[name].Float32s(), "%s: fused and unfused differ", name)
	}
}

// forwardOnly is m with its first output alone (inference).
func forwardOnly(m *graph.Model) *graph.Model {
	fwd := *m
	g := *m.Graph
	g.Outputs = g.Outputs[:1]
	fwd.Graph = &g
	return &fwd
}

// runCounting compiles m on b, runs it twice (the second run with the
// memory plan) and returns the second run's outputs and node counts by
// op type; the attention kernels' head buffers are poisoned with NaN
// before the second run.
func runCounting(t *testing.T, b *cpu.Backend, m *graph.Model, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, map[string]int) {
	t.Helper()
	exe, err := b.Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	ops := map[string]int{}
	var out map[string]*graph.Tensor
	for i := 0; i < 2; i++ {
		if i == 1 {
			// What the attention kernels read of their head buffers
			// without writing it first turns the second run's results
			// NaN.
			linalg.PoisonAttentionBuffers(float32(math.NaN()))
		}
		ctx := backend.WithNodeTimer(context.Background(), func(n *graph.Node, _ time.Duration) {
			if i == 1 {
				ops[n.OpType]++
			}
		})
		out, err = exe.Run(ctx, inputs)
		require.NoError(t, err)
	}
	res := map[string]*graph.Tensor{}
	for k, v := range out {
		res[k] = v.Clone()
	}
	return res, ops
}

// TestAttentionSoftmaxKernelsReference: the attention kernels, on nodes
// as fuse-attention-softmax makes them for torchvision's ViT (Q, K, V
// [T, B·H, D] read per head, the scores' scale as alpha, O written back as
// [T, B·H, D], dK through permY [2 0 1], dS scaled by 2), against
// attention and its gradient written out as sums in float64: float32
// through the fused heads, float64 through the unfused kernels (the
// dtypes autocast may give them); without and with a causal mask
// (graph.AttnCausal and the products' hints as the fusion sets them).
// The gradient node that recomputes P (graph.AttnRecomputeP: no P input,
// the forward's qk.* attributes and causal flag) gives the same
// gradients bit for bit, on both paths.
func TestAttentionSoftmaxKernelsReference(t *testing.T) {
	for _, causal := range []bool{false, true} {
		t.Run(fmt.Sprintf("causal=%v", causal), func(t *testing.T) { testAttentionKernelsReference(t, causal) })
	}
}

func testAttentionKernelsReference(t *testing.T, causal bool) {
	const T, BH, D = 7, 3, 5
	const alpha, scale = 0.5, 2.0
	rng := rand.New(rand.NewPCG(21, 22))
	vals := func() []float64 {
		s := make([]float64, T*BH*D)
		for i := range s {
			s[i] = rng.NormFloat64()
		}
		return s
	}
	q, k, v, dO := vals(), vals(), vals(), vals()
	at := func(x []float64, t, h, d int) float64 { return x[(t*BH+h)*D+d] }
	// Reference: P [BH, T, T], O, dQ, dK, dV [T, BH, D].
	p := make([]float64, BH*T*T)
	o, dq, dk, dv := make([]float64, T*BH*D), make([]float64, T*BH*D), make([]float64, T*BH*D), make([]float64, T*BH*D)
	for h := 0; h < BH; h++ {
		ds := make([]float64, T*T)
		for i := 0; i < T; i++ {
			row := p[(h*T+i)*T : (h*T+i+1)*T]
			m := math.Inf(-1)
			for j := range row {
				for d := 0; d < D; d++ {
					row[j] += alpha * at(q, i, h, d) * at(k, j, h, d)
				}
				if causal && j > i {
					row[j] = math.Inf(-1)
				}
				m = math.Max(m, row[j])
			}
			sum := 0.0
			for j := range row {
				row[j] = math.Exp(row[j] - m)
				sum += row[j]
			}
			dot := 0.0
			dp := make([]float64, T)
			for j := range row {
				row[j] /= sum
				for d := 0; d < D; d++ {
					o[(i*BH+h)*D+d] += row[j] * at(v, j, h, d)
					dp[j] += at(dO, i, h, d) * at(v, j, h, d)
				}
				dot += dp[j] * row[j]
			}
			for j := range row {
				ds[i*T+j] = scale * row[j] * (dp[j] - dot)
				for d := 0; d < D; d++ {
					dv[(j*BH+h)*D+d] += row[j] * at(dO, i, h, d)
				}
			}
		}
		for i := 0; i < T; i++ {
			for j := 0; j < T; j++ {
				for d := 0; d < D; d++ {
					dq[(i*BH+h)*D+d] += alpha * ds[i*T+j] * at(k, j, h, d)
					dk[(j*BH+h)*D+d] += alpha * ds[i*T+j] * at(q, i, h, d)
				}
			}
		}
	}
	heads := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 0, 2) }
	kt := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 2, 0) }
	alphaAttr := func(name string) *graph.Attr { return &graph.Attr{Name: name, Type: graph.AttrFloat, F: alpha} }
	node := func(op string, in, out []string, attrs ...*graph.Attr) *graph.Node {
		n := &graph.Node{Name: op, OpType: op, Domain: graph.FusedDomain, Inputs: in, Outputs: out, Attrs: map[string]*graph.Attr{}}
		for _, a := range attrs {
			n.Attrs[a.Name] = a
		}
		return n
	}
	fwd := node(graph.AttentionSoftmax, []string{"q", "k", "v"}, []string{"o", "p"},
		alphaAttr("qk.alpha"), heads("qk.axes0"), kt("qk.axes1"), heads("pv.axes1"), heads("pv.permY"))
	bwd := node(graph.AttentionSoftmaxGrad, []string{"do", "p", "v", "q", "k"}, []string{"dq", "dk", "dv"},
		heads("dp.axes0"), heads("dp.axes2"), graph.IntAttr("dp.grad", 1),
		heads("dv.axes0"), heads("dv.axes2"), graph.IntAttr("dv.grad", 2), heads("dv.permY"),
		alphaAttr("dq.alpha"), heads("dq.axes1"), kt("dq.axes2"), graph.IntAttr("dq.grad", 1), heads("dq.permY"),
		alphaAttr("dk.alpha"), heads("dk.axes1"), kt("dk.axes2"), graph.IntAttr("dk.grad", 2), graph.IntsAttr("dk.permY", 2, 0, 1),
		&graph.Attr{Name: graph.AttnDSScale, Type: graph.AttrFloat, F: scale})
	if causal {
		fwd.SetAttr(graph.IntAttr(graph.AttnCausal, 1))
		fwd.SetAttr(graph.IntAttr("qk.lowerY", 1))
		fwd.SetAttr(graph.FloatAttr("qk.fillY", float32(math.Inf(-1))))
		fwd.SetAttr(graph.IntsAttr("pv.lower", 0))
		bwd.SetAttr(graph.IntAttr("dp.lowerY", 1))
		bwd.SetAttr(graph.FloatAttr("dp.fillY", 0))
		bwd.SetAttr(graph.IntsAttr("dv.lower", 1))
		bwd.SetAttr(graph.IntsAttr("dq.lower", 0))
		bwd.SetAttr(graph.IntsAttr("dk.lower", 0))
	}
	ctx := &kern.Context{Opset: 17}
	for _, c := range []struct {
		dtype graph.DType
		tol   float64
	}{{graph.Float32, 2e-5}, {graph.Float64, 1e-12}} {
		tensor := func(x []float64, shape ...int) *graph.Tensor {
			ten := graph.Zeros(c.dtype, shape...)
			for i, e := range x {
				ten.SetFloat(i, e)
			}
			return ten
		}
		check := func(name string, got *graph.Tensor, want []float64, shape ...int) {
			require.NotNil(t, got, name)
			require.Equal(t, shape, got.Shape, "%v %s", c.dtype, name)
			for i, w := range want {
				require.InDelta(t, w, got.Float(i), c.tol*math.Max(1, math.Abs(w)), "%v %s[%d]", c.dtype, name, i)
			}
		}
		spec, ok := kern.Lookup(graph.FusedDomain, graph.AttentionSoftmax, 17)
		require.True(t, ok)
		out, err := spec.Fn(ctx, fwd, []*graph.Tensor{tensor(q, T, BH, D), tensor(k, T, BH, D), tensor(v, T, BH, D)})
		require.NoError(t, err)
		check("O", out[0], o, T, BH, D)
		check("P", out[1], p, BH, T, T)
		spec, ok = kern.Lookup(graph.FusedDomain, graph.AttentionSoftmaxGrad, 17)
		require.True(t, ok)
		grads, err := spec.Fn(ctx, bwd, []*graph.Tensor{tensor(dO, T, BH, D), out[1], tensor(v, T, BH, D), tensor(q, T, BH, D), tensor(k, T, BH, D)})
		require.NoError(t, err)
		check("dQ", grads[0], dq, T, BH, D)
		check("dK", grads[1], dk, T, BH, D)
		check("dV", grads[2], dv, T, BH, D)

		again := recomputingGrad(bwd, fwd)
		regrads, err := spec.Fn(ctx, again, []*graph.Tensor{tensor(dO, T, BH, D), nil, tensor(v, T, BH, D), tensor(q, T, BH, D), tensor(k, T, BH, D)})
		require.NoError(t, err)
		require.Len(t, regrads, 3)
		for i, name := range []string{"dQ", "dK", "dV"} {
			require.Equal(t, grads[i].Shape, regrads[i].Shape, "%v %s, P recomputed", c.dtype, name)
			for e := 0; e < grads[i].Size(); e++ {
				require.Equal(t, math.Float64bits(grads[i].Float(e)), math.Float64bits(regrads[i].Float(e)), "%v %s[%d]: P recomputed against P read", c.dtype, name, e)
			}
		}
		_, err = spec.Fn(ctx, again, []*graph.Tensor{tensor(dO, T, BH, D), out[1], tensor(v, T, BH, D), tensor(q, T, BH, D), tensor(k, T, BH, D)})
		require.ErrorContains(t, err, "input 1 (P) must be empty")
	}
}

// recomputingGrad is gradient node bwd as graph.RecomputeAttentionProbs
// makes it from its forward fwd: no P input, fwd's qk.* attributes and
// causal flag, graph.AttnRecomputeP.
func recomputingGrad(bwd, fwd *graph.Node) *graph.Node {
	n := *bwd
	n.Inputs = append([]string(nil), bwd.Inputs...)
	n.Inputs[1] = ""
	n.Attrs = map[string]*graph.Attr{}
	for k, a := range bwd.Attrs {
		n.Attrs[k] = a
	}
	for k, a := range fwd.Attrs {
		if strings.HasPrefix(k, graph.AttnQK) || k == graph.AttnCausal {
			n.Attrs[k] = a
		}
	}
	n.SetAttr(graph.IntAttr(graph.AttnRecomputeP, 1))
	return &n
}
