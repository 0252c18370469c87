package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
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
	// positive inputs are drawn as |N(0, 1)|.
	positive map[string]bool
	opset    int64
	tol      float64
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
			v := rng.NormFloat64()
			if tc.positive[in] {
				v = math.Abs(v)
			}
			x.SetFloat(i, v)
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
			if !(math.Abs(g-w) <= tol+tol*math.Abs(w)) && !(math.IsNaN(g) && math.IsNaN(w)) && bad < 5 {
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
			"W": backendtest.F32Type(D, G*H, I), "R": backendtest.F32Type(D, G*H, H), "B": backendtest.F32Type(D, 2*G*H), "P": backendtest.F32Type(D, 3*H),
		}
		x, state, y := backendtest.F32Type(S, B, I), backendtest.F32Type(D, B, H), backendtest.F32Type(S, D, B, H)
		if c.layout == 1 {
			x, state, y = backendtest.F32Type(B, S, I), backendtest.F32Type(B, D, H), backendtest.F32Type(B, S, D, H)
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

// TestResizeLoweringsMatchKernels: Resize and Upsample as Gathers with
// constant indices and weights, and ResizeGrad as their scatter-add,
// give the kernels' values over the modes, coordinate transformations,
// rounding modes and opsets.
func TestResizeLoweringsMatchKernels(t *testing.T) {
	f := func(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
	i64 := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	type rcase struct {
		name  string
		opset int64
		x     []int64
		roi   *graph.Tensor
		scale *graph.Tensor
		sizes *graph.Tensor
		attrs []*graph.Attr
		op    string // Resize (default) or Upsample
	}
	s := graph.StringAttr
	cases := []rcase{
		{name: "nearest-asymmetric-floor-2x", opset: 17, x: []int64{2, 3, 4, 5}, scale: f(1, 1, 2, 2),
			attrs: []*graph.Attr{s("coordinate_transformation_mode", "asymmetric"), s("nearest_mode", "floor")}},
		{name: "nearest-half-pixel-round-prefer-ceil-down", opset: 13, x: []int64{1, 2, 7, 9}, scale: f(1, 1, 0.6, 0.45),
			attrs: []*graph.Attr{s("nearest_mode", "round_prefer_ceil")}},
		{name: "nearest-align-corners-ceil-sizes", opset: 13, x: []int64{1, 2, 4, 5}, sizes: i64(1, 2, 7, 3),
			attrs: []*graph.Attr{s("coordinate_transformation_mode", "align_corners"), s("nearest_mode", "ceil")}},
		{name: "linear-half-pixel-1.5x", opset: 17, x: []int64{2, 2, 6, 6}, scale: f(1, 1, 1.5, 1.5),
			attrs: []*graph.Attr{s("mode", "linear")}},
		{name: "linear-align-corners-sizes", opset: 13, x: []int64{1, 3, 5, 4}, sizes: i64(1, 3, 9, 7),
			attrs: []*graph.Attr{s("mode", "linear"), s("coordinate_transformation_mode", "align_corners")}},
		{name: "linear-pytorch-half-pixel-down", opset: 13, x: []int64{1, 1, 8, 6}, sizes: i64(1, 1, 3, 1),
			attrs: []*graph.Attr{s("mode", "linear"), s("coordinate_transformation_mode", "pytorch_half_pixel")}},
		{name: "linear-asymmetric-3d", opset: 13, x: []int64{1, 2, 3, 4, 5}, scale: f(1, 1, 2, 0.5, 1.4),
			attrs: []*graph.Attr{s("mode", "linear"), s("coordinate_transformation_mode", "asymmetric")}},
		{name: "cubic-half-pixel-up", opset: 13, x: []int64{1, 2, 4, 4}, scale: f(1, 1, 2, 1.5),
			attrs: []*graph.Attr{s("mode", "cubic")}},
		{name: "cubic-exclude-outside-down", opset: 13, x: []int64{1, 1, 8, 8}, scale: f(1, 1, 0.8, 0.6),
			attrs: []*graph.Attr{s("mode", "cubic"), graph.FloatAttr("cubic_coeff_a", -0.5), graph.IntAttr("exclude_outside", 1)}},
		{name: "tf-crop-and-resize-extrapolation", opset: 13, x: []int64{1, 1, 5, 5}, roi: f(0, 0, -0.2, 0.3, 1, 1, 0.9, 1.3), sizes: i64(1, 1, 4, 6),
			attrs: []*graph.Attr{s("mode", "linear"), s("coordinate_transformation_mode", "tf_crop_and_resize"), graph.FloatAttr("extrapolation_value", 10)}},
		{name: "antialias-axes-18", opset: 18, x: []int64{1, 2, 9, 8}, scale: f(0.5, 0.4),
			attrs: []*graph.Attr{s("mode", "linear"), graph.IntAttr("antialias", 1), graph.IntsAttr("axes", 2, 3)}},
		{name: "cubic-antialias-not-larger-18", opset: 18, x: []int64{1, 1, 9, 8}, sizes: i64(5, 3),
			attrs: []*graph.Attr{s("mode", "cubic"), graph.IntAttr("antialias", 1), graph.IntsAttr("axes", 2, 3), s("keep_aspect_ratio_policy", "not_larger")}},
		{name: "resize-10-linear", opset: 10, x: []int64{1, 2, 3, 4}, scale: f(1, 1, 2, 1.5),
			attrs: []*graph.Attr{s("mode", "linear")}},
		{name: "upsample-9-nearest", opset: 9, op: "Upsample", x: []int64{1, 2, 3, 4}, scale: f(1, 1, 2, 3)},
		{name: "upsample-7-attribute", opset: 7, op: "Upsample", x: []int64{1, 2, 3, 4},
			attrs: []*graph.Attr{graph.FloatsAttr("scales", 1, 1, 2, 2), s("mode", "bilinear")}},
	}
	for _, c := range cases {
		op := c.op
		if op == "" {
			op = "Resize"
		}
		consts := map[string]*graph.Tensor{}
		in := []string{"X"}
		legacy := op == "Upsample" || c.opset < 11
		if legacy {
			if c.scale != nil {
				in = append(in, "scales")
				consts["scales"] = c.scale
			}
		} else {
			in = append(in, "", "", "")
			for i, v := range []*graph.Tensor{c.roi, c.scale, c.sizes} {
				if v != nil {
					name := []string{"roi", "scales", "sizes"}[i]
					in[i+1] = name
					consts[name] = v
				}
			}
			for len(in) > 1 && in[len(in)-1] == "" {
				in = in[:len(in)-1]
			}
		}
		n := &graph.Node{Name: op, OpType: op, Inputs: in, Outputs: []string{"Y"}}
		for _, a := range c.attrs {
			n.SetAttr(a)
		}
		t.Run(c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, opset: c.opset, consts: consts,
				inputs: map[string]*graph.Type{"X": backendtest.F32Type(c.x...)}, tol: 1e-7})
		})
		// The gradient op autodiff emits for this node.
		out := runResizeShape(t, n, c.opset, consts, c.x)
		gconsts := map[string]*graph.Tensor{"xshape": graph.FromInt64(append([]int64{}, c.x...), len(c.x))}
		gin := []string{"dY", "xshape", "", "", ""}
		if legacy {
			if c.scale != nil {
				gin[3] = "scales"
				gconsts["scales"] = c.scale
			}
		} else {
			for i, name := range []string{"roi", "scales", "sizes"} {
				if v := consts[name]; v != nil {
					gin[i+2], gconsts[name] = name, v
				}
			}
		}
		g := &graph.Node{Name: "ResizeGrad", OpType: "ResizeGrad", Domain: graph.InternalDomain, Inputs: gin, Outputs: []string{"dX"}}
		for _, a := range c.attrs {
			g.SetAttr(a)
		}
		if legacy {
			g.SetAttr(graph.IntAttr("legacy", 1))
		}
		t.Run(c.name+"/grad", func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name + "/grad", n: g, opset: c.opset, consts: gconsts,
				inputs: map[string]*graph.Type{"dY": backendtest.F32Type(out...)}, tol: 1e-6})
		})
	}
}

