package linalg_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// mhaGraph is attention as torchvision's nn.MultiheadAttention exports it
// (sequence first): the packed in-projection x [n, b, 3·h·d] cut into q, k
// and v by three Slices, each reshaped to [n, b·h, d] and transposed to
// heads first (the keys' transpose and the swap of their last two axes
// folded into one, as the exporter writes them), the scores scaled by a
// Mul, and the output transposed back
// and reshaped to [n, b, h·d]; with the gradient of x for dy.
func mhaGraph(t *testing.T, b, n, h, d int64) *graph.Model {
	t.Helper()
	c := h * d
	g := graph.NewGraph("mha")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: f32Type(n, b, 3*c)}, {Name: "dy", Type: f32Type(n, b, c)}}
	one := func(v int64) *graph.Tensor { return graph.FromInt64([]int64{v}, 1) }
	g.Initializers = map[string]*graph.Tensor{
		"heads": graph.FromInt64([]int64{n, b * h, d}, 3),
		"out":   graph.FromInt64([]int64{n, b, c}, 3),
		"s0":    one(0), "s1": one(c), "s2": one(2 * c), "s3": one(3 * c), "ax": one(2),
		"scale": graph.FromFloat32([]float32{0.17677669}),
	}
	node := opNode
	heads := graph.IntsAttr("perm", 1, 0, 2)
	for i, v := range []string{"q", "k", "v"} {
		// The keys' two transposes (heads first, then the last two
		// axes swapped) as the exporter folds them: one.
		perm, to := heads, v+"h"
		if v == "k" {
			perm, to = graph.IntsAttr("perm", 1, 2, 0), "kt"
		}
		g.Nodes = append(g.Nodes,
			node("Slice", []string{"x", "s" + string(rune('0'+i)), "s" + string(rune('1'+i)), "ax"}, v+"s"),
			node("Reshape", []string{v + "s", "heads"}, v+"r"),
			node("Transpose", []string{v + "r"}, to, perm))
	}
	g.Nodes = append(g.Nodes,
		node("MatMul", []string{"qh", "kt"}, "s"),
		node("Mul", []string{"s", "scale"}, "ss"),
		node("Softmax", []string{"ss"}, "a", &graph.Attr{Name: "axis", Type: graph.AttrInt, I: -1}),
		node("MatMul", []string{"a", "vh"}, "o"),
		node("Transpose", []string{"o"}, "ot", heads),
		node("Reshape", []string{"ot", "out"}, "y"))
	return gradientModel(t, g)
}

// TestAttentionGradConcatFused: nn.MultiheadAttention's attention, whose
// q, k and v are Slices of the packed in-projection and whose gradients a
// Concat joins for it, runs as one AttentionSoftmax and one
// AttentionSoftmaxGradConcat reading q, k and v packed, with no Slice or
// Concat left, and gives bit for bit what AttentionSoftmaxGrad and the
// Concat give and what the unfused products (three Slices) give: at sizes
// whose heads' rows lie inside the packed rows and at the packed GEMM's
// sizes.
func TestAttentionGradConcatFused(t *testing.T) {
	for _, c := range []struct {
		name       string
		b, n, h, d int64
	}{{"packed", 3, 17, 2, 16}, {"small", 2, 5, 3, 4}} {
		t.Run(c.name, func(t *testing.T) {
			m := mhaGraph(t, c.b, c.n, c.h, c.d)
			rng := rand.New(rand.NewPCG(uint64(c.n), 31))
			x, dy := graph.Zeros(graph.Float32, int(c.n), int(c.b), int(3*c.h*c.d)), graph.Zeros(graph.Float32, int(c.n), int(c.b), int(c.h*c.d))
			for _, ten := range []*graph.Tensor{x, dy} {
				for i := range ten.Float32s() {
					ten.Float32s()[i] = float32(rng.NormFloat64())
				}
			}
			inputs := map[string]*graph.Tensor{"x": x, "dy": dy}
			fused, fops := runCounting(t, &cpu.Backend{}, m, inputs)
			concat, cops := runCounting(t, backendWithout(graph.AttentionSoftmaxGradConcat), m, inputs)
			plain, pops := runCounting(t, withoutAttentionSoftmax(), m, inputs)
			assert.Equal(t, 1, fops[graph.AttentionSoftmaxGradConcat], "%v", fops)
			assert.Zero(t, fops["Concat"]+fops[graph.AttentionSoftmaxGrad]+fops["Slice"], "%v", fops)
			assert.Equal(t, 1, cops[graph.AttentionSoftmaxGrad], "%v", cops)
			assert.Equal(t, 1, cops["Concat"], "%v", cops)
			assert.Zero(t, cops["Slice"], "q, k and v read packed: %v", cops)
			assert.Positive(t, pops[graph.PermutedMatMul], "%v", pops)
			assert.Equal(t, 3, pops["Slice"], "%v", pops)
			require.Len(t, fused, 2)
			for name, want := range concat {
				require.NotNil(t, fused[name], name)
				assert.Equal(t, want.Shape, fused[name].Shape, name)
				assert.Equal(t, want.Float32s(), fused[name].Float32s(), "%s: with and without the packed output", name)
				assert.Equal(t, plain[name].Float32s(), fused[name].Float32s(), "%s: against the unfused products", name)
			}
		})
	}
}

