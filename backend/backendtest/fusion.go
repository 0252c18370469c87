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

// normalInputs draws every (float32, static-shape) graph input of g from a
// normal distribution with standard deviation sd.
func NormalInputs(g *graph.Graph, rng *rand.Rand, sd float64) map[string]*graph.Tensor {
	inputs := map[string]*graph.Tensor{}
	for _, in := range g.Inputs {
		var shape []int
		for _, d := range in.Type.Shape {
			shape = append(shape, int(d.Value))
		}
		x := graph.Zeros(graph.Float32, shape...)
		for i := range x.Float32s() {
			x.Float32s()[i] = float32(rng.NormFloat64() * sd)
		}
		inputs[in.Name] = x
	}
	return inputs
}

// runPlanned compiles m (fusion off with disable), runs it twice on inputs
// (for the CPU, the second run in the memory plan specialised to their
// shapes) and returns the last run's outputs and the op types the last run
// ran with their counts.
func (kc checker) runPlanned(t *testing.T, m *graph.Model, inputs map[string]*graph.Tensor, disable bool) (map[string]*graph.Tensor, map[string]int) {
	t.Helper()
	exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
	require.NoError(t, err)
	var out map[string]*graph.Tensor
	for i := 0; i < 2; i++ {
		out, err = exe.Run(context.Background(), inputs)
		require.NoError(t, err)
	}
	ops := map[string]int{}
	for _, n := range kc.lastRunNodes(t, exe) {
		ops[n.OpType]++
	}
	return out, ops
}

func F32Type(dims ...int64) *graph.Type {
	t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true}
	for _, d := range dims {
		t.Shape = append(t.Shape, graph.Dim{Value: d, Known: true})
	}
	return t
}