// runResizeShape is the shape of n's output for an input of shape x, from
// the kernel.
func runResizeShape(t *testing.T, n *graph.Node, opset int64, consts map[string]*graph.Tensor, x []int64) []int64 {
	t.Helper()
	g := graph.NewGraph("shape")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: backendtest.F32Type(x...)}}
	for k, v := range consts {
		g.Initializers[k] = v
	}
	g.Outputs = []*graph.ValueInfo{{Name: "Y"}}
	g.Nodes = []*graph.Node{n}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}
	exe, err := (&Backend{}).Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	xs := make([]int, len(x))
	for i, d := range x {
		xs[i] = int(d)
	}
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"X": graph.Zeros(graph.Float32, xs...)})
	require.NoError(t, err)
	var s []int64
	for _, d := range out["Y"].Shape {
		s = append(s, int64(d))
	}
	return s
}

// TestRunTimeValueCasesLowerOnceTheValuesAreConstants runs the ONNX node
// cases whose shape-fixing inputs (Resize's scales, sizes and roi) are
// graph inputs, and which PrimitivesOnly therefore leaves to their kernels
// (primitiveGaps), with those inputs made initializers: then they must
// lower entirely to primitives and match the ONNX reference outputs. The
// same holds for Split's sizes, Squeeze's and Unsqueeze's axes, Tile's
// repeats and OneHot's depth.
func TestRunTimeValueCasesLowerOnceTheValuesAreConstants(t *testing.T) {
	root := testutil.ONNXTestdata(t)
	// Case-name patterns and the data inputs that stay graph inputs.
	for pattern, keep := range map[string][]string{
		"test_resize_*": {"X"}, "test_upsample_nearest": {"X"}, "test_split_variable_parts_*": {"input"},
		"test_squeeze*": {"x"}, "test_unsqueeze_*": {"x"}, "test_tile*": {"x"},
		"test_onehot_*": {"indices", "values"}, "test_maxunpool_export_with_output_shape": {"xT", "xI"},
	} {
		cases, err := filepath.Glob(filepath.Join(root, "node", pattern))
		require.NoError(t, err)
		require.NotEmpty(t, cases, pattern)
		for _, dir := range cases {
			t.Run(filepath.Base(dir), func(t *testing.T) {
				checkWithConstantInputs(t, dir, keep...)
			})
		}
	}
}

