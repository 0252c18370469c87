package backendtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Finite-difference checks of the gradient rules of the matrix products
// (graph/grad_linalg.go) and the data-movement ops (graph/grad_shape.go),
// plus a float32 run of every case compared with float64, which exercises
// the float32 paths of the internal backward kernels.

// gsInts is a 1-D int64 tensor (shapes, axes, starts, pads, indices).
func gsInts(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }

// gsIndices is an int64 tensor of the given shape.
func gsIndices(shape []int, v ...int64) *graph.Tensor { return graph.FromInt64(v, shape...) }

func (kc checker) gradLinalg(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	f := func(name string, v float32) *graph.Attr { return graph.FloatAttr(name, v) }
	i := graph.IntAttr
	eq := func(e string) []*graph.Attr { return []*graph.Attr{graph.StringAttr("equation", e)} }
	cases := []gradCase{
		{name: "MatMul 2D", op: "MatMul", inputs: []*graph.Tensor{x(3, 4), x(4, 5)}, wrt: []int{0, 1}},
		{name: "MatMul batched", op: "MatMul", inputs: []*graph.Tensor{x(2, 3, 4), x(2, 4, 5)}, wrt: []int{0, 1}},
		{name: "MatMul shared weight", op: "MatMul", inputs: []*graph.Tensor{x(2, 3, 4), x(4, 5)}, wrt: []int{0, 1}},
		{name: "MatMul shared left", op: "MatMul", inputs: []*graph.Tensor{x(3, 4), x(2, 4, 5)}, wrt: []int{0, 1}},
		{name: "MatMul broadcast batch", op: "MatMul", inputs: []*graph.Tensor{x(2, 1, 3, 4), x(3, 4, 2)}, wrt: []int{0, 1}},
		{name: "MatMul broadcast size-1 batch", op: "MatMul", inputs: []*graph.Tensor{x(1, 3, 4), x(2, 4, 2)}, wrt: []int{0, 1}},
		{name: "MatMul 1D left", op: "MatMul", inputs: []*graph.Tensor{x(4), x(2, 4, 5)}, wrt: []int{0, 1}},
		{name: "MatMul 1D right", op: "MatMul", inputs: []*graph.Tensor{x(2, 3, 4), x(4)}, wrt: []int{0, 1}},
		{name: "MatMul 1D both", op: "MatMul", inputs: []*graph.Tensor{x(4), x(4)}, wrt: []int{0, 1}},
		{name: "MatMul 1D by matrix", op: "MatMul", inputs: []*graph.Tensor{x(4), x(4, 3)}, wrt: []int{0, 1}},
		{name: "MatMul weight only", op: "MatMul", inputs: []*graph.Tensor{x(2, 3), x(3, 2)}, wrt: []int{1}},

		{name: "Gemm", op: "Gemm", inputs: []*graph.Tensor{x(3, 4), x(4, 5), x(3, 5)}, wrt: []int{0, 1, 2}},
		{name: "Gemm transA", op: "Gemm", inputs: []*graph.Tensor{x(4, 3), x(4, 5), x(5)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("transA", 1), f("alpha", 0.5), f("beta", 2)}},
		{name: "Gemm transB", op: "Gemm", inputs: []*graph.Tensor{x(3, 4), x(5, 4), x(3, 1)}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("transB", 1), f("alpha", -1.5)}},
		{name: "Gemm transA transB scalar C", op: "Gemm", inputs: []*graph.Tensor{x(4, 3), x(5, 4), x()}, wrt: []int{0, 1, 2},
			attrs: []*graph.Attr{i("transA", 1), i("transB", 1), f("beta", 0.25)}},
		{name: "Gemm no C", op: "Gemm", inputs: []*graph.Tensor{x(2, 3), x(3, 2)}, wrt: []int{0, 1}, opset: 13},
		{name: "Gemm opset 6 broadcast C", op: "Gemm", inputs: []*graph.Tensor{x(2, 3), x(3, 4), x(4)}, wrt: []int{0, 1, 2}, opset: 6,
			attrs: []*graph.Attr{i("broadcast", 1)}},

		{name: "Einsum matmul", op: "Einsum", inputs: []*graph.Tensor{x(3, 4), x(4, 5)}, wrt: []int{0, 1}, attrs: eq("ij,jk->ik")},
		{name: "Einsum implicit", op: "Einsum", inputs: []*graph.Tensor{x(3, 4), x(4, 5)}, wrt: []int{0, 1}, attrs: eq("ij, jk")},
		{name: "Einsum attention", op: "Einsum", inputs: []*graph.Tensor{x(2, 2, 3, 4), x(2, 2, 5, 4)}, wrt: []int{0, 1}, attrs: eq("bhqd,bhkd->bhqk")},
		{name: "Einsum sum out", op: "Einsum", inputs: []*graph.Tensor{x(3, 4)}, wrt: []int{0}, attrs: eq("ij->i")},
		{name: "Einsum full sum", op: "Einsum", inputs: []*graph.Tensor{x(3, 4), x(4)}, wrt: []int{0, 1}, attrs: eq("ij,j->")},
		{name: "Einsum outer", op: "Einsum", inputs: []*graph.Tensor{x(3), x(4)}, wrt: []int{0, 1}, attrs: eq("i,j->ij")},
		{name: "Einsum transpose", op: "Einsum", inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, attrs: eq("abc->cab")},
		{name: "Einsum ellipsis broadcast", op: "Einsum", inputs: []*graph.Tensor{x(2, 1, 3, 4), x(5, 4, 2)}, wrt: []int{0, 1}, attrs: eq("...ij,...jk->...ik")},
		{name: "Einsum diagonal of other operand", op: "Einsum", inputs: []*graph.Tensor{x(3, 3), x(3)}, wrt: []int{1}, attrs: eq("ii,i->i")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.checkShapeGradsFloat32(t, c)
		})
	}
}

