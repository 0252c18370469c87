package backendtest

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedGeluErf: exact GELU as PyTorch exports nn.GELU(),
// Mul(Mul(X, Add(Erf(Div(X, √2)), 1)), 0.5), runs as one GeluErf node
// (operands of Add and the Muls in either order) whose outputs Y, D and A
// are the unfused graph's bit for bit, D and A also read by other nodes as
// the gradient rules read them (one of them inside the chain); Y agrees with 0.5·x·(1+erf(x/√2)) in
// float64. A chain whose Erf output is a graph output stays unfused.
func (kc checker) fusedGeluErf(t *testing.T) {
	g := graph.NewGraph("gelu")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(3, 7, 11)}}
	g.Initializers = map[string]*graph.Tensor{
		"c1": graph.FromFloat32([]float32{float32(math.Sqrt2)}),
		"c2": graph.FromFloat32([]float32{1}),
		"c3": graph.FromFloat32([]float32{0.5}),
	}
	chain := func(p string, swap bool) []*graph.Node {
		node := func(name, op string, a, b string) *graph.Node {
			if swap && op != "Div" {
				a, b = b, a
			}
			return &graph.Node{Name: p + name, OpType: op, Inputs: []string{a, b}, Outputs: []string{p + name}}
		}
		return []*graph.Node{
			node("d", "Div", "x", "c1"),
			// A reader of D inside the chain, as the CastLike that makes
			// Erf's gradient constant can be placed.
			{Name: p + "early", OpType: "CastLike", Inputs: []string{"c3", p + "d"}, Outputs: []string{p + "early"}},
			{Name: p + "e", OpType: "Erf", Inputs: []string{p + "d"}, Outputs: []string{p + "e"}},
			node("a", "Add", p+"e", "c2"),
			node("m", "Mul", "x", p+"a"),
			node("y", "Mul", p+"m", "c3"),
			// Later readers of D and A, as the gradients of Erf and Mul.
			node("late", "Mul", p+"d", p+"a"),
		}
	}
	g.Nodes = append(append(chain("a/", false), chain("b/", true)...), chain("k/", false)...)
	g.Outputs = []*graph.ValueInfo{{Name: "a/y"}, {Name: "a/late"}, {Name: "a/early"}, {Name: "b/y"}, {Name: "b/late"}, {Name: "k/y"}, {Name: "k/e"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	rng := rand.New(rand.NewPCG(21, 22))
	x := graph.Zeros(graph.Float32, 3, 7, 11)
	xs := x.Float32s()
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 2.5)
	}
	copy(xs, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), -12, 12, 1e-40, -5.5})
	inputs := map[string]*graph.Tensor{"x": x}
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		fused := kc.countCompiled(t, exe, graph.GeluErf)
		assert.Equal(t, map[bool]int{true: 2, false: 0}[kc.fuses(disable, graph.GeluErf)], fused, "chains a and b fuse, k (whose Erf is an output) does not")
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ { // the second run uses the memory plan
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		return out
	}
	fused, plain := run(false), run(true)
	for _, name := range []string{"a/y", "a/late", "b/y", "b/late", "k/y"} {
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}
	for _, name := range []string{"a/y", "b/y"} {
		for i, v := range xs {
			want := 0.5 * float64(v) * (1 + math.Erf(float64(v)/math.Sqrt2))
			got := float64(fused[name].Float32s()[i])
			if math.IsNaN(want) {
				assert.True(t, math.IsNaN(got), "%s[%d] (x = %v) = %v, want NaN", name, i, v, got)
				continue
			}
			assert.InDelta(t, want, got, 1e-6*math.Max(1, math.Abs(want)), "%s[%d] (x = %v)", name, i, v)
		}
	}
}