// fusedTransposedMatMul: MatMul nodes reading Transposes of the last
// two axes (2-D weights, attention's 4-D Kᵀ) run as TransposedMatMul
// (GEMMs reading the operands in place) and give the unfused graph's
// results, both checked against a float64 product; a Transpose that is
// also a graph output stays.
func (kc checker) fusedTransposedMatMul(t *testing.T) {
	perm := func() map[string]*graph.Attr {
		return map[string]*graph.Attr{"perm": {Name: "perm", Type: graph.AttrInts, Ints: []int64{1, 0}}}
	}
	g := graph.NewGraph("tmm")
	g.Inputs = []*graph.ValueInfo{
		{Name: "a", Type: F32Type(37, 50)}, {Name: "b", Type: F32Type(37, 20)},
		{Name: "c", Type: F32Type(30, 50)}, {Name: "d", Type: F32Type(3, 37, 9)},
		{Name: "q", Type: F32Type(2, 3, 13, 8)}, {Name: "k", Type: F32Type(2, 3, 11, 8)},
	}
	g.Nodes = []*graph.Node{
		{Name: "ta", OpType: "Transpose", Inputs: []string{"a"}, Outputs: []string{"at"}, Attrs: perm()},
		{Name: "tc", OpType: "Transpose", Inputs: []string{"c"}, Outputs: []string{"ct"}, Attrs: perm()},
		{Name: "m1", OpType: "MatMul", Inputs: []string{"at", "b"}, Outputs: []string{"y1"}}, // (50×37)(37×20)
		{Name: "m2", OpType: "MatMul", Inputs: []string{"a", "ct"}, Outputs: []string{"y2"}}, // (37×50)(50×30)
		{Name: "m3", OpType: "MatMul", Inputs: []string{"c", "at"}, Outputs: []string{"y3"}}, // (30×50)(50×37)
		{Name: "m4", OpType: "MatMul", Inputs: []string{"at", "d"}, Outputs: []string{"y4"}}, // batched B
		// Attention's Q·Kᵀ: a 4-D transpose of the last two axes.
		{Name: "tk", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"},
			Attrs: map[string]*graph.Attr{"perm": {Name: "perm", Type: graph.AttrInts, Ints: []int64{0, 1, 3, 2}}}},
		{Name: "m5", OpType: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"y5"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y1"}, {Name: "y2"}, {Name: "y3"}, {Name: "y4"}, {Name: "y5"}, {Name: "ct"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}

	rng := rand.New(rand.NewPCG(5, 6))
	inputs := NormalInputs(g, rng, 1)
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		fused := kc.countCompiled(t, exe, graph.TransposedMatMul)
		if !kc.fuses(disable, graph.TransposedMatMul) {
			assert.Zero(t, fused)
		} else {
			// m2 reads ct, which is also a graph output: left alone.
			assert.Equal(t, 4, fused, "every MatMul reading a transpose only MatMuls read is fused")
			for _, st := range kc.compiledNodes(t, exe) {
				if st.OpType == "Transpose" {
					assert.Equal(t, "tc", st.Name, "only the transpose that is a graph output stays")
				}
			}
		}
		out, err := exe.Run(context.Background(), inputs)
		require.NoError(t, err)
		return out
	}
	fused, plain := run(false), run(true)
	// Reference: float64 products of the transposed matrices.
	at := func(x *graph.Tensor, i, j int, trans bool) float64 {
		if trans {
			i, j = j, i
		}
		return float64(x.Float32s()[i*x.Shape[1]+j])
	}
	ref := func(x, y *graph.Tensor, tx, ty bool, m, n, k int) []float64 {
		out := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				for l := 0; l < k; l++ {
					out[i*n+j] += at(x, i, l, tx) * at(y, l, j, ty)
				}
			}
		}
		return out
	}
	want := map[string][]float64{
		"y1": ref(inputs["a"], inputs["b"], true, false, 50, 20, 37),
		"y2": ref(inputs["a"], inputs["c"], false, true, 37, 30, 50),
		"y3": ref(inputs["c"], inputs["a"], false, true, 30, 37, 50),
	}
	d := inputs["d"]
	for bi := 0; bi < 3; bi++ {
		sub := graph.FromFloat32(d.Float32s()[bi*37*9:(bi+1)*37*9], 37, 9)
		want["y4"] = append(want["y4"], ref(inputs["a"], sub, true, false, 50, 9, 37)...)
	}
	q, k := inputs["q"], inputs["k"]
	for bi := 0; bi < 6; bi++ {
		qs := graph.FromFloat32(q.Float32s()[bi*13*8:(bi+1)*13*8], 13, 8)
		ks := graph.FromFloat32(k.Float32s()[bi*11*8:(bi+1)*11*8], 11, 8)
		want["y5"] = append(want["y5"], ref(qs, ks, false, true, 13, 11, 8)...)
	}
	for name, w := range want {
		require.Len(t, fused[name].Float32s(), len(w), name)
		for i, v := range w {
			assert.InDelta(t, v, float64(fused[name].Float32s()[i]), 1e-4, "%s[%d] fused", name, i)
			assert.InDelta(t, v, float64(plain[name].Float32s()[i]), 1e-4, "%s[%d] unfused", name, i)
		}
	}
	assert.Equal(t, plain["ct"].Float32s(), fused["ct"].Float32s())
}