// TestAttentionSoftmaxGradConcatKernel: the kernel on its own, against
// AttentionSoftmaxGrad's three outputs reshaped and joined along the last
// axis, bit for bit: float32 with every head's rows inside one run of the
// packed rows (written in place) and with heads straddling two runs
// (written apart and copied), float64 (the unfused kernels and a Concat);
// a shape attribute that does not hold three gradients is an error.
func TestAttentionSoftmaxGradConcatKernel(t *testing.T) {
	const T, B, H, D = 7, 2, 3, 5
	const BH = B * H
	rng := rand.New(rand.NewPCG(41, 42))
	heads := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 0, 2) }
	kt := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 2, 0) }
	alpha := func(name string) *graph.Attr { return &graph.Attr{Name: name, Type: graph.AttrFloat, F: 0.5} }
	attrs := []*graph.Attr{
		heads("dp.axes0"), heads("dp.axes2"), graph.IntAttr("dp.grad", 1),
		heads("dv.axes0"), heads("dv.axes2"), graph.IntAttr("dv.grad", 2), heads("dv.permY"),
		alpha("dq.alpha"), heads("dq.axes1"), kt("dq.axes2"), graph.IntAttr("dq.grad", 1), heads("dq.permY"),
		alpha("dk.alpha"), heads("dk.axes1"), kt("dk.axes2"), graph.IntAttr("dk.grad", 2), graph.IntsAttr("dk.permY", 2, 0, 1),
		{Name: graph.AttnDSScale, Type: graph.AttrFloat, F: 2},
	}
	node := func(op string, outs []string, extra ...*graph.Attr) *graph.Node {
		n := &graph.Node{Name: op, OpType: op, Domain: graph.FusedDomain, Inputs: []string{"do", "p", "v", "q", "k"}, Outputs: outs, Attrs: map[string]*graph.Attr{}}
		for _, a := range append(slices.Clone(attrs), extra...) {
			n.Attrs[a.Name] = a
		}
		return n
	}
	ctx := &kern.Context{Opset: 17}
	grad, ok := kern.Lookup(graph.FusedDomain, graph.AttentionSoftmaxGrad, 17)
	require.True(t, ok)
	packed, ok := kern.Lookup(graph.FusedDomain, graph.AttentionSoftmaxGradConcat, 17)
	require.True(t, ok)
	for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
		rand := func(shape ...int) *graph.Tensor {
			ten := graph.Zeros(dt, shape...)
			for i := 0; i < ten.Size(); i++ {
				ten.SetFloat(i, rng.NormFloat64())
			}
			return ten
		}
		p := rand(BH, T, T)
		in := []*graph.Tensor{rand(T, BH, D), p, rand(T, BH, D), rand(T, BH, D), rand(T, BH, D)}
		parts, err := grad.Fn(ctx, node(graph.AttentionSoftmaxGrad, []string{"dq", "dk", "dv"}), in)
		require.NoError(t, err)
		// Runs of e = H·D (each head's rows inside one), of 2·D (likewise)
		// and of 6 (heads of 5 straddle them).
		for _, e := range []int{H * D, 2 * D, 6} {
			rows := T * BH * D / e
			got, err := packed.Fn(ctx, node(graph.AttentionSoftmaxGradConcat, []string{"y"}, graph.IntsAttr("shape", int64(rows), int64(3*e))), in)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, []int{rows, 3 * e}, got[0].Shape, "%v e=%d", dt, e)
			for i := 0; i < got[0].Size(); i++ {
				r, col := i/(3*e), i%(3*e)
				want := parts[col/e].Float(r*e + col%e)
				require.Equal(t, want, got[0].Float(i), "%v e=%d: element (%d, %d)", dt, e, r, col)
			}
		}
	}
	_, err := packed.Fn(ctx, node(graph.AttentionSoftmaxGradConcat, []string{"y"}, graph.IntsAttr("shape", T, BH*D)),
		[]*graph.Tensor{graph.Zeros(graph.Float32, T, BH, D), graph.Zeros(graph.Float32, BH, T, T), graph.Zeros(graph.Float32, T, BH, D),
			graph.Zeros(graph.Float32, T, BH, D), graph.Zeros(graph.Float32, T, BH, D)})
	require.ErrorContains(t, err, "three do not make attribute shape")
}