func (kc checker) gradShape(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	i := graph.IntAttr
	ints := graph.IntsAttr
	s := graph.StringAttr
	const big = math.MaxInt64
	cases := []gradCase{
		{name: "Reshape", op: "Reshape", inputs: []*graph.Tensor{x(2, 3, 4), gsInts(4, -1)}, wrt: []int{0}, opset: 13},
		{name: "Reshape allowzero opset", op: "Reshape", inputs: []*graph.Tensor{x(2, 3, 4), gsInts(0, 12)}, wrt: []int{0}, opset: 14},
		{name: "Flatten", op: "Flatten", inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", 2)}},
		{name: "Flatten negative axis", op: "Flatten", inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", -1)}},
		{name: "Squeeze attr axes", op: "Squeeze", inputs: []*graph.Tensor{x(2, 1, 3, 1)}, wrt: []int{0}, opset: 11, attrs: []*graph.Attr{ints("axes", 1)}},
		{name: "Squeeze input axes", op: "Squeeze", inputs: []*graph.Tensor{x(2, 1, 3, 1), gsInts(-1)}, wrt: []int{0}, opset: 13},
		{name: "Squeeze all", op: "Squeeze", inputs: []*graph.Tensor{x(1, 3, 1)}, wrt: []int{0}, opset: 13},
		{name: "Unsqueeze attr axes", op: "Unsqueeze", inputs: []*graph.Tensor{x(2, 3)}, wrt: []int{0}, opset: 11, attrs: []*graph.Attr{ints("axes", 0, 3)}},
		{name: "Unsqueeze input axes", op: "Unsqueeze", inputs: []*graph.Tensor{x(2, 3), gsInts(-1, 1)}, wrt: []int{0}, opset: 13},
		{name: "Transpose default", op: "Transpose", inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}},
		{name: "Transpose perm", op: "Transpose", inputs: []*graph.Tensor{x(2, 3, 4, 5)}, wrt: []int{0}, attrs: []*graph.Attr{ints("perm", 1, 3, 0, 2)}},

		{name: "Concat", op: "Concat", inputs: []*graph.Tensor{x(2, 1, 3), x(2, 3, 3), x(2, 2, 3)}, wrt: []int{0, 2}, attrs: []*graph.Attr{i("axis", 1)}},
		{name: "Concat negative axis", op: "Concat", inputs: []*graph.Tensor{x(2, 3), x(2, 1)}, wrt: []int{0, 1}, attrs: []*graph.Attr{i("axis", -1)}},
		{name: "Concat one input", op: "Concat", inputs: []*graph.Tensor{x(3)}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", 0)}},
		{name: "Split input sizes", op: "Split", inputs: []*graph.Tensor{x(2, 5), gsInts(2, 3)}, wrt: []int{0}, outputs: 2, lossOutputs: []int{0, 1},
			attrs: []*graph.Attr{i("axis", 1)}, opset: 13},
		{name: "Split attr sizes one used", op: "Split", inputs: []*graph.Tensor{x(6, 2)}, wrt: []int{0}, outputs: 3, lossOutputs: []int{1},
			attrs: []*graph.Attr{ints("split", 1, 2, 3)}, opset: 11},
		{name: "Split num_outputs", op: "Split", inputs: []*graph.Tensor{x(2, 7)}, wrt: []int{0}, outputs: 3, lossOutputs: []int{0, 2},
			attrs: []*graph.Attr{i("axis", -1), i("num_outputs", 3)}, opset: 18},
		{name: "Split equal", op: "Split", inputs: []*graph.Tensor{x(4, 3)}, wrt: []int{0}, outputs: 2, lossOutputs: []int{0}, opset: 13},

		{name: "Slice inputs", op: "Slice", inputs: []*graph.Tensor{x(4, 5, 3), gsInts(1, -4), gsInts(3, big)}, wrt: []int{0}},
		{name: "Slice axes steps", op: "Slice", inputs: []*graph.Tensor{x(4, 5, 3), gsInts(-1, 0), gsInts(-big, 3), gsInts(0, -1), gsInts(-2, 2)}, wrt: []int{0}},
		{name: "Slice step clamps", op: "Slice", inputs: []*graph.Tensor{x(6, 2), gsInts(10), gsInts(-10), gsInts(0), gsInts(-3)}, wrt: []int{0}},
		{name: "Slice attrs", op: "Slice", inputs: []*graph.Tensor{x(4, 5)}, wrt: []int{0}, opset: 9,
			attrs: []*graph.Attr{ints("starts", 1, 0), ints("ends", big, -2), ints("axes", 1, 0)}},

		{name: "Gather axis 0 repeats", op: "Gather", inputs: []*graph.Tensor{x(4, 3), gsIndices([]int{2, 3}, 0, 2, 3, 2, -1, 0)}, wrt: []int{0}},
		{name: "Gather axis 1", op: "Gather", inputs: []*graph.Tensor{x(2, 4, 3), gsInts(3, 1, 3)}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", 1)}},
		{name: "Gather scalar index", op: "Gather", inputs: []*graph.Tensor{x(2, 4), graph.FromInt64([]int64{-2})}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", -1)}},
		{name: "Gather int32 indices", op: "Gather", inputs: []*graph.Tensor{x(5), {DType: graph.Int32, Shape: []int{3}, Data: []int32{4, 4, 0}}}, wrt: []int{0}},
		{name: "GatherElements", op: "GatherElements", inputs: []*graph.Tensor{x(3, 4), gsIndices([]int{3, 2}, 0, 3, 1, 1, -1, 0)}, wrt: []int{0}, attrs: []*graph.Attr{i("axis", 1)}},
		{name: "GatherElements smaller indices", op: "GatherElements", inputs: []*graph.Tensor{x(3, 4, 2), gsIndices([]int{2, 2, 1}, 2, 0, 2, 2)}, wrt: []int{0}},

		{name: "Expand", op: "Expand", inputs: []*graph.Tensor{x(3, 1), gsInts(2, 3, 4)}, wrt: []int{0}},
		{name: "Expand keeps larger dims", op: "Expand", inputs: []*graph.Tensor{x(3, 1), gsInts(1, 1)}, wrt: []int{0}},
		{name: "Tile", op: "Tile", inputs: []*graph.Tensor{x(2, 3), gsInts(2, 3)}, wrt: []int{0}},
		{name: "Tile ones", op: "Tile", inputs: []*graph.Tensor{x(2, 1, 3), gsInts(1, 4, 1)}, wrt: []int{0}},

		{name: "Pad constant", op: "Pad", inputs: []*graph.Tensor{x(2, 3), gsInts(1, 0, 2, 1), x()}, wrt: []int{0, 2}, opset: 13},
		{name: "Pad crop", op: "Pad", inputs: []*graph.Tensor{x(3, 4), gsInts(-1, 2, 0, -2)}, wrt: []int{0}, opset: 13},
		{name: "Pad reflect", op: "Pad", inputs: []*graph.Tensor{x(3, 4), gsInts(2, 3, 1, 3)}, wrt: []int{0}, opset: 13, attrs: []*graph.Attr{s("mode", "reflect")}},
		{name: "Pad edge", op: "Pad", inputs: []*graph.Tensor{x(2, 3), gsInts(0, 2, 1, 3)}, wrt: []int{0}, opset: 13, attrs: []*graph.Attr{s("mode", "edge")}},
		{name: "Pad wrap", op: "Pad", inputs: []*graph.Tensor{x(2, 3), gsInts(1, 4, 2, 0)}, wrt: []int{0}, opset: 19, attrs: []*graph.Attr{s("mode", "wrap")}},
		{name: "Pad axes", op: "Pad", inputs: []*graph.Tensor{x(2, 3, 2), gsInts(1, 2), x(1), gsInts(-2)}, wrt: []int{0, 2}, opset: 18},
		{name: "Pad attrs", op: "Pad", inputs: []*graph.Tensor{x(2, 3)}, wrt: []int{0}, opset: 2,
			attrs: []*graph.Attr{ints("pads", 0, 1, 1, 2), graph.FloatAttr("value", 1.5)}},

		{name: "Trilu lower", op: "Trilu", inputs: []*graph.Tensor{x(2, 3, 4), gsInts(1)}, wrt: []int{0}, attrs: []*graph.Attr{i("upper", 0)}},
		{name: "Trilu upper default k", op: "Trilu", inputs: []*graph.Tensor{x(4, 3)}, wrt: []int{0}},
		{name: "ReverseSequence", op: "ReverseSequence", inputs: []*graph.Tensor{x(4, 3, 2), gsInts(4, 1, 3)}, wrt: []int{0},
			attrs: []*graph.Attr{i("batch_axis", 1), i("time_axis", 0)}},
		{name: "DepthToSpace", op: "DepthToSpace", inputs: []*graph.Tensor{x(1, 8, 2, 3)}, wrt: []int{0}, attrs: []*graph.Attr{i("blocksize", 2)}},
		{name: "SpaceToDepth", op: "SpaceToDepth", inputs: []*graph.Tensor{x(2, 2, 4, 2)}, wrt: []int{0}, attrs: []*graph.Attr{i("blocksize", 2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc.runGradCheck(t, c)
			kc.checkShapeGradsFloat32(t, c)
		})
	}
}

// gradMatMulLarge compares float32 with float64 gradients of MatMuls
// large enough for the blocked and parallel Sgemm paths, in the batched
// (accumulating) and the single tall product forms.
func (kc checker) gradMatMulLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	cases := []gradCase{
		{name: "shared weight", op: "MatMul", inputs: []*graph.Tensor{x(3, 70, 90), x(90, 130)}, wrt: []int{0, 1}},
		{name: "broadcast batch", op: "MatMul", inputs: []*graph.Tensor{x(2, 1, 40, 70), x(3, 70, 60)}, wrt: []int{0, 1}},
		{name: "1D left", op: "MatMul", inputs: []*graph.Tensor{x(300), x(4, 300, 50)}, wrt: []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.checkShapeGradsFloat32(t, c) })
	}
}

// gradFolded runs gradient graphs the way training compiles them (with
// constant folding and shape specialisation) and compares them with the
// unfolded run.
func (kc checker) gradFolded(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -1, 1, shape...) }
	cases := []gradCase{
		{name: "MatMul", op: "MatMul", inputs: []*graph.Tensor{x(2, 3, 4), x(4)}, wrt: []int{0, 1}},
		{name: "Slice", op: "Slice", inputs: []*graph.Tensor{x(4, 5), gsInts(1), gsInts(-1), gsInts(1)}, wrt: []int{0}},
		{name: "Concat", op: "Concat", inputs: []*graph.Tensor{x(2, 3), x(1, 3)}, wrt: []int{0, 1}, attrs: []*graph.Attr{graph.IntAttr("axis", 0)}},
		{name: "Gather", op: "Gather", inputs: []*graph.Tensor{x(4, 2), gsInts(3, 3, 0)}, wrt: []int{0}},
		{name: "Reshape", op: "Reshape", inputs: []*graph.Tensor{x(2, 6), gsInts(3, 4)}, wrt: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := kc.shapeCaseGrads(t, c, graph.Float64, backend.CompileOptions{NoFold: true})
			got := kc.shapeCaseGrads(t, c, graph.Float64, backend.CompileOptions{})
			require.Len(t, got, len(want))
			for i := range want {
				assert.Equal(t, want[i].Shape, got[i].Shape)
				assert.InDeltaSlice(t, want[i].Float64s(), got[i].Float64s(), 1e-12)
			}
		})
	}
}

