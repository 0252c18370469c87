package cpu

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

// loweringCase is one node run with its kernel and in its lowered form.
type loweringCase struct {
	name string
	n    *graph.Node
	// inputs are random normal graph inputs (float32, or float64 where
	// the type says so); consts are initializers; fixed are graph inputs
	// with given values.
	inputs map[string]*graph.Type
	consts map[string]*graph.Tensor
	fixed  map[string]*graph.Tensor
	opset  int64
	tol    float64
}

// checkLoweringMatchesKernel compiles tc's node twice, with every kernel
// and with PrimitivesOnly, requires the second to have lowered it (no
// gap), and compares every output element within tc.tol (absolute plus
// relative; 1e-5 when zero).
func checkLoweringMatchesKernel(t *testing.T, tc loweringCase) {
	t.Helper()
	g := graph.NewGraph(tc.name)
	rng := rand.New(rand.NewPCG(3, 5))
	inputs := map[string]*graph.Tensor{}
	for _, in := range tc.n.Inputs {
		if in == "" || inputs[in] != nil || g.Initializers[in] != nil {
			continue
		}
		if c := tc.consts[in]; c != nil {
			g.Initializers[in] = c
			continue
		}
		if f := tc.fixed[in]; f != nil {
			inputs[in] = f
			typ := &graph.Type{Kind: graph.KindTensor, DType: f.DType, HasShape: true}
			for _, d := range f.Shape {
				typ.Shape = append(typ.Shape, graph.Dim{Value: int64(d), Known: true})
			}
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: in, Type: typ})
			continue
		}
		typ := tc.inputs[in]
		require.NotNil(t, typ, "input %s has no type", in)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: in, Type: typ})
		var shape []int
		for _, d := range typ.Shape {
			shape = append(shape, int(d.Value))
		}
		x := graph.Zeros(typ.DType, shape...)
		for i := 0; i < x.Size(); i++ {
			x.SetFloat(i, rng.NormFloat64())
		}
		inputs[in] = x
	}
	for _, o := range tc.n.Outputs {
		if o != "" {
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o})
		}
	}
	g.Nodes = []*graph.Node{tc.n}
	opset := tc.opset
	if opset == 0 {
		opset = 17
	}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset, graph.InternalDomain: 1}, Graph: g}
	var outs [2]map[string]*graph.Tensor
	for k, prims := range []bool{false, true} {
		exe, err := (&Backend{}).Compile(m, backend.CompileOptions{PrimitivesOnly: prims})
		require.NoError(t, err)
		out, err := exe.Run(context.Background(), inputs)
		require.NoError(t, err)
		outs[k] = map[string]*graph.Tensor{}
		for name, v := range out {
			outs[k][name] = v.Clone()
		}
		if prims {
			assert.Empty(t, exe.(*Executable).PrimitiveGaps(), "the lowering must run")
		}
	}
	tol := tc.tol
	if tol == 0 {
		tol = 1e-5
	}
	require.Len(t, outs[1], len(outs[0]))
	for name, want := range outs[0] {
		got := outs[1][name]
		require.NotNil(t, got, name)
		require.Equal(t, want.Shape, got.Shape, name)
		require.Equal(t, want.DType, got.DType, name)
		bad := 0
		for i := 0; i < want.Size(); i++ {
			w, g := want.Float(i), got.Float(i)
			if !(math.Abs(g-w) <= tol+tol*math.Abs(w)) && bad < 5 {
				bad++
				assert.Failf(t, "values differ", "%s[%d]: lowered %.8g, kernel %.8g", name, i, g, w)
			}
		}
	}
}