// TestAttentionPackedQKVKernels: the attention kernels reading q, k and v
// from one packed tensor (graph.AttnPackedQKV) give bit for bit what they
// give from the three parts as tensors of their own: the forward (O and
// P), the gradient and the gradient joined into one output, in float32
// (read in place) and float64 (the unfused kernels, from copies); a
// packed tensor whose size is not three parts', or whose q, k and v are
// not one tensor, is an error.
func TestAttentionPackedQKVKernels(t *testing.T) {
	const T, B, H, D = 7, 2, 3, 5
	const BH, E = B * H, H * D
	rng := rand.New(rand.NewPCG(51, 52))
	heads := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 0, 2) }
	kt := func(name string) *graph.Attr { return graph.IntsAttr(name, 1, 2, 0) }
	alpha := func(name string) *graph.Attr { return &graph.Attr{Name: name, Type: graph.AttrFloat, F: 0.5} }
	fwdAttrs := []*graph.Attr{alpha("qk.alpha"), heads("qk.axes0"), kt("qk.axes1"), heads("pv.axes1"), heads("pv.permY")}
	gradAttrs := []*graph.Attr{
		heads("dp.axes0"), heads("dp.axes2"), graph.IntAttr("dp.grad", 1),
		heads("dv.axes0"), heads("dv.axes2"), graph.IntAttr("dv.grad", 2), heads("dv.permY"),
		alpha("dq.alpha"), heads("dq.axes1"), kt("dq.axes2"), graph.IntAttr("dq.grad", 1), heads("dq.permY"),
		alpha("dk.alpha"), heads("dk.axes1"), kt("dk.axes2"), graph.IntAttr("dk.grad", 2), graph.IntsAttr("dk.permY", 2, 0, 1),
	}
	packed := graph.IntsAttr(graph.AttnPackedQKV, T, BH, D)
	node := func(op string, outs []string, attrs []*graph.Attr, extra ...*graph.Attr) *graph.Node {
		in := []string{"do", "p", "v", "q", "k"}
		if op == graph.AttentionSoftmax {
			in = []string{"q", "k", "v"}
		}
		n := &graph.Node{Name: op, OpType: op, Domain: graph.FusedDomain, Inputs: in, Outputs: outs, Attrs: map[string]*graph.Attr{}}
		for _, a := range append(slices.Clone(attrs), extra...) {
			n.Attrs[a.Name] = a
		}
		return n
	}
	ctx := &kern.Context{Opset: 17}
	run := func(op string, n *graph.Node, in []*graph.Tensor) []*graph.Tensor {
		spec, ok := kern.Lookup(graph.FusedDomain, op, 17)
		require.True(t, ok)
		out, err := spec.Fn(ctx, n, in)
		require.NoError(t, err, op)
		return out
	}
	same := func(want, got []*graph.Tensor, what string) {
		require.Len(t, got, len(want), what)
		for i := range want {
			if want[i] == nil {
				require.Nil(t, got[i], what)
				continue
			}
			require.Equal(t, want[i].Shape, got[i].Shape, "%s output %d", what, i)
			for j := 0; j < want[i].Size(); j++ {
				require.Equal(t, want[i].Float(j), got[i].Float(j), "%s output %d element %d", what, i, j)
			}
		}
	}
	for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
		x := graph.Zeros(dt, T, B, 3*E)
		for i := 0; i < x.Size(); i++ {
			x.SetFloat(i, rng.NormFloat64())
		}
		var parts [3]*graph.Tensor // q, k, v: [T, B·H, D] each
		for p := range parts {
			parts[p] = graph.Zeros(dt, T, BH, D)
			for f := 0; f < T*BH*D; f++ {
				parts[p].SetFloat(f, x.Float(f/E*3*E+p*E+f%E))
			}
		}
		q, k, v := parts[0], parts[1], parts[2]
		want := run(graph.AttentionSoftmax, node(graph.AttentionSoftmax, []string{"o", "p"}, fwdAttrs), []*graph.Tensor{q, k, v})
		got := run(graph.AttentionSoftmax, node(graph.AttentionSoftmax, []string{"o", "p"}, fwdAttrs, packed), []*graph.Tensor{x, x, x})
		same(want, got, dt.String()+" forward")
		dO := graph.Zeros(dt, T, BH, D)
		for i := 0; i < dO.Size(); i++ {
			dO.SetFloat(i, rng.NormFloat64())
		}
		p := want[1]
		wantG := run(graph.AttentionSoftmaxGrad, node(graph.AttentionSoftmaxGrad, []string{"dq", "dk", "dv"}, gradAttrs), []*graph.Tensor{dO, p, v, q, k})
		gotG := run(graph.AttentionSoftmaxGrad, node(graph.AttentionSoftmaxGrad, []string{"dq", "dk", "dv"}, gradAttrs, packed), []*graph.Tensor{dO, p, x, x, x})
		same(wantG, gotG, dt.String()+" gradient")
		cat := graph.IntsAttr("shape", T, B, 3*E)
		wantC := run(graph.AttentionSoftmaxGradConcat, node(graph.AttentionSoftmaxGradConcat, []string{"y"}, gradAttrs, cat), []*graph.Tensor{dO, p, v, q, k})
		gotC := run(graph.AttentionSoftmaxGradConcat, node(graph.AttentionSoftmaxGradConcat, []string{"y"}, gradAttrs, cat, packed), []*graph.Tensor{dO, p, x, x, x})
		same(wantC, gotC, dt.String()+" gradient joined")
	}
	spec, _ := kern.Lookup(graph.FusedDomain, graph.AttentionSoftmax, 17)
	x := graph.Zeros(graph.Float32, T, B, 3*E)
	_, err := spec.Fn(ctx, node(graph.AttentionSoftmax, []string{"o", "p"}, fwdAttrs, graph.IntsAttr(graph.AttnPackedQKV, T, BH, D+1)), []*graph.Tensor{x, x, x})
	require.ErrorContains(t, err, "do not hold three parts")
	_, err = spec.Fn(ctx, node(graph.AttentionSoftmax, []string{"o", "p"}, fwdAttrs, packed), []*graph.Tensor{x, x, graph.Zeros(graph.Float32, T, B, 3*E)})
	require.ErrorContains(t, err, "must be one packed tensor")
}
