package graph

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loweringCase is one node to lower, with the types of its inputs.
type loweringCase struct {
	name   string
	node   *Node
	opset  int64
	inputs map[string]*Type
	consts map[string]*Tensor
}

func f32(dims ...int64) *Type {
	t := &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{}}
	for _, d := range dims {
		t.Shape = append(t.Shape, knownDim(d))
	}
	return t
}

func withDType(t *Type, d DType) *Type { c := cloneType(t); c.DType = d; return c }

func node(op string, in, out []string, attrs ...*Attr) *Node {
	n := &Node{Name: op + "_node", OpType: op, Inputs: in, Outputs: out}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

func loweringCases() []loweringCase {
	x := map[string]*Type{"x": f32(2, 3, 4, 5)}
	unary := func(op string, attrs ...*Attr) loweringCase {
		return loweringCase{name: op, node: node(op, []string{"x"}, []string{"y"}, attrs...), opset: 17, inputs: x}
	}
	cases := []loweringCase{
		{name: "Gemm", node: node("Gemm", []string{"a", "b", "c"}, []string{"y"},
			IntAttr("transA", 1), IntAttr("transB", 1), FloatAttr("alpha", 0.5), FloatAttr("beta", 2)),
			opset: 13, inputs: map[string]*Type{"a": f32(4, 3), "b": f32(5, 4), "c": f32(5)}},
		{name: "Gemm/no-bias", node: node("Gemm", []string{"a", "b"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": f32(3, 4), "b": f32(4, 5)}},
		unary("Softplus"), unary("Softsign"), unary("Elu", FloatAttr("alpha", 2)), unary("Selu"),
		unary("Celu", FloatAttr("alpha", 0.5)), unary("LeakyRelu"), unary("HardSigmoid"),
		unary("HardSwish"), unary("ThresholdedRelu", FloatAttr("alpha", 0.3)), unary("Shrink"), unary("Mish"),
		{name: "Gelu", node: node("Gelu", []string{"x"}, []string{"y"}), opset: 20, inputs: x},
		{name: "Gelu/tanh", node: node("Gelu", []string{"x"}, []string{"y"}, StringAttr("approximate", "tanh")), opset: 20, inputs: x},
		{name: "PRelu", node: node("PRelu", []string{"x", "s"}, []string{"y"}), opset: 16,
			inputs: map[string]*Type{"x": f32(2, 3), "s": f32(3)}},
		{name: "Clip/6", node: node("Clip", []string{"x"}, []string{"y"}, FloatAttr("min", -1), FloatAttr("max", 1)), opset: 6, inputs: x},
		{name: "Clip/13", node: node("Clip", []string{"x", "", "hi"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": f32(3), "hi": f32()}},
		{name: "Sum", node: node("Sum", []string{"a", "b", "c"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3), "c": f32(1)}},
		{name: "Sum/one", node: node("Sum", []string{"a"}, []string{"y"}), opset: 13, inputs: map[string]*Type{"a": f32(3)}},
		{name: "Mean", node: node("Mean", []string{"a", "b"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3)}},
		unary("Sign"), unary("IsNaN"), unary("IsInf"), unary("Tan"), unary("Sinh"), unary("Cosh"),
		unary("Asinh"), unary("Acosh"), unary("Atanh"),
		{name: "Xor", node: node("Xor", []string{"a", "b"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": withDType(f32(3), Bool), "b": withDType(f32(3), Bool)}},
		{name: "LessOrEqual", node: node("LessOrEqual", []string{"a", "b"}, []string{"y"}), opset: 16,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3)}},
		{name: "GreaterOrEqual", node: node("GreaterOrEqual", []string{"a", "b"}, []string{"y"}), opset: 16,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3)}},
		{name: "LpNormalization", node: node("LpNormalization", []string{"x"}, []string{"y"}, IntAttr("axis", 1)), opset: 13, inputs: x},
		{name: "LayerNormalization", node: node("LayerNormalization", []string{"x", "w", "b"}, []string{"y", "mean", "inv"},
			IntAttr("axis", -2)), opset: 17, inputs: map[string]*Type{"x": f32(2, 3, 4), "w": f32(3, 4), "b": f32(3, 4)}},
		{name: "LayerNormalization/positive-axis", node: node("LayerNormalization", []string{"x", "w"}, []string{"y", "mean"},
			IntAttr("axis", 1)), opset: 18, inputs: map[string]*Type{"x": f32(2, 3, 4), "w": f32(3, 4)}},
		{name: "BatchNormalization", node: node("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y"}),
			opset: 15, inputs: map[string]*Type{"x": f32(2, 3, 4, 5), "s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3)}},
		{name: "InstanceNormalization", node: node("InstanceNormalization", []string{"x", "s", "b"}, []string{"y"}),
			opset: 15, inputs: map[string]*Type{"x": f32(2, 3, 4, 5), "s": f32(3), "b": f32(3)}},
		unary("GlobalAveragePool"), unary("GlobalMaxPool"),
		unary("Flatten"), unary("Flatten", IntAttr("axis", 0)), unary("Flatten", IntAttr("axis", 2)),
		unary("Flatten", IntAttr("axis", -1)),
		{name: "Squeeze/13", node: node("Squeeze", []string{"x", "axes"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": f32(1, 3, 1, 5)}, consts: map[string]*Tensor{"axes": FromInt64([]int64{0, -2}, 2)}},
		{name: "Squeeze/11", node: node("Squeeze", []string{"x"}, []string{"y"}, IntsAttr("axes", 2)), opset: 11,
			inputs: map[string]*Type{"x": f32(1, 3, 1, 5)}},
		{name: "Unsqueeze/13", node: node("Unsqueeze", []string{"x", "axes"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": f32(3, 5)}, consts: map[string]*Tensor{"axes": FromInt64([]int64{0, 3}, 2)}},
		{name: "Unsqueeze/11", node: node("Unsqueeze", []string{"x"}, []string{"y"}, IntsAttr("axes", 1, 3)), opset: 11,
			inputs: map[string]*Type{"x": f32(3, 5)}},
		{name: "Dropout/12", node: node("Dropout", []string{"x", "ratio"}, []string{"y", "mask"}), opset: 13, inputs: x},
		{name: "Dropout/10", node: node("Dropout", []string{"x"}, []string{"y"}), opset: 10, inputs: x},
		{name: "ConstantOfShape", node: node("ConstantOfShape", []string{"shape"}, []string{"y"},
			TensorAttr("value", FromInt64([]int64{7}, 1))), opset: 13, inputs: map[string]*Type{"shape": withDType(f32(2), Int64)}},
		{name: "CastLike", node: node("CastLike", []string{"x", "like"}, []string{"y"}), opset: 15,
			inputs: map[string]*Type{"x": f32(3), "like": withDType(f32(1), Float64)}},
	}
	b3 := withDType(f32(3), Bool)
	cases = append(cases,
		unary("Neg"), unary("Abs"), unary("Reciprocal"), unary("Relu"), unary("Sigmoid"), unary("Ceil"),
		loweringCase{name: "Abs/uint8", node: node("Abs", []string{"x"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": withDType(f32(3), Uint8)}},
		loweringCase{name: "Not", node: node("Not", []string{"a"}, []string{"y"}), opset: 13, inputs: map[string]*Type{"a": b3}},
		loweringCase{name: "And", node: node("And", []string{"a", "b"}, []string{"y"}), opset: 13, inputs: map[string]*Type{"a": b3, "b": b3}},
		loweringCase{name: "Or", node: node("Or", []string{"a", "b"}, []string{"y"}), opset: 13, inputs: map[string]*Type{"a": b3, "b": b3}},
		loweringCase{name: "Greater", node: node("Greater", []string{"a", "b"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3)}},
		loweringCase{name: "ReduceMean/13", node: node("ReduceMean", []string{"x"}, []string{"y"}, IntsAttr("axes", 1, -1)), opset: 13, inputs: x},
		loweringCase{name: "ReduceMean/18", node: node("ReduceMean", []string{"x", "axes"}, []string{"y"}, IntAttr("keepdims", 0)), opset: 18,
			inputs: map[string]*Type{"x": f32(2, 3), "axes": withDType(f32(1), Int64)}},
		loweringCase{name: "ReduceMin/13", node: node("ReduceMin", []string{"x"}, []string{"y"}, IntsAttr("axes", 1)), opset: 13, inputs: x},
		loweringCase{name: "ReduceMin/bool", node: node("ReduceMin", []string{"x"}, []string{"y"}), opset: 18,
			inputs: map[string]*Type{"x": b3}},
		loweringCase{name: "ReduceMin/uint8", node: node("ReduceMin", []string{"x"}, []string{"y"}), opset: 18,
			inputs: map[string]*Type{"x": withDType(f32(3), Uint8)}},
		unary("ArgMin", IntAttr("axis", 1), IntAttr("select_last_index", 1)),
		unary("Softmax"), unary("LogSoftmax", IntAttr("axis", 1)),
		loweringCase{name: "Softmax/11", node: node("Softmax", []string{"x"}, []string{"y"}, IntAttr("axis", 1)), opset: 11, inputs: x},
		loweringCase{name: "Constant", node: node("Constant", nil, []string{"y"}, IntsAttr("value_ints", 1, 2)), opset: 13},
		unary("Atan"), unary("Asin"), unary("Acos"), unary("Round"), unary("Size"),
		unary("ReduceProd", IntsAttr("axes", 1)), unary("Hardmax", IntAttr("axis", 1)),
		unary("SpaceToDepth", IntAttr("blocksize", 1)),
		loweringCase{name: "DepthToSpace", node: node("DepthToSpace", []string{"x"}, []string{"y"}, IntAttr("blocksize", 2), StringAttr("mode", "CRD")),
			opset: 13, inputs: map[string]*Type{"x": f32(1, 8, 2, 3)}},
		loweringCase{name: "Mod/int", node: node("Mod", []string{"a", "b"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"a": withDType(f32(3), Int32), "b": withDType(f32(3), Int32)}},
		loweringCase{name: "Mod/float", node: node("Mod", []string{"a", "b"}, []string{"y"}, IntAttr("fmod", 1)), opset: 13,
			inputs: map[string]*Type{"a": f32(3), "b": f32(3)}},
		loweringCase{name: "Scatter", node: node("Scatter", []string{"x", "i", "u"}, []string{"y"}, IntAttr("axis", 1)), opset: 10,
			inputs: map[string]*Type{"x": f32(2, 3), "i": withDType(f32(2, 1), Int64), "u": f32(2, 1)}},
		loweringCase{name: "Split", node: node("Split", []string{"x", "s"}, []string{"y0", "y1"}, IntAttr("axis", 1)), opset: 13,
			inputs: x, consts: map[string]*Tensor{"s": FromInt64([]int64{1, 2}, 2)}},
		loweringCase{name: "Split/equal", node: node("Split", []string{"x"}, []string{"y0", "y1"}, IntAttr("axis", 2)), opset: 13, inputs: x},
		loweringCase{name: "Tile", node: node("Tile", []string{"x", "r"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": f32(2, 3)}, consts: map[string]*Tensor{"r": FromInt64([]int64{2, 1}, 2)}},
		loweringCase{name: "Trilu", node: node("Trilu", []string{"x"}, []string{"y"}, IntAttr("upper", 0)), opset: 14, inputs: x},
		loweringCase{name: "Trilu/k", node: node("Trilu", []string{"x", "k"}, []string{"y"}), opset: 14,
			inputs: map[string]*Type{"x": f32(3, 4), "k": withDType(f32(), Int64)}},
		loweringCase{name: "NegativeLogLikelihoodLoss", node: node("NegativeLogLikelihoodLoss", []string{"x", "t", "w"}, []string{"y"}, IntAttr("ignore_index", 1)),
			opset: 13, inputs: map[string]*Type{"x": f32(2, 3, 4), "t": withDType(f32(2, 4), Int64), "w": f32(3)}},
		loweringCase{name: "SoftmaxCrossEntropyLoss", node: node("SoftmaxCrossEntropyLoss", []string{"x", "t"}, []string{"y", "lp"}, StringAttr("reduction", "sum")),
			opset: 13, inputs: map[string]*Type{"x": f32(2, 3), "t": withDType(f32(2), Int64)}},
		loweringCase{name: "GatherND", node: node("GatherND", []string{"x", "i"}, []string{"y"}), opset: 13,
			inputs: map[string]*Type{"x": f32(2, 3, 4), "i": withDType(f32(5, 2), Int64)}},
		loweringCase{name: "ScatterND", node: node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, StringAttr("reduction", "add")), opset: 16,
			inputs: map[string]*Type{"x": f32(2, 3, 4), "i": withDType(f32(5, 1), Int64), "u": f32(5, 3, 4)}},
		unary("MeanVarianceNormalization"), unary("LRN", IntAttr("size", 3)),
		loweringCase{name: "EyeLike", node: node("EyeLike", []string{"x"}, []string{"y"}, IntAttr("k", 1)), opset: 13,
			inputs: map[string]*Type{"x": f32(3, 4)}},
		loweringCase{name: "OneHot", node: node("OneHot", []string{"i", "d", "v"}, []string{"y"}, IntAttr("axis", 0)), opset: 11,
			inputs: map[string]*Type{"i": withDType(f32(2, 3), Int64), "v": f32(2)},
			consts: map[string]*Tensor{"d": FromInt64([]int64{5}, 1)}},
	)
	cases = append(cases,
		loweringCase{name: "RNN/reverse-lens", node: node("RNN", []string{"x", "w", "r", "", "lens"}, []string{"y", "yh"}, IntAttr("hidden_size", 4), StringAttr("direction", "reverse")),
			opset: 14, inputs: map[string]*Type{"x": f32(4, 3, 5), "w": f32(1, 4, 5), "r": f32(1, 4, 4), "lens": withDType(f32(3), Int32)}},
		loweringCase{name: "GRU/bidirectional-layout1", node: node("GRU", []string{"x", "w", "r", "b"}, []string{"", "yh"}, IntAttr("layout", 1), StringAttr("direction", "bidirectional")),
			opset: 14, inputs: map[string]*Type{"x": f32(3, 4, 5), "w": f32(2, 12, 5), "r": f32(2, 12, 4), "b": f32(2, 24)}},
		loweringCase{name: "LSTM/peepholes", node: node("LSTM", []string{"x", "w", "r", "b", "", "h", "c", "p"}, []string{"y", "yh", "yc"}, FloatAttr("clip", 2)),
			opset: 14, inputs: map[string]*Type{"x": f32(4, 3, 5), "w": f32(1, 16, 5), "r": f32(1, 16, 4), "b": f32(1, 32), "h": f32(1, 3, 4), "c": f32(1, 3, 4), "p": f32(1, 12)}},
		loweringCase{name: "Resize/linear", node: node("Resize", []string{"x", "", "s"}, []string{"y"}, StringAttr("mode", "linear")),
			opset: 13, inputs: map[string]*Type{"x": f32(1, 2, 4, 5)}, consts: map[string]*Tensor{"s": FromFloat32([]float32{1, 1, 1.5, 0.5}, 4)}},
		loweringCase{name: "Resize/nearest-sizes", node: node("Resize", []string{"x", "", "", "s"}, []string{"y"}),
			opset: 13, inputs: map[string]*Type{"x": f32(1, 2, 4, 5)}, consts: map[string]*Tensor{"s": FromInt64([]int64{1, 2, 8, 3}, 4)}},
		loweringCase{name: "Einsum", node: node("Einsum", []string{"a", "b"}, []string{"y"}, StringAttr("equation", "...ii,...ik->...k")),
			opset: 12, inputs: map[string]*Type{"a": f32(2, 3, 3), "b": f32(1, 3, 4)}},
		loweringCase{name: "ReverseSequence", node: node("ReverseSequence", []string{"x", "lens"}, []string{"y"}),
			opset: 10, inputs: map[string]*Type{"x": f32(4, 3, 2), "lens": withDType(f32(3), Int64)}},
		loweringCase{name: "MaxUnpool", node: node("MaxUnpool", []string{"x", "i", "s"}, []string{"y"}, IntsAttr("kernel_shape", 2, 2), IntsAttr("strides", 2, 2)),
			opset: 11, inputs: map[string]*Type{"x": f32(1, 2, 2, 3), "i": withDType(f32(1, 2, 2, 3), Int64)},
			consts: map[string]*Tensor{"s": FromInt64([]int64{1, 2, 5, 7}, 4)}},
		loweringCase{name: "LRN/symbolic-batch", node: node("LRN", []string{"x"}, []string{"y"}, IntAttr("size", 3)), opset: 13,
			inputs: map[string]*Type{"x": {Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Param: "N"}, knownDim(3), knownDim(4), knownDim(5)}}}},
		loweringCase{name: "GatherND/batch_dims", node: node("GatherND", []string{"x", "i"}, []string{"y"}, IntAttr("batch_dims", 1)), opset: 13,
			inputs: map[string]*Type{"x": f32(2, 3, 4), "i": withDType(f32(2, 5, 1), Int64)}},
		loweringCase{name: "Upsample", node: node("Upsample", []string{"x"}, []string{"y"}, FloatsAttr("scales", 1, 1, 2, 2)),
			opset: 7, inputs: map[string]*Type{"x": f32(1, 2, 4, 5)}},
		loweringCase{name: "GridSample/cubic-reflection", node: node("GridSample", []string{"x", "g"}, []string{"y"}, StringAttr("mode", "cubic"), StringAttr("padding_mode", "reflection")),
			opset: 20, inputs: map[string]*Type{"x": f32(2, 3, 4, 5), "g": f32(2, 6, 7, 2)}},
		loweringCase{name: "RoiAlign/max", node: node("RoiAlign", []string{"x", "r", "b"}, []string{"y"}, StringAttr("mode", "max"), IntAttr("sampling_ratio", 2), IntAttr("output_height", 2)),
			opset: 16, inputs: map[string]*Type{"x": f32(2, 3, 4, 5), "r": f32(3, 4), "b": withDType(f32(3), Int64)}},
		loweringCase{name: "GroupNormalization", node: node("GroupNormalization", []string{"x", "s", "b"}, []string{"y"}, IntAttr("num_groups", 2)),
			opset: 18, inputs: map[string]*Type{"x": f32(2, 4, 3, 3), "s": f32(2), "b": f32(2)}},
		loweringCase{name: "GridSample/nearest-zeros-3d", node: node("GridSample", []string{"x", "g"}, []string{"y"}, StringAttr("mode", "nearest"), IntAttr("align_corners", 1)),
			opset: 20, inputs: map[string]*Type{"x": f32(1, 2, 3, 4, 5), "g": f32(1, 2, 3, 4, 3)}},
	)
	for _, op := range []string{"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"} {
		cases = append(cases,
			loweringCase{name: op + "/13", node: node(op, []string{"x"}, []string{"y"}, IntsAttr("axes", 1), IntAttr("keepdims", 0)), opset: 13, inputs: x},
			loweringCase{name: op + "/11", node: node(op, []string{"x"}, []string{"y"}, IntsAttr("axes", -1)), opset: 11, inputs: x},
			loweringCase{name: op + "/18", node: node(op, []string{"x", "axes"}, []string{"y"}, IntAttr("keepdims", 0)), opset: 18,
				inputs: map[string]*Type{"x": f32(2, 3), "axes": withDType(f32(1), Int64)}},
			loweringCase{name: op + "/all", node: node(op, []string{"x"}, []string{"y"}), opset: 13, inputs: x},
		)
	}
	return cases
}

var primitiveSet = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range Primitives {
		m[p] = true
	}
	return m
}()

// checkLowered asserts that nodes emitted for n use primitives only, read
// only values that exist, and write each of n's named outputs once.
func checkLowered(t *testing.T, n *Node, nodes []*Node, consts map[string]*Tensor) {
	t.Helper()
	defined := map[string]bool{"": true}
	for _, in := range n.Inputs {
		defined[in] = true
	}
	for name, c := range consts {
		require.NoError(t, c.Validate(), "constant %s", name)
		assert.False(t, defined[name], "constant %s shadows an input", name)
		defined[name] = true
	}
	written := map[string]int{}
	for _, e := range nodes {
		assert.True(t, primitiveSet[e.OpType] || HasLowering(e.OpType), "%s emits %s, which is neither a primitive nor lowers", n.OpType, e.OpType)
		assert.Empty(t, e.Domain)
		for _, in := range e.Inputs {
			assert.True(t, defined[in], "%s (%s) reads %q before it is defined", e.Name, e.OpType, in)
		}
		for _, o := range e.Outputs {
			if o == "" {
				continue
			}
			assert.False(t, defined[o] && written[o] == 0 && isInputOf(n, o), "%s overwrites input %q", e.Name, o)
			written[o]++
			defined[o] = true
		}
	}
	for _, o := range n.Outputs {
		if o != "" {
			assert.Equal(t, 1, written[o], "output %q of %s is written %d times", o, n.OpType, written[o])
		}
	}
}

func isInputOf(n *Node, name string) bool {
	for _, in := range n.Inputs {
		if in == name {
			return true
		}
	}
	return false
}

func TestLoweringsEmitPrimitivesAndWriteOutputs(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range loweringCases() {
		t.Run(tc.name, func(t *testing.T) {
			covered[tc.node.OpType] = true
			require.True(t, HasLowering(tc.node.OpType))
			typeOf := func(name string) *Type {
				if c := tc.consts[name]; c != nil {
					return typeOfTensor(c)
				}
				return tc.inputs[name]
			}
			// Typed, with constants visible (the LowerGraph path).
			b := NewBuilder(tc.node.Label(), tc.opset)
			l := &lowering{n: tc.node, b: b, typeOf: typeOf, constOf: func(name string) *Tensor { return tc.consts[name] }}
			require.NoError(t, typedLowerings[tc.node.OpType](l))
			checkLowered(t, tc.node, b.Nodes, b.Consts)

			// Untyped (graph.Lower): must be valid or refuse with ErrUnsupportedOp.
			nodes, consts, ok, err := Lower(tc.node, tc.opset)
			require.True(t, ok)
			if err != nil {
				assert.ErrorIs(t, err, ErrUnsupportedOp)
				return
			}
			checkLowered(t, tc.node, nodes, consts)
		})
	}
	for _, op := range Lowerings() {
		if _, mine := typedLowerings[op]; mine {
			assert.True(t, covered[op], "lowering of %s has no test case", op)
		}
	}
}

func TestLoweringUsesTheInputDType(t *testing.T) {
	n := node("Elu", []string{"x"}, []string{"y"})
	_, consts, _, err := LowerWithTypes(n, 17, func(string) *Type { return withDType(f32(3), Float64) }, nil)
	require.NoError(t, err)
	require.NotEmpty(t, consts)
	for _, c := range consts {
		assert.Equal(t, Float64, c.DType)
	}
	_, consts, _, err = Lower(n, 17)
	require.NoError(t, err)
	for _, c := range consts {
		assert.Equal(t, Float32, c.DType)
	}
}

func TestLoweringRefusesUncoveredVariants(t *testing.T) {
	for _, tc := range []struct {
		n     *Node
		opset int64
	}{
		{node("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y", "rm", "rv"}, IntAttr("training_mode", 1)), 15},
		{node("Dropout", []string{"x", "r", "training"}, []string{"y"}), 13},
		{node("PRelu", []string{"x", "s"}, []string{"y"}), 6},
		{node("Squeeze", []string{"x"}, []string{"y"}), 13},
		{node("Gelu", []string{"x"}, []string{"y"}, StringAttr("approximate", "cubic")), 20},
		{node("CastLike", []string{"x", "y"}, []string{"z"}), 15},
	} {
		_, _, ok, err := Lower(tc.n, tc.opset)
		assert.True(t, ok)
		assert.ErrorIs(t, err, ErrUnsupportedOp, "%s", tc.n.OpType)
		assert.Contains(t, err.Error(), tc.n.OpType)
	}
}

// evalElementwise runs lowered elementwise nodes on 1-D float64 vectors
// (scalars broadcast), enough to check the activation formulas.
func evalElementwise(nodes []*Node, consts map[string]*Tensor, env map[string][]float64) error {
	for k, c := range consts {
		v := make([]float64, c.Size())
		for i := range v {
			v[i] = c.Float(i)
		}
		env[k] = v
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	unary := map[string]func(float64) float64{
		"Neg": func(a float64) float64 { return -a }, "Abs": math.Abs, "Exp": math.Exp, "Log": math.Log,
		"Sqrt": math.Sqrt, "Tanh": math.Tanh, "Erf": math.Erf, "Sin": math.Sin, "Cos": math.Cos,
		"Reciprocal": func(a float64) float64 { return 1 / a }, "Relu": func(a float64) float64 { return math.Max(a, 0) },
		"Not": func(a float64) float64 { return b2f(a == 0) }, "Identity": func(a float64) float64 { return a },
		"Floor": math.Floor,
	}
	binary := map[string]func(a, b float64) float64{
		"Add": func(a, b float64) float64 { return a + b }, "Sub": func(a, b float64) float64 { return a - b },
		"Mul": func(a, b float64) float64 { return a * b }, "Div": func(a, b float64) float64 { return a / b },
		"Max": math.Max, "Min": math.Min,
		"Less": func(a, b float64) float64 { return b2f(a < b) }, "Greater": func(a, b float64) float64 { return b2f(a > b) },
		"Equal": func(a, b float64) float64 { return b2f(a == b) },
		"And":   func(a, b float64) float64 { return b2f(a != 0 && b != 0) },
		"Or":    func(a, b float64) float64 { return b2f(a != 0 || b != 0) },
	}
	at := func(v []float64, i int) float64 {
		if len(v) == 1 {
			return v[0]
		}
		return v[i]
	}
	for _, n := range nodes {
		var in [][]float64
		size := 1
		for _, name := range n.Inputs {
			v, ok := env[name]
			if !ok {
				return fmt.Errorf("%s: no value for %q", n.OpType, name)
			}
			in = append(in, v)
			size = max(size, len(v))
		}
		out := make([]float64, size)
		for i := range out {
			switch {
			case unary[n.OpType] != nil:
				out[i] = unary[n.OpType](at(in[0], i))
			case binary[n.OpType] != nil:
				out[i] = binary[n.OpType](at(in[0], i), at(in[1], i))
			case n.OpType == "Where":
				if at(in[0], i) != 0 {
					out[i] = at(in[1], i)
				} else {
					out[i] = at(in[2], i)
				}
			default:
				return fmt.Errorf("evalElementwise: %s is not elementwise", n.OpType)
			}
		}
		env[n.Outputs[0]] = out
	}
	return nil
}

func TestActivationLoweringsCompute(t *testing.T) {
	xs := []float64{-3, -1.5, -0.25, 0, 0.3, 0.7, 1, 2.5, 4}
	softplus := func(x float64) float64 { return math.Log1p(math.Exp(x)) }
	for _, tc := range []struct {
		n   *Node
		ref func(x float64) float64
	}{
		{node("Softplus", []string{"x"}, []string{"y"}), softplus},
		{node("Softsign", []string{"x"}, []string{"y"}), func(x float64) float64 { return x / (1 + math.Abs(x)) }},
		{node("Elu", []string{"x"}, []string{"y"}, FloatAttr("alpha", 2)), func(x float64) float64 {
			if x < 0 {
				return 2 * (math.Exp(x) - 1)
			}
			return x
		}},
		{node("Selu", []string{"x"}, []string{"y"}), func(x float64) float64 {
			const a, g = 1.67326319217681884765625, 1.05070102214813232421875
			if x > 0 {
				return g * x
			}
			return g * (a*math.Exp(x) - a)
		}},
		{node("Celu", []string{"x"}, []string{"y"}, FloatAttr("alpha", 0.5)), func(x float64) float64 {
			return math.Max(0, x) + math.Min(0, 0.5*(math.Exp(x/0.5)-1))
		}},
		{node("LeakyRelu", []string{"x"}, []string{"y"}, FloatAttr("alpha", 0.1)), func(x float64) float64 {
			if x < 0 {
				return 0.1 * x
			}
			return x
		}},
		{node("HardSigmoid", []string{"x"}, []string{"y"}), func(x float64) float64 { return math.Max(0, math.Min(1, 0.2*x+0.5)) }},
		{node("HardSwish", []string{"x"}, []string{"y"}), func(x float64) float64 { return x * math.Max(0, math.Min(1, x/6+0.5)) }},
		{node("ThresholdedRelu", []string{"x"}, []string{"y"}, FloatAttr("alpha", 0.5)), func(x float64) float64 {
			if x > 0.5 {
				return x
			}
			return 0
		}},
		{node("Shrink", []string{"x"}, []string{"y"}, FloatAttr("lambd", 1), FloatAttr("bias", 0.5)), func(x float64) float64 {
			switch {
			case x < -1:
				return x + 0.5
			case x > 1:
				return x - 0.5
			}
			return 0
		}},
		{node("Mish", []string{"x"}, []string{"y"}), func(x float64) float64 { return x * math.Tanh(softplus(x)) }},
		{node("Gelu", []string{"x"}, []string{"y"}), func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }},
		{node("Gelu", []string{"x"}, []string{"y"}, StringAttr("approximate", "tanh")), func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}},
		{node("Clip", []string{"x"}, []string{"y"}, FloatAttr("min", -1), FloatAttr("max", 2)), func(x float64) float64 { return math.Max(-1, math.Min(2, x)) }},
		{node("Sign", []string{"x"}, []string{"y"}), func(x float64) float64 {
			switch {
			case x > 0:
				return 1
			case x < 0:
				return -1
			}
			return 0
		}},
		{node("Tan", []string{"x"}, []string{"y"}), math.Tan},
		{node("Sinh", []string{"x"}, []string{"y"}), math.Sinh},
		{node("Cosh", []string{"x"}, []string{"y"}), math.Cosh},
		{node("Asinh", []string{"x"}, []string{"y"}), math.Asinh},
		{node("Atan", []string{"x"}, []string{"y"}), math.Atan},
		{node("Round", []string{"x"}, []string{"y"}), math.RoundToEven},
		{node("Ceil", []string{"x"}, []string{"y"}), math.Ceil},
		{node("Sigmoid", []string{"x"}, []string{"y"}), func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
	} {
		opset := int64(20)
		if tc.n.OpType == "Clip" {
			opset = 6
		}
		nodes, consts, ok, err := LowerWithTypes(tc.n, opset, func(string) *Type { return withDType(f32(int64(len(xs))), Float64) }, nil)
		require.True(t, ok)
		require.NoError(t, err, tc.n.OpType)
		env := map[string][]float64{"x": xs}
		require.NoError(t, evalElementwise(nodes, consts, env), tc.n.OpType)
		got := env["y"]
		require.Len(t, got, len(xs), tc.n.OpType)
		for i, x := range xs {
			assert.InDelta(t, tc.ref(x), got[i], 1e-6, "%s(%g) %v", tc.n.OpType, x, tc.n.Attrs)
		}
	}
}

func TestLowerGraphLowersRecursivelyWithTypes(t *testing.T) {
	g := NewGraph("g")
	g.Inputs = []*ValueInfo{{Name: "x", Type: withDType(f32(2, 3), Float64)}}
	g.Outputs = []*ValueInfo{{Name: "y"}}
	g.Initializers["a"] = &Tensor{DType: Float64, Shape: []int{3, 4}, Data: make([]float64, 12)}
	g.Nodes = []*Node{
		node("Gemm", []string{"x", "a"}, []string{"h"}, FloatAttr("alpha", 2)),
		node("Selu", []string{"h"}, []string{"y"}),
	}
	// Keep primitives except Where, which has no lowering: an error.
	err := LowerGraph(g, 17, func(n *Node) bool { return primitiveSet[n.OpType] && n.OpType != "Where" })
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnsupportedOp)

	g.Nodes = []*Node{
		node("Gemm", []string{"x", "a"}, []string{"h"}, FloatAttr("alpha", 2)),
		node("Selu", []string{"h"}, []string{"y"}),
	}
	require.NoError(t, LowerGraph(g, 17, func(n *Node) bool { return primitiveSet[n.OpType] }))
	for _, n := range g.Nodes {
		assert.True(t, primitiveSet[n.OpType], n.OpType)
	}
	for name, c := range g.Initializers {
		if name != "a" {
			assert.Equal(t, Float64, c.DType, "constant %s", name)
		}
	}
	assert.NoError(t, TopoSort(g))
	assert.True(t, errors.Is(fmt.Errorf("x: %w", ErrUnsupportedOp), ErrUnsupportedOp))
}

// TestShapeLoweringTargets checks the Reshape targets that Squeeze,
// Unsqueeze and Flatten lower to when the input shape is known.
func TestShapeLoweringTargets(t *testing.T) {
	for _, tc := range []struct {
		n      *Node
		opset  int64
		shape  []int64
		consts map[string]*Tensor
		want   []int64
	}{
		{node("Unsqueeze", []string{"x"}, []string{"y"}, IntsAttr("axes", 0, 3)), 11, []int64{3, 5}, nil, []int64{1, 3, 5, 1}},
		{node("Unsqueeze", []string{"x", "a"}, []string{"y"}), 13, []int64{3, 6, 6}, map[string]*Tensor{"a": FromInt64([]int64{1}, 1)}, []int64{3, 1, 6, 6}},
		{node("Unsqueeze", []string{"x", "a"}, []string{"y"}), 13, []int64{3, 6}, map[string]*Tensor{"a": FromInt64([]int64{-1, 0}, 2)}, []int64{1, 3, 6, 1}},
		{node("Squeeze", []string{"x"}, []string{"y"}), 11, []int64{1, 3, 1, 5}, nil, []int64{3, 5}},
		{node("Squeeze", []string{"x", "a"}, []string{"y"}), 13, []int64{1, 3, 1, 5}, map[string]*Tensor{"a": FromInt64([]int64{-2}, 1)}, []int64{1, 3, 5}},
		{node("Flatten", []string{"x"}, []string{"y"}, IntAttr("axis", 2)), 13, []int64{2, 3, 4, 5}, nil, []int64{6, -1}},
	} {
		shape := tc.shape
		nodes, consts, ok, err := LowerWithTypes(tc.n, tc.opset, func(name string) *Type {
			if name == "x" {
				return f32(shape...)
			}
			return nil
		}, func(name string) *Tensor { return tc.consts[name] })
		require.True(t, ok)
		require.NoError(t, err, "%s %v", tc.n.OpType, tc.shape)
		require.Len(t, nodes, 1, "%s: a single Reshape", tc.n.OpType)
		require.Equal(t, "Reshape", nodes[0].OpType)
		target := consts[nodes[0].Inputs[1]]
		require.NotNil(t, target)
		assert.Equal(t, tc.want, target.Int64s(), "%s of %v", tc.n.OpType, tc.shape)
	}
}

// TestLoweringsReachPrimitives lowers every case's node to the end (each
// node a lowering emits lowered again until only primitives are left) and
// checks that nothing else remains.
func TestLoweringsReachPrimitives(t *testing.T) {
	for _, tc := range loweringCases() {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGraph("g")
			for _, in := range tc.node.Inputs {
				if in == "" {
					continue
				}
				if c := tc.consts[in]; c != nil {
					g.Initializers[in] = c
					continue
				}
				g.Inputs = append(g.Inputs, &ValueInfo{Name: in, Type: tc.inputs[in]})
			}
			for _, o := range tc.node.Outputs {
				g.Outputs = append(g.Outputs, &ValueInfo{Name: o})
			}
			g.Nodes = []*Node{tc.node}
			require.NoError(t, LowerGraph(g, tc.opset, func(n *Node) bool { return IsPrimitive(n.Domain, n.OpType) }))
			require.NotEmpty(t, g.Nodes)
			for _, n := range g.Nodes {
				assert.True(t, IsPrimitive(n.Domain, n.OpType), "%s lowers to %s", tc.node.OpType, n.OpType)
			}
			assert.NoError(t, TopoSort(g))
		})
	}
}

func TestPrimitiveSetIsSmallAndApartFromExtended(t *testing.T) {
	assert.LessOrEqual(t, len(Primitives), 40)
	seen := map[string]bool{}
	for _, p := range PrimitiveOps {
		assert.False(t, seen[p.Name], "%s listed twice", p.Name)
		seen[p.Name] = true
		assert.NotEmpty(t, p.Semantics, p.Name)
		assert.False(t, IsExtended("", p.Name), "%s is in both sets", p.Name)
		assert.False(t, HasLowering(p.Name), "primitive %s has a lowering", p.Name)
	}
	for op := range ExtendedOps {
		assert.False(t, HasLowering(op), "extended op %s has a lowering: move it out of the extended set", op)
	}
}

// TestGradientLoweringsReachPrimitives lowers the gradient ops autodiff
// emits, with static shapes, and checks that only primitives remain.
func TestGradientLoweringsReachPrimitives(t *testing.T) {
	internal := func(op string, in []string, attrs ...*Attr) *Node {
		n := node(op, in, []string{"y"}, attrs...)
		n.Domain = InternalDomain
		return n
	}
	for _, tc := range []struct {
		n      *Node
		inputs map[string]*Type
	}{
		{internal("SumToShape", []string{"g", "like"}), map[string]*Type{"g": f32(4, 2, 3), "like": f32(1, 3)}},
		{internal("SumToShape", []string{"g", "like"}), map[string]*Type{"g": f32(2, 3), "like": f32(2, 3)}},
		{internal("UnreduceTo", []string{"v", "x"}, IntAttr("keepdims", 0), IntsAttr("axes", 1)), map[string]*Type{"v": f32(2, 4), "x": f32(2, 3, 4)}},
		{internal("UnreduceTo", []string{"v", "x"}), map[string]*Type{"v": f32(1, 1), "x": f32(2, 3)}},
		{internal("MatMulGradA", []string{"dy", "a", "b"}), map[string]*Type{"dy": f32(5, 2, 4), "a": f32(5, 2, 3), "b": f32(3, 4)}},
		{internal("MatMulGradB", []string{"dy", "a", "b"}), map[string]*Type{"dy": f32(5, 2, 4), "a": f32(5, 2, 3), "b": f32(3, 4)}},
		{internal("SoftmaxGrad", []string{"dy", "s"}, IntAttr("axis", -1)), map[string]*Type{"dy": f32(2, 3), "s": f32(2, 3)}},
		{internal("LogSoftmaxGrad", []string{"dy", "s"}, IntAttr("axis", 1), IntAttr("coerce", 1)), map[string]*Type{"dy": f32(2, 3), "s": f32(2, 3)}},
	} {
		t.Run(tc.n.OpType, func(t *testing.T) {
			require.True(t, HasDomainLowering(InternalDomain, tc.n.OpType))
			g := NewGraph("g")
			for _, in := range tc.n.Inputs {
				g.Inputs = append(g.Inputs, &ValueInfo{Name: in, Type: tc.inputs[in]})
			}
			g.Outputs = []*ValueInfo{{Name: "y"}}
			g.Nodes = []*Node{tc.n}
			require.NoError(t, LowerGraph(g, 17, func(n *Node) bool { return IsPrimitive(n.Domain, n.OpType) }))
			for _, n := range g.Nodes {
				assert.True(t, IsPrimitive(n.Domain, n.OpType), "%s lowers to %s:%s", tc.n.OpType, n.Domain, n.OpType)
			}
			written := false
			for _, n := range g.Nodes {
				written = written || slices.Contains(n.Outputs, "y")
			}
			assert.True(t, written, "output y is written")
		})
	}
	// Without static shapes SumToShape refuses (and a backend keeps its kernel).
	_, _, ok, err := LowerWithTypes(internal("SumToShape", []string{"g", "like"}), 17, nil, nil)
	assert.True(t, ok)
	assert.ErrorIs(t, err, ErrUnsupportedOp)
}

// TestPrimitivesDocumented: docs/primitives.md has a row for every
// primitive and names every extended op.
func TestPrimitivesDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/primitives.md")
	require.NoError(t, err)
	doc := string(b)
	for _, p := range PrimitiveOps {
		assert.Contains(t, doc, "| `"+p.Name+"` | "+p.Class+" |", "primitive %s", p.Name)
	}
	for op := range ExtendedOps {
		assert.Contains(t, doc, "`"+op+"`", "extended op %s", op)
	}
}

// TestEveryGradientOpLowers: every op of onnxtrain's internal domain that
// autodiff emits (all of them but the optimizer's and the collectives',
// which backends implement as they are) has a lowering into primitives.
func TestEveryGradientOpLowers(t *testing.T) {
	exempt := map[string]bool{AllReduceSumOp: true}
	for _, op := range append(append([]string{}, OptimizerOps...), CollectiveOps...) {
		exempt[op] = true
	}
	for op := range internalInferRules {
		if exempt[op] {
			continue
		}
		_, ok := domainLowerings[InternalDomain+":"+op]
		assert.True(t, ok, "internal op %s has no lowering", op)
	}
}