// fusedReluGrad: Where(Greater(X, 0), dY, 0) with scalar zeros
// (initializers, or CastLike of one) runs as one ReluGrad node, for same-shaped operands and for
// a dY that broadcasts (the unfused kernels' path), and matches both the
// unfused graph bit for bit and the definition (dY where X > 0, else 0;
// NaN and 0 in X give 0).
func (kc checker) fusedReluGrad(t *testing.T) {
	g := graph.NewGraph("relugrad")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(4, 5)}, {Name: "dy", Type: F32Type(4, 5)}, {Name: "db", Type: F32Type(5)}}
	g.Initializers = map[string]*graph.Tensor{
		"z1": graph.FromFloat32([]float32{0}), "z2c": graph.FromFloat64([]float64{0}),
		"z3": graph.FromFloat32([]float32{0}), "z4": graph.FromFloat32([]float32{0}),
	}
	g.Nodes = []*graph.Node{
		// A zero as Relu's gradient rule makes it: CastLike(0, x).
		{Name: "z2", OpType: "CastLike", Inputs: []string{"z2c", "x"}, Outputs: []string{"z2"}},
		{Name: "gt", OpType: "Greater", Inputs: []string{"x", "z1"}, Outputs: []string{"mask"}},
		{Name: "w", OpType: "Where", Inputs: []string{"mask", "dy", "z2"}, Outputs: []string{"dx"}},
		{Name: "gt2", OpType: "Greater", Inputs: []string{"x", "z3"}, Outputs: []string{"mask2"}},
		{Name: "w2", OpType: "Where", Inputs: []string{"mask2", "db", "z4"}, Outputs: []string{"dxb"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "dx"}, {Name: "dxb"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	nan := float32(math.NaN())
	x := graph.FromFloat32([]float32{
		-2, -1, 0, 1, 2,
		nan, 3, -0.5, 0.5, float32(math.Copysign(0, -1)),
		1e-30, -1e-30, 7, -7, 0,
		1, 1, 1, 1, 1}, 4, 5)
	rng := rand.New(rand.NewPCG(9, 10))
	dy := graph.Zeros(graph.Float32, 4, 5)
	for i := range dy.Float32s() {
		dy.Float32s()[i] = float32(rng.NormFloat64())
	}
	db := graph.FromFloat32([]float32{1, 2, 3, 4, 5}, 5)
	inputs := map[string]*graph.Tensor{"x": x, "dy": dy, "db": db}
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		fused := 0
		for _, st := range kc.compiledNodes(t, exe) {
			if st.OpType == graph.ReluGrad {
				fused++
			}
			if kc.fuses(disable, graph.ReluGrad) {
				assert.NotEqual(t, "Greater", st.OpType, "the masks are gone")
			}
		}
		assert.Equal(t, map[bool]int{true: 2, false: 0}[kc.fuses(disable, graph.ReluGrad)], fused)
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ { // the recording run, then the arena's
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		return out
	}
	fused, plain := run(false), run(true)
	for name, src := range map[string]func(i int) float32{
		"dx":  func(i int) float32 { return dy.Float32s()[i] },
		"dxb": func(i int) float32 { return db.Float32s()[i%5] },
	} {
		assert.Equal(t, plain[name].Float32s(), fused[name].Float32s(), name)
		for i, xv := range x.Float32s() {
			want := float32(0)
			if xv > 0 {
				want = src(i)
			}
			assert.Equal(t, want, fused[name].Float32s()[i], "%s[%d] (x = %v)", name, i, xv)
		}
	}
}

// fusedErfGrad: the chain of Erf's gradient rule,
// Mul(dY, Mul(C, Exp(Neg(Mul(X, X))))), runs as one ErfGrad node (operands
// of the Muls in either order; dY of X's shape, or broadcasting through the
// unfused kernels), gives the unfused graph's results bit for bit, and
// agrees with dY·2/√π·exp(-X²) in float64; a chain whose Exp is also a graph
// output stays unfused.
func (kc checker) fusedErfGrad(t *testing.T) {
	g := graph.NewGraph("erfgrad")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(3, 7, 11)}, {Name: "dy", Type: F32Type(3, 7, 11)}, {Name: "db", Type: F32Type(11)}}
	g.Initializers = map[string]*graph.Tensor{"c0": graph.FromFloat64([]float64{1.1283791670955126})}
	chain := func(p, dy string, swap bool) []*graph.Node {
		mul := func(name, a, b string) *graph.Node {
			if swap {
				a, b = b, a
			}
			return &graph.Node{Name: p + name, OpType: "Mul", Inputs: []string{a, b}, Outputs: []string{p + name}}
		}
		return []*graph.Node{
			{Name: p + "c", OpType: "CastLike", Inputs: []string{"c0", "x"}, Outputs: []string{p + "c"}},
			{Name: p + "sq", OpType: "Mul", Inputs: []string{"x", "x"}, Outputs: []string{p + "sq"}},
			{Name: p + "neg", OpType: "Neg", Inputs: []string{p + "sq"}, Outputs: []string{p + "neg"}},
			{Name: p + "e", OpType: "Exp", Inputs: []string{p + "neg"}, Outputs: []string{p + "e"}},
			mul("t", p+"c", p+"e"),
			mul("out", dy, p+"t"),
		}
	}
	g.Nodes = append(append(chain("a/", "dy", false), chain("b/", "db", true)...), chain("k/", "dy", false)...)
	g.Outputs = []*graph.ValueInfo{{Name: "a/out"}, {Name: "b/out"}, {Name: "k/out"}, {Name: "k/e"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	rng := rand.New(rand.NewPCG(11, 12))
	inputs := NormalInputs(g, rng, 2)
	inputs["x"].Float32s()[0], inputs["x"].Float32s()[1] = float32(math.NaN()), 12
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		fused := kc.countCompiled(t, exe, graph.ErfGrad)
		assert.Equal(t, map[bool]int{true: 2, false: 0}[kc.fuses(disable, graph.ErfGrad)], fused, "chains a and b fuse, k (whose Exp is an output) does not")
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ {
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		return out
	}
	fused, plain := run(false), run(true)
	x := inputs["x"].Float32s()
	for name, dy := range map[string]func(i int) float32{
		"a/out": func(i int) float32 { return inputs["dy"].Float32s()[i] },
		"b/out": func(i int) float32 { return inputs["db"].Float32s()[i%11] },
		"k/out": func(i int) float32 { return inputs["dy"].Float32s()[i] },
	} {
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
		for i, v := range fused[name].Float32s() {
			want := float64(dy(i)) * 2 / math.Sqrt(math.Pi) * math.Exp(-float64(x[i])*float64(x[i]))
			if math.IsNaN(float64(x[i])) {
				assert.True(t, math.IsNaN(float64(v)), "%s[%d]", name, i)
				continue
			}
			assert.InDelta(t, want, float64(v), 1e-6*(1+math.Abs(want)), "%s[%d]", name, i)
		}
	}
}

// fusedMatMulBias: in the plan specialised to the input shapes,
// Add(MatMul(X, W), b) with b a bias row vector runs as one MatMulAdd (the
// bias in the GEMM's epilogue), also when the Add's gradient reads the
// product's shape through SumToShape; the results equal the unfused
// graph's bit for bit and a float64 reference. A bias that would broadcast
// the product to a larger shape is left to Add.
func (kc checker) fusedMatMulBias(t *testing.T) {
	g := graph.NewGraph("matmulbias")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: F32Type(2, 5, 7)}, {Name: "w", Type: F32Type(7, 3)}, {Name: "b", Type: F32Type(3)},
		{Name: "b2", Type: F32Type(1, 1, 3)}, {Name: "bx", Type: F32Type(4, 1, 1, 3)}, {Name: "dy", Type: F32Type(2, 5, 3)},
	}
	g.Nodes = []*graph.Node{
		{Name: "m1", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p1"}},
		{Name: "a1", OpType: "Add", Inputs: []string{"p1", "b"}, Outputs: []string{"y1"}},
		{Name: "m2", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p2"}},
		{Name: "a2", OpType: "Add", Inputs: []string{"b2", "p2"}, Outputs: []string{"y2"}},
		{Name: "g2", OpType: "SumToShape", Domain: graph.InternalDomain, Inputs: []string{"dy", "p2"}, Outputs: []string{"d2"}},
		{Name: "m3", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p3"}},
		{Name: "a3", OpType: "Add", Inputs: []string{"p3", "bx"}, Outputs: []string{"y3"}}, // broadcasts to 4×2×5×3
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y1"}, {Name: "y2"}, {Name: "d2"}, {Name: "y3"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	rng := rand.New(rand.NewPCG(13, 14))
	inputs := NormalInputs(g, rng, 1)
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ {
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		fused := map[string]bool{}
		for _, st := range kc.lastRunNodes(t, exe) {
			if st.OpType == graph.MatMulAdd {
				fused[st.Outputs[0]] = true
			}
		}
		if !kc.fuses(disable, graph.MatMulAdd) {
			assert.Empty(t, fused)
		} else {
			assert.Equal(t, map[string]bool{"y1": true, "y2": true}, fused)
		}
		return out
	}
	fused, plain := run(false), run(true)
	for _, name := range []string{"y1", "y2", "d2", "y3"} {
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}
	x, w := inputs["x"].Float32s(), inputs["w"].Float32s()
	for r := 0; r < 10; r++ {
		for j := 0; j < 3; j++ {
			var s float64
			for k := 0; k < 7; k++ {
				s += float64(x[r*7+k]) * float64(w[k*3+j])
			}
			assert.InDelta(t, s+float64(inputs["b"].Float32s()[j]), float64(fused["y1"].Float32s()[r*3+j]), 1e-5)
			assert.InDelta(t, s+float64(inputs["b2"].Float32s()[j]), float64(fused["y2"].Float32s()[r*3+j]), 1e-5)
		}
	}
	assert.Equal(t, inputs["dy"].Float32s(), fused["d2"].Float32s(), "SumToShape to the same shape is the identity")
	assert.Equal(t, []int{4, 2, 5, 3}, fused["y3"].Shape)
}

// fusedGemmRelu: Relu(Gemm(X, W, b)) whose pre-activation is otherwise
// read only by Relu's gradient (Where(Greater(h, 0), dY, 0), fused to
// ReluGrad first) runs as one GemmRelu, the gradient reading the Relu's
// output; results equal Gemm then Relu bit for bit, and a float64
// reference. A Gemm whose output is also a graph output is left alone.
func (kc checker) fusedGemmRelu(t *testing.T) {
	g := graph.NewGraph("gemmrelu")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(6, 9)}, {Name: "w", Type: F32Type(5, 9)}, {Name: "b", Type: F32Type(5)}, {Name: "dy", Type: F32Type(6, 5)}}
	g.Initializers = map[string]*graph.Tensor{"z": graph.FromFloat32([]float32{0})}
	transB := map[string]*graph.Attr{"transB": {Name: "transB", Type: graph.AttrInt, I: 1}}
	g.Nodes = []*graph.Node{
		{Name: "gemm", OpType: "Gemm", Inputs: []string{"x", "w", "b"}, Outputs: []string{"h"}, Attrs: transB},
		{Name: "relu", OpType: "Relu", Inputs: []string{"h"}, Outputs: []string{"y"}},
		{Name: "gt", OpType: "Greater", Inputs: []string{"h", "z"}, Outputs: []string{"mask"}},
		{Name: "where", OpType: "Where", Inputs: []string{"mask", "dy", "z"}, Outputs: []string{"dx"}},
		{Name: "gemm2", OpType: "Gemm", Inputs: []string{"x", "w", "b"}, Outputs: []string{"h2"}, Attrs: transB},
		{Name: "relu2", OpType: "Relu", Inputs: []string{"h2"}, Outputs: []string{"y2"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "dx"}, {Name: "y2"}, {Name: "h2"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	rng := rand.New(rand.NewPCG(15, 16))
	inputs := NormalInputs(g, rng, 1)
	run := func(disable bool) map[string]*graph.Tensor {
		exe, err := kc.open(t).Compile(m, backend.CompileOptions{DisableFused: disable})
		require.NoError(t, err)
		ops := map[string]int{}
		for _, st := range kc.compiledNodes(t, exe) {
			ops[st.OpType]++
		}
		if !kc.fuses(disable, graph.GemmRelu, graph.ReluGrad) {
			assert.Zero(t, ops[graph.GemmRelu])
		} else {
			assert.Equal(t, map[string]int{graph.GemmRelu: 1, graph.ReluGrad: 1, "Gemm": 1, "Relu": 1}, ops)
		}
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ {
			out, err = exe.Run(context.Background(), inputs)
			require.NoError(t, err)
		}
		return out
	}
	// DisableFused also lowers Gemm to MatMul+Add, which rounds
	// differently; the unfused reference is the second chain, whose Gemm
	// output is a graph output and so is not fused.
	run(true)
	fused := run(false)
	h2 := fused["h2"].Float32s()
	relu := make([]float32, len(h2))
	for i, v := range h2 {
		relu[i] = v
		if v < 0 {
			relu[i] = 0
		}
	}
	assert.Equal(t, relu, fused["y"].Float32s(), "GemmRelu against Gemm then Relu")
	assert.Equal(t, relu, fused["y2"].Float32s())
	x, w, b, dy := inputs["x"].Float32s(), inputs["w"].Float32s(), inputs["b"].Float32s(), inputs["dy"].Float32s()
	for i := 0; i < 6; i++ {
		for j := 0; j < 5; j++ {
			s := float64(b[j])
			for k := 0; k < 9; k++ {
				s += float64(x[i*9+k]) * float64(w[j*9+k])
			}
			want, grad := max(s, 0), 0.0
			if s > 0 {
				grad = float64(dy[i*5+j])
			}
			assert.InDelta(t, want, float64(fused["y"].Float32s()[i*5+j]), 1e-5)
			assert.Equal(t, grad, float64(fused["dx"].Float32s()[i*5+j]))
		}
	}
}