// gradEinsumDiagonal checks that an Einsum whose differentiated operand
// repeats a label is refused with an error that says why.
func (kc checker) gradEinsumDiagonal(t *testing.T) {
	g := graph.NewGraph("diag")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g.Nodes = []*graph.Node{
		{Name: "e", OpType: "Einsum", Inputs: []string{"x"}, Outputs: []string{"d"}, Attrs: map[string]*graph.Attr{"equation": graph.StringAttr("equation", "ii->i")}},
		{Name: "s", OpType: "ReduceSum", Inputs: []string{"d"}, Outputs: []string{"y"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	_, err := graph.Gradients(g, "y", []string{"x"}, "", 17)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "diagonal")
}

// gradGatherOutOfRange checks that an index out of range is an error of
// the backward kernel, not a crash.
func (kc checker) gradGatherOutOfRange(t *testing.T) {
	g := graph.NewGraph("gather")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g.Initializers["idx"] = gsInts(0, 1)
	g.Nodes = []*graph.Node{
		{Name: "g", OpType: "Gather", Inputs: []string{"x", "idx"}, Outputs: []string{"v"}},
		{Name: "s", OpType: "ReduceSum", Inputs: []string{"v"}, Outputs: []string{"y"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	grads, err := graph.Gradients(g, "y", []string{"x"}, "", 17)
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: grads[0]}}
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"x": graph.FromFloat64([]float64{1, 2, 3}, 3)})
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 1, 0}, out[grads[0]].Float64s())
	// Now the same graph with an index past the end: Gather itself fails
	// first, so call the backward op on its own.
	g2 := graph.NewGraph("gathergrad")
	g2.Inputs = []*graph.ValueInfo{{Name: "dy", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g2.Initializers["x"] = graph.FromFloat64([]float64{1, 2, 3}, 3)
	g2.Initializers["idx"] = gsInts(0, 3)
	g2.Nodes = []*graph.Node{{Name: "gg", OpType: "GatherGrad", Domain: graph.InternalDomain, Inputs: []string{"dy", "x", "idx"}, Outputs: []string{"dx"}}}
	g2.Outputs = []*graph.ValueInfo{{Name: "dx"}}
	exe, err = b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g2}, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	_, err = exe.Run(context.Background(), map[string]*graph.Tensor{"dy": graph.FromFloat64([]float64{1, 1}, 2)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "out of range")
}

// checkShapeGradsFloat32 runs the case's gradient graph in float32 and in
// float64 and compares the two.
func (kc checker) checkShapeGradsFloat32(t *testing.T, c gradCase) {
	t.Helper()
	g64 := kc.shapeCaseGrads(t, c, graph.Float64, backend.CompileOptions{NoFold: true})
	g32 := kc.shapeCaseGrads(t, c, graph.Float32, backend.CompileOptions{NoFold: true})
	for i := range g64 {
		require.Equal(t, graph.Float32, g32[i].DType)
		require.Equal(t, g64[i].Shape, g32[i].Shape)
		for j := 0; j < g64[i].Size(); j++ {
			want, got := g64[i].Float(j), g32[i].Float(j)
			if math.Abs(got-want) > 1e-4+1e-4*math.Abs(want) {
				t.Errorf("%s: float32 gradient %d[%d] = %.7g, float64 gives %.9g", c.name, i, j, got, want)
			}
		}
	}
}

// shapeCaseGrads builds loss = sum_k ReduceSum(out_k * R_k) for the case with its
// float inputs converted to dtype and returns the gradients of the wrt
// inputs. The weights R_k are the same for both dtypes.
func (kc checker) shapeCaseGrads(t *testing.T, c gradCase, dtype graph.DType, opts backend.CompileOptions) []*graph.Tensor {
	t.Helper()
	conv := func(x *graph.Tensor) *graph.Tensor {
		if x.DType != graph.Float64 || dtype == graph.Float64 {
			return x
		}
		y := graph.Zeros(dtype, x.Shape...)
		for i, v := range x.Float64s() {
			y.SetFloat(i, v)
		}
		return y
	}
	opset := c.opset
	if opset == 0 {
		opset = 17
	}
	g := graph.NewGraph(c.name)
	node := &graph.Node{Name: "op", OpType: c.op}
	for _, a := range c.attrs {
		node.SetAttr(a)
	}
	feeds := map[string]*graph.Tensor{}
	var xs []string
	for i, in := range c.inputs {
		if in == nil {
			node.Inputs = append(node.Inputs, "")
			continue
		}
		name := fmt.Sprintf("in%d", i)
		node.Inputs = append(node.Inputs, name)
		g.Initializers[name] = conv(in)
	}
	for _, w := range c.wrt {
		name := fmt.Sprintf("in%d", w)
		delete(g.Initializers, name)
		feeds[name] = conv(c.inputs[w])
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: dtype}})
		xs = append(xs, name)
	}
	nout := max(c.outputs, 1)
	for k := 0; k < nout; k++ {
		node.Outputs = append(node.Outputs, fmt.Sprintf("out%d", k))
	}
	g.Nodes = append(g.Nodes, node)
	lossOuts := c.lossOutputs
	if lossOuts == nil {
		lossOuts = []int{0}
	}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}
	for _, k := range lossOuts {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: fmt.Sprintf("out%d", k)})
	}
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(m, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	outs, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(13, 17))
	loss := ""
	for _, k := range lossOuts {
		o := fmt.Sprintf("out%d", k)
		rn, p, s := "R"+o, "prod"+o, "sum"+o
		g.Initializers[rn] = conv(Rand64(r, -1, 1, outs[o].Shape...))
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: p, OpType: "Mul", Inputs: []string{o, rn}, Outputs: []string{p}},
			&graph.Node{Name: s, OpType: "ReduceSum", Inputs: []string{p}, Outputs: []string{s}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
		if loss == "" {
			loss = s
			continue
		}
		sum := "loss_" + o
		g.Nodes = append(g.Nodes, &graph.Node{Name: sum, OpType: "Add", Inputs: []string{loss, s}, Outputs: []string{sum}})
		loss = sum
	}
	grads, err := graph.Gradients(g, loss, xs, "", opset)
	require.NoError(t, err)
	g.Outputs = nil
	for _, gn := range grads {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: gn})
	}
	exe, err = b.Compile(m, opts)
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	out := make([]*graph.Tensor, len(grads))
	for i, gn := range grads {
		out[i] = res[gn]
	}
	return out
}