// TestRecurrentLoweringsMatchKernels: RNN, GRU and LSTM unrolled into
// primitives, and their gradient ops lowered to the unrolled forward and
// its derivative, give the kernels' values on random inputs over the
// directions, layouts, activations, clip, initial states, peepholes and
// sequence lengths (constant and run time).
func TestRecurrentLoweringsMatchKernels(t *testing.T) {
	const S, B, I, H = 4, 3, 5, 4
	type cfg struct {
		name   string
		op     string
		dirs   int
		layout int
		attrs  []*graph.Attr
		// bias, initial states, peepholes
		bias, h0, c0, peep bool
		// lens: constant, run-time or none
		lens   []int32
		lensIn bool
	}
	gatesOf := map[string]int64{"RNN": 1, "GRU": 3, "LSTM": 4}
	cases := []cfg{
		{name: "RNN/forward", op: "RNN", dirs: 1, bias: true, h0: true},
		{name: "RNN/bidirectional-layout1-lens", op: "RNN", dirs: 2, layout: 1, bias: true, lens: []int32{4, 1, 3},
			attrs: []*graph.Attr{graph.StringsAttr("activations", "Relu", "Tanh")}},
		{name: "RNN/reverse-lens-input", op: "RNN", dirs: 1, lens: []int32{2, 4, 3}, lensIn: true,
			attrs: []*graph.Attr{graph.StringAttr("direction", "reverse"), graph.FloatAttr("clip", 0.8)}},
		{name: "GRU/forward", op: "GRU", dirs: 1, bias: true, h0: true},
		{name: "GRU/reverse-linear-before-reset-lens", op: "GRU", dirs: 1, bias: true, lens: []int32{3, 4, 2}, lensIn: true,
			attrs: []*graph.Attr{graph.StringAttr("direction", "reverse"), graph.IntAttr("linear_before_reset", 1)}},
		{name: "GRU/bidirectional-layout1-activations", op: "GRU", dirs: 2, layout: 1, bias: true, h0: true,
			attrs: []*graph.Attr{graph.StringsAttr("activations", "HardSigmoid", "Softsign", "Sigmoid", "Elu"),
				graph.FloatsAttr("activation_alpha", 0.3, 0.7), graph.FloatsAttr("activation_beta", 0.4)}},
		{name: "LSTM/forward-peepholes-lens", op: "LSTM", dirs: 1, bias: true, h0: true, c0: true, peep: true, lens: []int32{4, 2, 3}},
		{name: "LSTM/bidirectional-clip-input-forget", op: "LSTM", dirs: 2, bias: true, h0: true, c0: true,
			attrs: []*graph.Attr{graph.FloatAttr("clip", 1.5), graph.IntAttr("input_forget", 1), graph.StringAttr("direction", "bidirectional")}},
		{name: "LSTM/reverse-layout1-activations", op: "LSTM", dirs: 1, layout: 1, bias: true, c0: true, peep: true, lens: []int32{1, 4, 3}, lensIn: true,
			attrs: []*graph.Attr{graph.StringAttr("direction", "reverse"), graph.StringsAttr("activations", "ScaledTanh", "Softplus", "ThresholdedRelu"),
				graph.FloatsAttr("activation_alpha", 0.9, 0.2), graph.FloatsAttr("activation_beta", 1.1)}},
		{name: "LSTM/affine-leakyrelu", op: "LSTM", dirs: 1, bias: true,
			attrs: []*graph.Attr{graph.StringsAttr("activations", "Sigmoid", "LeakyRelu", "Affine"), graph.FloatsAttr("activation_alpha", 0.1, 0.5), graph.FloatsAttr("activation_beta", 0.25)}},
	}
	for _, c := range cases {
		G := gatesOf[c.op]
		D := int64(c.dirs)
		types := map[string]*graph.Type{
			"W": f32Type(D, G*H, I), "R": f32Type(D, G*H, H), "B": f32Type(D, 2*G*H), "P": f32Type(D, 3*H),
		}
		x, state, y := f32Type(S, B, I), f32Type(D, B, H), f32Type(S, D, B, H)
		if c.layout == 1 {
			x, state, y = f32Type(B, S, I), f32Type(B, D, H), f32Type(B, S, D, H)
		}
		types["X"], types["h0"], types["c0"], types["dY"], types["dYh"], types["dYc"] = x, state, state, y, state, state
		in := []string{"X", "W", "R", "", "", "", "", ""}
		for i, on := range map[int]bool{3: c.bias, 5: c.h0, 6: c.c0, 7: c.peep} {
			if on {
				in[i] = []string{3: "B", 5: "h0", 6: "c0", 7: "P"}[i]
			}
		}
		consts, fixed := map[string]*graph.Tensor{}, map[string]*graph.Tensor{}
		if c.lens != nil {
			in[4] = "lens"
			lens := graph.FromInt32(c.lens, B)
			if c.lensIn {
				fixed["lens"] = lens
			} else {
				consts["lens"] = lens
			}
		}
		attrs := append([]*graph.Attr{graph.IntAttr("hidden_size", H), graph.IntAttr("layout", int64(c.layout))}, c.attrs...)
		if c.dirs == 2 {
			attrs = append(attrs, graph.StringAttr("direction", "bidirectional"))
		}
		outs := []string{"Y", "Y_h"}
		if c.op == "LSTM" {
			outs = append(outs, "Y_c")
		}
		fwd := &graph.Node{Name: c.op, OpType: c.op, Inputs: in[:8], Outputs: outs}
		for _, a := range attrs {
			fwd.SetAttr(a)
		}
		t.Run(c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: fwd, inputs: types, consts: consts, fixed: fixed, opset: 14, tol: 1e-5})
		})
		gin := append(append([]string{}, in...), "dY", "dYh", "")
		if c.op == "LSTM" {
			gin[10] = "dYc"
		}
		gouts := make([]string, 7)
		for k, i := range []int{0, 1, 2, 3, 5, 6, 7} {
			if in[i] != "" && in[i] != "lens" {
				gouts[k] = "d" + in[i]
			}
		}
		grad := &graph.Node{Name: c.op + "Grad", OpType: c.op + "Grad", Domain: graph.InternalDomain, Inputs: gin, Outputs: gouts}
		for _, a := range attrs {
			grad.SetAttr(a)
		}
		t.Run(c.name+"/grad", func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name + "/grad", n: grad, inputs: types, consts: consts, fixed: fixed, opset: 14, tol: 2e-5})
		})
	}
}