// checkWithConstantInputs loads the conformance case in dir, turns every
// graph input except keep into an initializer holding test_data_set_0's
// value, compiles it with PrimitivesOnly and requires no gap and the
// reference outputs (to 1e-5 relative and absolute).
func checkWithConstantInputs(t *testing.T, dir string, keep ...string) {
	t.Helper()
	m, err := importer.Load(filepath.Join(dir, "model.onnx"))
	require.NoError(t, err)
	set := filepath.Join(dir, "test_data_set_0")
	feeds := map[string]*graph.Tensor{}
	var inputs []*graph.ValueInfo
	for k, in := range m.Graph.Inputs {
		v, _, err := importer.ReadTensorFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", k)))
		require.NoError(t, err)
		if slices.Contains(keep, in.Name) {
			feeds[in.Name] = v
			inputs = append(inputs, in)
			continue
		}
		m.Graph.Initializers[in.Name] = v
	}
	m.Graph.Inputs = inputs
	exe, err := (&Backend{}).Compile(m, backend.CompileOptions{PrimitivesOnly: true})
	require.NoError(t, err)
	got, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	assert.Empty(t, exe.(*Executable).PrimitiveGaps(), "every op lowers once its values are constants")
	for k, out := range m.Graph.Outputs {
		want, _, err := importer.ReadTensorFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", k)))
		require.NoError(t, err)
		require.NotNil(t, got[out.Name], out.Name)
		ok, why, _, _ := conformance.Compare(want, got[out.Name], 1e-5, 1e-5)
		assert.True(t, ok, "%s: %s", out.Name, why)
	}
}

// TestEinsumLoweringMatchesKernel: Einsum as Transpose, Reshape, Gather,
// ReduceSum and MatMul gives the kernel's values for products, sums,
// transposes, diagonals, broadcasting labels and ellipses, implicit
// outputs and chains of three operands.
func TestEinsumLoweringMatchesKernel(t *testing.T) {
	f64 := func(dims ...int64) *graph.Type {
		ty := backendtest.F32Type(dims...)
		ty.DType = graph.Float64
		return ty
	}
	for _, c := range []struct {
		eq     string
		shapes []*graph.Type
	}{
		{"ij,jk->ik", []*graph.Type{backendtest.F32Type(3, 4), backendtest.F32Type(4, 5)}},
		{"bij,bjk->bik", []*graph.Type{backendtest.F32Type(2, 3, 4), backendtest.F32Type(2, 4, 5)}},
		{"i,i", []*graph.Type{backendtest.F32Type(7), backendtest.F32Type(7)}},
		{"ij->i", []*graph.Type{backendtest.F32Type(3, 4)}},
		{"ij->ji", []*graph.Type{backendtest.F32Type(3, 4)}},
		{"ij", []*graph.Type{backendtest.F32Type(3, 4)}},
		{"ji", []*graph.Type{backendtest.F32Type(3, 4)}},
		{"...ii->...i", []*graph.Type{backendtest.F32Type(2, 3, 4, 4)}},
		{"ii", []*graph.Type{f64(5, 5)}},
		{"iij,jk->ik", []*graph.Type{backendtest.F32Type(3, 3, 4), backendtest.F32Type(4, 2)}},
		{"ij,ij->ij", []*graph.Type{backendtest.F32Type(3, 4), backendtest.F32Type(1, 4)}},
		{"i,j->ij", []*graph.Type{backendtest.F32Type(3), backendtest.F32Type(4)}},
		{"bhqd,bhkd->bhqk", []*graph.Type{backendtest.F32Type(2, 3, 5, 4), backendtest.F32Type(2, 3, 6, 4)}},
		{"...ij,...jk", []*graph.Type{backendtest.F32Type(2, 3, 4, 5), backendtest.F32Type(3, 5, 6)}},
		{"...ij,...jk->...ik", []*graph.Type{backendtest.F32Type(2, 1, 4, 5), backendtest.F32Type(3, 5, 6)}},
		{"ab,cd->", []*graph.Type{backendtest.F32Type(2, 3), backendtest.F32Type(4, 5)}},
		{"ij,j->i", []*graph.Type{backendtest.F32Type(3, 1), backendtest.F32Type(4)}},
		{"Ab,bC", []*graph.Type{backendtest.F32Type(3, 4), backendtest.F32Type(4, 2)}},
		{"ij,jk,kl->il", []*graph.Type{backendtest.F32Type(2, 3), backendtest.F32Type(3, 4), backendtest.F32Type(4, 5)}},
		{"i,i,i->", []*graph.Type{f64(6), f64(6), f64(6)}},
		{"bn,anm,bm->ba", []*graph.Type{backendtest.F32Type(2, 3), backendtest.F32Type(4, 3, 5), backendtest.F32Type(2, 5)}},
	} {
		t.Run(c.eq, func(t *testing.T) {
			types := map[string]*graph.Type{}
			var in []string
			for i, s := range c.shapes {
				name := fmt.Sprintf("x%d", i)
				in = append(in, name)
				types[name] = s
			}
			n := &graph.Node{Name: "Einsum", OpType: "Einsum", Inputs: in, Outputs: []string{"y"}}
			n.SetAttr(graph.StringAttr("equation", c.eq))
			checkLoweringMatchesKernel(t, loweringCase{name: c.eq, n: n, inputs: types, opset: 12, tol: 1e-5})
		})
	}
}