// fusedGeluErfGrad: the gradient the autodiff emits for the exact GELU
// chain (after train.Build's shape-read rewrites, which turn its same-shape
// SumToShapes into Identities) runs, once the plan is specialised, as one
// GeluErfGrad node whose dX equals the unfused graph's bit for bit and
// agrees with dY·(Φ(x) + x·φ(x)) in float64; on a backend with
// GeluErfGradX, that node recomputes D and A from X and the forward
// GeluErf writes Y alone (graph.RecomputeGeluErfGrad), same bits.
func (kc checker) fusedGeluErfGrad(t *testing.T) {
	g := graph.NewGraph("gelugrad")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(5, 333)}, {Name: "dy", Type: F32Type(5, 333)}}
	g.Initializers = map[string]*graph.Tensor{
		"c1": graph.FromFloat32([]float32{float32(math.Sqrt2)}),
		"c2": graph.FromFloat32([]float32{1}),
		"c3": graph.FromFloat32([]float32{0.5}),
	}
	g.Nodes = []*graph.Node{
		{Name: "d", OpType: "Div", Inputs: []string{"x", "c1"}, Outputs: []string{"d"}},
		{Name: "e", OpType: "Erf", Inputs: []string{"d"}, Outputs: []string{"e"}},
		{Name: "a", OpType: "Add", Inputs: []string{"e", "c2"}, Outputs: []string{"a"}},
		{Name: "m", OpType: "Mul", Inputs: []string{"x", "a"}, Outputs: []string{"m"}},
		{Name: "y", OpType: "Mul", Inputs: []string{"m", "c3"}, Outputs: []string{"y"}},
	}
	grads, err := graph.Gradients(g, "y", []string{"x"}, "dy", 17)
	require.NoError(t, err)
	// As train.Build: backward reads of shape and type only rewritten.
	_, err = graph.Recompute(g, 5, 17, graph.RecomputeOptions{ReadsOnly: true})
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: grads[0]}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	rng := rand.New(rand.NewPCG(23, 24))
	x, dy := graph.Zeros(graph.Float32, 5, 333), graph.Zeros(graph.Float32, 5, 333)
	xs, dys := x.Float32s(), dy.Float32s()
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 2.5)
		dys[i] = float32(rng.NormFloat64())
	}
	copy(xs, []float32{0, float32(math.Copysign(0, -1)), -12, 12, 1e-40, -5.5, 3.25})
	inputs := map[string]*graph.Tensor{"x": x, "dy": dy}
	run := func(disable bool) *graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ { // the second run uses the memory plan
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		nodes := kc.lastRunNodes(t, exe)
		ops := map[string]int{}
		for _, n := range nodes {
			ops[n.OpType]++
		}
		switch {
		case !kc.fuses(disable, graph.GeluErfGrad, graph.ErfGrad):
			assert.Zero(t, ops[graph.GeluErfGrad]+ops[graph.GeluErfGradX])
		case kc.fuses(disable, graph.GeluErfGradX, graph.GeluErf):
			// D and A recomputed in the gradient: the GeluErf writes Y
			// alone.
			assert.Equal(t, 1, ops[graph.GeluErfGradX], "%v", ops)
			assert.Zero(t, ops[graph.GeluErfGrad]+ops[graph.ErfGrad]+ops["Div"], "%v", ops)
			outs := 0
			for _, n := range nodes {
				if n.OpType == graph.GeluErf {
					for _, o := range n.Outputs {
						if o != "" {
							outs++
						}
					}
				}
			}
			assert.Equal(t, 1, outs, "the GeluErf's named outputs: Y alone")
		default:
			assert.Equal(t, 1, ops[graph.GeluErfGrad], "%v", ops)
			assert.Zero(t, ops[graph.ErfGrad]+ops["Div"], "%v", ops)
		}
		return out[grads[0]]
	}
	fused, plain := run(false), run(true)
	assert.True(t, sameBits(plain, fused), "fused and unfused gradients differ")
	for i, v := range xs {
		xv := float64(v)
		want := float64(dys[i]) * (0.5*(1+math.Erf(xv/math.Sqrt2)) + xv*math.Exp(-xv*xv/2)/math.Sqrt(2*math.Pi))
		assert.InDelta(t, want, float64(fused.Float32s()[i]), 2e-6*math.Max(1, math.Abs(want)), "dx[%d] (x = %v)", i, v)
	}
}