// TestPreviewTrainingOptimizerLoweringsMatchKernels: Adagrad, Adam and
// Momentum (ai.onnx.preview.training) as elementwise primitives give the
// kernels' updates, on the first step (T = 0) and a later one, for two
// tensors of different dtypes and with broadcasting operands.
func TestPreviewTrainingOptimizerLoweringsMatchKernels(t *testing.T) {
	f64 := func(dims ...int64) *graph.Type {
		ty := backendtest.F32Type(dims...)
		ty.DType = graph.Float64
		return ty
	}
	types := map[string]*graph.Type{
		"X1": backendtest.F32Type(3, 4), "G1": backendtest.F32Type(3, 4), "S1": backendtest.F32Type(3, 4), "Q1": backendtest.F32Type(4),
		"X2": f64(5), "G2": f64(5), "S2": f64(5), "Q2": f64(5),
	}
	f := graph.FloatAttr
	for _, c := range []struct {
		name   string
		op     string
		states []string
		attrs  []*graph.Attr
	}{
		{"Adagrad", "Adagrad", []string{"S"}, []*graph.Attr{f("decay_factor", 0.1), f("epsilon", 1e-6), f("norm_coefficient", 0.01)}},
		{"Adam", "Adam", []string{"S", "Q"}, []*graph.Attr{f("alpha", 0.85), f("beta", 0.99), f("epsilon", 1e-7), f("norm_coefficient", 0.02), f("norm_coefficient_post", 0.01)}},
		{"Adam/defaults", "Adam", []string{"S", "Q"}, nil},
		{"Momentum/standard", "Momentum", []string{"S"}, []*graph.Attr{f("alpha", 0.9), f("beta", 0.3), f("norm_coefficient", 0.01), graph.StringAttr("mode", "standard")}},
		{"Momentum/nesterov", "Momentum", []string{"S"}, []*graph.Attr{f("alpha", 0.8), f("beta", 0.5), f("norm_coefficient", 0), graph.StringAttr("mode", "nesterov")}},
	} {
		for _, step := range []int64{0, 3} {
			in := []string{"R", "T", "X1", "X2", "G1", "G2"}
			out := []string{"X1n", "X2n"}
			for _, s := range c.states {
				in = append(in, s+"1", s+"2")
				out = append(out, s+"1n", s+"2n")
			}
			n := &graph.Node{Name: c.op, OpType: c.op, Domain: "ai.onnx.preview.training", Inputs: in, Outputs: out}
			for _, a := range c.attrs {
				n.SetAttr(a)
			}
			fixed := map[string]*graph.Tensor{"R": graph.FromFloat32([]float32{0.05}), "T": graph.FromInt64([]int64{step})}
			t.Run(fmt.Sprintf("%s/T=%d", c.name, step), func(t *testing.T) {
				positive := map[string]bool{"Q1": true, "Q2": true}
				if c.op == "Adagrad" {
					positive = map[string]bool{"S1": true, "S2": true}
				}
				tc := loweringCase{name: c.name, n: n, inputs: types, fixed: fixed, positive: positive, opset: 17, tol: 1e-6}
				checkLoweringMatchesKernel(t, tc)
			})
		}
	}
}

// TestSequenceAndUnpoolLoweringsMatchKernels: ReverseSequence (either axis
// order, lengths read at run time) and MaxUnpool (with and without an
// output_shape that pads) give the kernels' values.
func TestSequenceAndUnpoolLoweringsMatchKernels(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch int64
	}{{"time-major", 1}, {"batch-major", 0}} {
		n := &graph.Node{Name: "rs", OpType: "ReverseSequence", Inputs: []string{"x", "lens"}, Outputs: []string{"y"}}
		n.SetAttr(graph.IntAttr("batch_axis", c.batch))
		n.SetAttr(graph.IntAttr("time_axis", 1-c.batch))
		shape := []int64{5, 3, 2}
		if c.batch == 0 {
			shape = []int64{3, 5, 2}
		}
		t.Run("ReverseSequence/"+c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, inputs: map[string]*graph.Type{"x": backendtest.F32Type(shape...)},
				fixed: map[string]*graph.Tensor{"lens": graph.FromInt64([]int64{5, 0, 2}, 3)}, opset: 10})
		})
	}
	// MaxPool indices of a 2x2, stride 2 pool over 1x2x4x6, then unpooled.
	idx := make([]int64, 12)
	for c := int64(0); c < 2; c++ {
		for i := int64(0); i < 2; i++ {
			for j := int64(0); j < 3; j++ {
				idx[c*6+i*3+j] = c*24 + (2*i+(i+j)%2)*6 + 2*j + (j % 2)
			}
		}
	}
	for _, c := range []struct {
		name  string
		shape *graph.Tensor
	}{{"natural", nil}, {"pad", graph.FromInt64([]int64{1, 2, 5, 7}, 4)}} {
		in := []string{"x", "i"}
		consts := map[string]*graph.Tensor{"i": graph.FromInt64(idx, 1, 2, 2, 3)}
		if c.shape != nil {
			in = append(in, "os")
			consts["os"] = c.shape
		}
		n := &graph.Node{Name: "unpool", OpType: "MaxUnpool", Inputs: in, Outputs: []string{"y"}}
		n.SetAttr(graph.IntsAttr("kernel_shape", 2, 2))
		n.SetAttr(graph.IntsAttr("strides", 2, 2))
		t.Run("MaxUnpool/"+c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, inputs: map[string]*graph.Type{"x": backendtest.F32Type(1, 2, 2, 3)}, consts: consts, opset: 11})
		})
	}
}

// TestGatherNDBatchDimsLoweringMatchesKernel: GatherND with batch_dims 1
// and 2 (negative indices included) as one Gather gives the kernel's values.
func TestGatherNDBatchDimsLoweringMatchesKernel(t *testing.T) {
	for _, c := range []struct {
		name      string
		data      []int64
		idx       *graph.Tensor
		batchDims int64
	}{
		{"batch1", []int64{2, 3, 4}, graph.FromInt64([]int64{0, 2, -1, 1, 2, 0, 1, -3, 2, 2}, 2, 5, 1), 1},
		{"batch1-pairs", []int64{2, 3, 4}, graph.FromInt64([]int64{0, 3, 2, -1, 1, 1, 0, 0}, 2, 2, 2), 1},
		{"batch2", []int64{2, 3, 4, 5}, graph.FromInt64([]int64{0, 4, 3, 1, -1, 2, 1, 1, 2, 0, 3, 3}, 2, 3, 2), 2},
	} {
		n := &graph.Node{Name: "gnd", OpType: "GatherND", Inputs: []string{"x", "i"}, Outputs: []string{"y"}}
		n.SetAttr(graph.IntAttr("batch_dims", c.batchDims))
		t.Run(c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, inputs: map[string]*graph.Type{"x": backendtest.F32Type(c.data...)},
				consts: map[string]*graph.Tensor{"i": c.idx}, opset: 13, tol: 1e-9})
		})
	}
}

// TestDropoutTrainingLoweringDrawsTheKernelsStream: Dropout in training
// mode lowered to RandomUniformLike, Less and Where keeps and scales exactly
// the elements the kernel does (the same draws from the executable's
// seeded generator), and with ratio 0 passes its input on.
func TestDropoutTrainingLoweringDrawsTheKernelsStream(t *testing.T) {
	f64 := func(dims ...int64) *graph.Type {
		ty := backendtest.F32Type(dims...)
		ty.DType = graph.Float64
		return ty
	}
	for _, c := range []struct {
		name  string
		x     *graph.Type
		ratio float32
	}{{"float32", backendtest.F32Type(4, 33), 0.3}, {"float64", f64(5, 7), 0.6}, {"ratio0", backendtest.F32Type(3, 5), 0}} {
		n := &graph.Node{Name: "drop", OpType: "Dropout", Inputs: []string{"x", "r", "training"}, Outputs: []string{"y", "mask"}}
		consts := map[string]*graph.Tensor{"r": graph.FromFloat32([]float32{c.ratio}), "training": {DType: graph.Bool, Data: []bool{true}}}
		t.Run(c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, inputs: map[string]*graph.Type{"x": c.x}, consts: consts, opset: 13, tol: 1e-12})
		})
	}
}

// TestGridSampleLoweringMatchesKernel: GridSample lowered to primitives
// gives the kernel's values over every mode, padding mode and
// align_corners, on 1, 2 and 3 spatial axes, with grid points inside, on
// and outside the input's borders and some NaN and infinite coordinates:
// bit for bit (NaN where it gives NaN) for float64 inputs, which both
// compute in float64, and within float32 rounding for float32 inputs,
// which the lowering computes in float32.
func TestGridSampleLoweringMatchesKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
		tol := 2e-5
		if dt == graph.Float64 {
			tol = 1e-300
		}
		for _, dims := range [][]int{{5}, {4, 6}, {3, 4, 5}} {
			r := len(dims)
			xType := &graph.Type{Kind: graph.KindTensor, DType: dt, HasShape: true}
			for _, d := range append([]int{2, 3}, dims...) {
				xType.Shape = append(xType.Shape, graph.Dim{Value: int64(d), Known: true})
			}
			out := []int{3, 4, 2}[:r]
			grid := graph.Zeros(dt, append(append([]int{2}, out...), r)...)
			special := []float64{-1, 1, 0, 0.5, -0.5, 2.5, -3.25, math.NaN(), math.Inf(1), math.Inf(-1)}
			for i := 0; i < grid.Size(); i++ {
				v := rng.NormFloat64() * 1.4
				if i%4 == 0 {
					v = special[(i/4)%len(special)]
				}
				grid.SetFloat(i, v)
			}
			for _, mode := range []string{"nearest", "linear", "cubic"} {
				for _, pad := range []string{"zeros", "border", "reflection"} {
					for _, align := range []int64{0, 1} {
						name := fmt.Sprintf("%v-%dd-%s-%s-align%d", dt, r, mode, pad, align)
						t.Run(name, func(t *testing.T) {
							n := &graph.Node{Name: "gs", OpType: "GridSample", Inputs: []string{"X", "grid"}, Outputs: []string{"Y"},
								Attrs: map[string]*graph.Attr{"mode": graph.StringAttr("mode", mode), "padding_mode": graph.StringAttr("padding_mode", pad),
									"align_corners": graph.IntAttr("align_corners", align)}}
							checkLoweringMatchesKernel(t, loweringCase{name: name, n: n, opset: 20, tol: tol,
								inputs: map[string]*graph.Type{"X": xType}, fixed: map[string]*graph.Tensor{"grid": grid}})
						})
					}
				}
			}
		}
	}
}

// TestRoiAlignLoweringMatchesKernel: RoiAlign with a positive
// sampling_ratio lowered to primitives gives the kernel's values (bit for
// bit for float64 inputs, within float32 rounding for float32 ones), in
// both modes and coordinate transformations, with regions inside, across
// and outside the image's borders, on two images.
func TestRoiAlignLoweringMatchesKernel(t *testing.T) {
	for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
		tol := 2e-5
		if dt == graph.Float64 {
			tol = 1e-300
		}
		xType := &graph.Type{Kind: graph.KindTensor, DType: dt, HasShape: true,
			Shape: []graph.Dim{{Value: 2, Known: true}, {Value: 3, Known: true}, {Value: 7, Known: true}, {Value: 9, Known: true}}}
		rois32 := graph.FromFloat32([]float32{
			0, 0, 8, 6, // the whole image
			1.3, 0.7, 4.6, 5.2, // inside
			-3, -2, 3, 2.5, // across the top-left border
			6, 4, 12, 10, // across the bottom-right border
			-9, -9, -4, -5, // outside
			2, 2, 2.4, 2.2, // smaller than a pixel
		}, 6, 4)
		rois := graph.Zeros(dt, 6, 4)
		for i := 0; i < rois.Size(); i++ {
			rois.SetFloat(i, rois32.Float(i))
		}
		bi := graph.FromInt64([]int64{0, 1, 1, 0, 1, 0}, 6)
		for _, mode := range []string{"avg", "max"} {
			for _, coord := range []string{"half_pixel", "output_half_pixel"} {
				for _, sr := range []int64{1, 2, 3} {
					name := fmt.Sprintf("%v-%s-%s-sr%d", dt, mode, coord, sr)
					t.Run(name, func(t *testing.T) {
						n := &graph.Node{Name: "ra", OpType: "RoiAlign", Inputs: []string{"X", "rois", "bi"}, Outputs: []string{"Y"},
							Attrs: map[string]*graph.Attr{"mode": graph.StringAttr("mode", mode),
								"coordinate_transformation_mode": graph.StringAttr("coordinate_transformation_mode", coord),
								"output_height":                  graph.IntAttr("output_height", 3), "output_width": graph.IntAttr("output_width", 4),
								"sampling_ratio": graph.IntAttr("sampling_ratio", sr), "spatial_scale": graph.FloatAttr("spatial_scale", 0.75)}}
						checkLoweringMatchesKernel(t, loweringCase{name: name, n: n, opset: 16, tol: tol,
							inputs: map[string]*graph.Type{"X": xType}, fixed: map[string]*graph.Tensor{"rois": rois, "bi": bi}})
					})
				}
			}
		}
	}
}

// TestPadAndAveragePoolGradLoweringsMatchKernels: the gradient ops of Pad
// (every mode, negative pads, axes) and AveragePool (strides, pads,
// dilations, ceil_mode, count_include_pad, auto_pad, 1-D to 3-D) lowered
// to primitives give the kernels' values.
func TestPadAndAveragePoolGradLoweringsMatchKernels(t *testing.T) {
	f32 := func(shape ...int64) *graph.Type { return staticType(graph.Float32, shape...) }
	i64 := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	s, is, in := graph.StringAttr, graph.IntsAttr, graph.IntAttr
	type pcase struct {
		name string
		mode string
		x    []int64
		pads []int64
		axes []int64
	}
	for _, c := range []pcase{
		{"constant", "constant", []int64{2, 3, 4}, []int64{0, 1, 2, 0, 2, 1}, nil},
		{"constant-crop", "constant", []int64{2, 5, 4}, []int64{0, -1, 2, 0, 1, -2}, nil},
		{"reflect", "reflect", []int64{2, 5, 6}, []int64{0, 2, 3, 0, 4, 1}, nil},
		{"edge-axes", "edge", []int64{3, 4, 5}, []int64{2, 3, 1, 4}, []int64{-1, 0}},
		{"wrap", "wrap", []int64{2, 3, 4}, []int64{0, 5, 1, 0, 2, 6}, nil},
	} {
		padded := append([]int64{}, c.x...)
		r := len(c.x)
		for i := range padded {
			a := i
			if c.axes != nil {
				continue
			}
			padded[a] += c.pads[i] + c.pads[i+r]
		}
		for k, a := range c.axes {
			if a < 0 {
				a += int64(r)
			}
			padded[a] += c.pads[k] + c.pads[k+len(c.axes)]
		}
		inputs := []string{"dy", "x", "pads"}
		consts := map[string]*graph.Tensor{"pads": i64(c.pads...)}
		if c.axes != nil {
			inputs = append(inputs, "", "axes")
			consts["axes"] = i64(c.axes...)
		}
		n := internalNode("PadGrad", inputs, s("mode", c.mode))
		t.Run("PadGrad/"+c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, opset: 18, tol: 1e-6, consts: consts,
				inputs: map[string]*graph.Type{"dy": f32(padded...), "x": f32(c.x...)}})
		})
	}
	type acase struct {
		name  string
		x, y  []int64
		attrs []*graph.Attr
	}
	for _, c := range []acase{
		{"2x2-stride2", []int64{2, 3, 6, 6}, []int64{2, 3, 3, 3}, []*graph.Attr{is("kernel_shape", 2, 2), is("strides", 2, 2)}},
		{"3x3-pads", []int64{1, 2, 5, 6}, []int64{1, 2, 5, 6}, []*graph.Attr{is("kernel_shape", 3, 3), is("pads", 1, 1, 1, 1)}},
		{"3x3-pads-include", []int64{1, 2, 5, 6}, []int64{1, 2, 3, 3}, []*graph.Attr{is("kernel_shape", 3, 3), is("pads", 1, 1, 1, 1), is("strides", 2, 2), in("count_include_pad", 1)}},
		{"ceil", []int64{1, 2, 8, 6}, []int64{1, 2, 4, 3}, []*graph.Attr{is("kernel_shape", 3, 3), is("strides", 2, 2), in("ceil_mode", 1)}},
		{"ceil-pads-include", []int64{1, 1, 7, 5}, []int64{1, 1, 4, 3}, []*graph.Attr{is("kernel_shape", 3, 2), is("strides", 2, 2), is("pads", 1, 0, 1, 1), in("ceil_mode", 1), in("count_include_pad", 1)}},
		{"dilations-19", []int64{1, 2, 7, 7}, []int64{1, 2, 3, 3}, []*graph.Attr{is("kernel_shape", 3, 3), is("dilations", 2, 2), is("strides", 1, 1)}},
		{"same-upper", []int64{1, 2, 5, 7}, []int64{1, 2, 3, 4}, []*graph.Attr{is("kernel_shape", 3, 2), is("strides", 2, 2), s("auto_pad", "SAME_UPPER")}},
		{"1d", []int64{2, 3, 9}, []int64{2, 3, 4}, []*graph.Attr{is("kernel_shape", 3), is("strides", 2)}},
		{"3d", []int64{1, 2, 4, 5, 6}, []int64{1, 2, 2, 2, 3}, []*graph.Attr{is("kernel_shape", 2, 3, 2), is("strides", 2, 2, 2), is("pads", 0, 1, 0, 0, 0, 0)}},
	} {
		n := internalNode("AveragePoolGrad", []string{"dy", "shape"}, c.attrs...)
		t.Run("AveragePoolGrad/"+c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, opset: 19, tol: 1e-6,
				consts: map[string]*graph.Tensor{"shape": i64(c.x...)}, inputs: map[string]*graph.Type{"dy": f32(c.y...)}})
		})
	}
}

// TestLossAndGlobalPoolGradLoweringsMatchKernels: NegativeLogLikelihoodLoss's
// gradient (each reduction, class weights, ignore_index, spatial targets)
// and GlobalMaxPool's (ties included: the first maximum takes it) lowered
// to primitives give the kernels' values.
func TestLossAndGlobalPoolGradLoweringsMatchKernels(t *testing.T) {
	typ := staticType
	i64 := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	target := graph.FromInt64([]int64{2, 0, 4, 1, 4, 3, 0, 2, 1, 3, 4, 2}, 4, 3)
	weight := graph.FromFloat32([]float32{0.5, 1, 2, 1.5, 0.25}, 5)
	for _, c := range []struct {
		name      string
		reduction string
		weighted  bool
		ignore    bool
	}{
		{"mean", "mean", false, false}, {"sum-weighted", "sum", true, false}, {"none", "none", false, false},
		{"mean-weighted-ignore", "mean", true, true}, {"none-ignore", "none", false, true},
	} {
		attrs := []*graph.Attr{graph.StringAttr("reduction", c.reduction)}
		if c.ignore {
			attrs = append(attrs, graph.IntAttr("ignore_index", 4))
		}
		inputs := []string{"dy", "shape", "target"}
		fixed := map[string]*graph.Tensor{"target": target}
		if c.weighted {
			inputs = append(inputs, "weight")
			fixed["weight"] = weight
		}
		dyType := typ(graph.Float32)
		if c.reduction == "none" {
			dyType = typ(graph.Float32, 4, 3)
		}
		n := internalNode("NegativeLogLikelihoodLossGrad", inputs, attrs...)
		t.Run("NLLLossGrad/"+c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, opset: 17, consts: map[string]*graph.Tensor{"shape": i64(4, 5, 3)},
				fixed: fixed, inputs: map[string]*graph.Type{"dy": dyType}})
		})
	}
	ties := graph.Zeros(graph.Float32, 2, 3, 2, 2)
	for i := 0; i < ties.Size(); i++ {
		ties.SetFloat(i, float64([]int{1, 3, 3, 0, 2, 5, 1, 5}[i%8])) // every plane's maximum twice
	}
	n := internalNode("GlobalMaxPoolGrad", []string{"dy", "x"})
	t.Run("GlobalMaxPoolGrad", func(t *testing.T) {
		checkLoweringMatchesKernel(t, loweringCase{name: "gmp", n: n, opset: 17, fixed: map[string]*graph.Tensor{"x": ties},
			inputs: map[string]*graph.Type{"dy": typ(graph.Float32, 2, 3, 1, 1)}})
	})
}

// TestGroupNormLoweringsMatchKernels: GroupNormalization (opset 18's
// per-group parameters) and GroupNormalizationGrad (per-channel parameters
// as InstanceNormalization's gradient uses them, per-group ones, and one
// group per channel) lowered to primitives give the kernels' values.
func TestGroupNormLoweringsMatchKernels(t *testing.T) {
	typ := func(shape ...int64) *graph.Type { return staticType(graph.Float32, shape...) }
	fwd := &graph.Node{Name: "gn", OpType: "GroupNormalization", Inputs: []string{"x", "s", "b"}, Outputs: []string{"y"},
		Attrs: map[string]*graph.Attr{"num_groups": graph.IntAttr("num_groups", 3), "epsilon": graph.FloatAttr("epsilon", 1e-3)}}
	checkLoweringMatchesKernel(t, loweringCase{name: "forward", n: fwd, opset: 18, tol: 1e-5,
		inputs: map[string]*graph.Type{"x": typ(2, 6, 4, 5), "s": typ(3), "b": typ(3)}})
	for _, c := range []struct {
		name   string
		groups int64
		params int64
	}{{"per-channel", 2, 6}, {"per-group", 3, 3}, {"instance", 0, 6}} {
		attrs := map[string]*graph.Attr{"epsilon": graph.FloatAttr("epsilon", 1e-5)}
		if c.groups != 0 {
			attrs["num_groups"] = graph.IntAttr("num_groups", c.groups)
		}
		n := &graph.Node{Name: "gng", OpType: "GroupNormalizationGrad", Domain: graph.InternalDomain, Inputs: []string{"dy", "x", "s"},
			Outputs: []string{"dx", "ds", "db"}, Attrs: attrs}
		t.Run(c.name, func(t *testing.T) {
			checkLoweringMatchesKernel(t, loweringCase{name: c.name, n: n, opset: 18, tol: 1e-4,
				inputs: map[string]*graph.Type{"dy": typ(2, 6, 4, 5), "x": typ(2, 6, 4, 5), "s": typ(c.params)}})
		})
	}
}

// staticType is a tensor type of dtype dt and the given known shape.
func staticType(dt graph.DType, shape ...int64) *graph.Type {
	out := &graph.Type{Kind: graph.KindTensor, DType: dt, HasShape: true}
	for _, d := range shape {
		out.Shape = append(out.Shape, graph.Dim{Value: d, Known: true})
	}
	return out
}

// internalNode is a node of onnxtrain's internal domain with one output,
// dx.
func internalNode(op string, inputs []string, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: op, OpType: op, Domain: graph.InternalDomain, Inputs: inputs, Outputs: []string{"dx"}, Attrs: map[string]*graph.Attr{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	return n
}
