package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/graph"
)

// onnxNode moves n to the ai.onnx domain.
func onnxNode(n *graph.Node) *graph.Node { n.Domain = ""; return n }

// TestGradientLoweringsMatchKernels runs each gradient op autodiff emits
// twice on the same random inputs: with its kernel, and compiled with
// PrimitivesOnly, where it must lower (no gap) and give the kernel's values.
func TestGradientLoweringsMatchKernels(t *testing.T) {
	idx := func(v []int64, shape ...int) *graph.Tensor { return graph.FromInt64(v, shape...) }
	internal := func(op string, in []string, outs int, attrs ...*graph.Attr) *graph.Node {
		n := &graph.Node{Name: op, OpType: op, Domain: graph.InternalDomain, Inputs: in}
		for i := 0; i < outs; i++ {
			n.Outputs = append(n.Outputs, op+"_out"+string(rune('0'+i)))
		}
		for _, a := range attrs {
			n.SetAttr(a)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		n      *graph.Node
		inputs map[string]*graph.Type
		consts map[string]*graph.Tensor
	}{
		{"SumToShape", internal("SumToShape", []string{"g", "like"}, 1),
			map[string]*graph.Type{"g": backendtest.F32Type(4, 2, 3), "like": backendtest.F32Type(2, 1)}, nil},
		{"UnreduceTo", internal("UnreduceTo", []string{"v", "x"}, 1, graph.IntAttr("keepdims", 0), graph.IntsAttr("axes", 1)),
			map[string]*graph.Type{"v": backendtest.F32Type(2, 4), "x": backendtest.F32Type(2, 3, 4)}, nil},
		{"MatMulGradA", internal("MatMulGradA", []string{"dy", "a", "b"}, 1),
			map[string]*graph.Type{"dy": backendtest.F32Type(5, 2, 4), "a": backendtest.F32Type(5, 2, 3), "b": backendtest.F32Type(3, 4)}, nil},
		{"MatMulGradB", internal("MatMulGradB", []string{"dy", "a", "b"}, 1),
			map[string]*graph.Type{"dy": backendtest.F32Type(5, 2, 4), "a": backendtest.F32Type(5, 2, 3), "b": backendtest.F32Type(3, 4)}, nil},
		{"SoftmaxGrad", internal("SoftmaxGrad", []string{"dy", "y"}, 1, graph.IntAttr("axis", 1)),
			map[string]*graph.Type{"dy": backendtest.F32Type(3, 5), "y": backendtest.F32Type(3, 5)}, nil},
		{"LogSoftmaxGrad", internal("LogSoftmaxGrad", []string{"dy", "y"}, 1, graph.IntAttr("axis", -1)),
			map[string]*graph.Type{"dy": backendtest.F32Type(3, 5), "y": backendtest.F32Type(3, 5)}, nil},
		{"GatherGrad", internal("GatherGrad", []string{"dy", "data", "i"}, 1, graph.IntAttr("axis", 1)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 2, 3, 4), "data": backendtest.F32Type(2, 5, 4)},
			map[string]*graph.Tensor{"i": idx([]int64{0, 4, -1, 0, 2, 2}, 2, 3)}},
		{"GatherElementsGrad", internal("GatherElementsGrad", []string{"dy", "data", "i"}, 1, graph.IntAttr("axis", 0)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 3), "data": backendtest.F32Type(4, 3)},
			map[string]*graph.Tensor{"i": idx([]int64{0, 3, 3, -1, 0, 1}, 2, 3)}},
		{"MaxPoolGrad", internal("MaxPoolGrad", []string{"dy", "x"}, 1, graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 3, 4, 4), "x": backendtest.F32Type(2, 3, 8, 8)}, nil},
		{"SliceGrad", internal("SliceGrad", []string{"dy", "x", "s", "e", "a"}, 1),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 3, 3), "x": backendtest.F32Type(2, 5, 4)},
			map[string]*graph.Tensor{"s": idx([]int64{1, -3}, 2), "e": idx([]int64{4, 100}, 2), "a": idx([]int64{1, 2}, 2)}},
		{"SplitLike", internal("SplitLike", []string{"dy", "p", "q"}, 2, graph.IntAttr("axis", 1)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 5), "p": backendtest.F32Type(2, 2), "q": backendtest.F32Type(2, 3)}, nil},
		{"ConvBackwardData", internal("ConvBackwardData", []string{"dy", "w", "xs"}, 1, graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 0, 1, 2), graph.IntsAttr("dilations", 1, 2), graph.IntAttr("group", 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 4, 4, 3), "w": backendtest.F32Type(4, 3, 3, 3)},
			map[string]*graph.Tensor{"xs": idx([]int64{2, 6, 8, 7}, 4)}},
		{"ConvBackwardData/same", internal("ConvBackwardData", []string{"dy", "w", "xs"}, 1, graph.StringAttr("auto_pad", "SAME_UPPER"), graph.IntsAttr("strides", 2, 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(1, 2, 3, 4), "w": backendtest.F32Type(2, 3, 3, 3)},
			map[string]*graph.Tensor{"xs": idx([]int64{1, 3, 5, 8}, 4)}},
		{"ConvBackwardFilter", internal("ConvBackwardFilter", []string{"dy", "x", "ws"}, 1, graph.IntsAttr("strides", 2, 1), graph.IntsAttr("pads", 1, 0, 2, 1), graph.IntsAttr("dilations", 1, 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 4, 4, 7), "x": backendtest.F32Type(2, 3, 7, 8)},
			map[string]*graph.Tensor{"ws": idx([]int64{4, 3, 3, 2}, 4)}},
		{"BatchNormalizationGrad/training", internal("BatchNormalizationGrad", []string{"dy", "x", "s", "m", "v"}, 3, graph.IntAttr("training_mode", 1), graph.FloatAttr("epsilon", 1e-3)),
			map[string]*graph.Type{"dy": backendtest.F32Type(4, 3, 2, 5), "x": backendtest.F32Type(4, 3, 2, 5), "s": backendtest.F32Type(3), "m": backendtest.F32Type(3), "v": backendtest.F32Type(3)}, nil},
		{"BatchNormalizationGrad/inference", internal("BatchNormalizationGrad", []string{"dy", "x", "s", "m", "v"}, 5),
			map[string]*graph.Type{"dy": backendtest.F32Type(4, 3, 5), "x": backendtest.F32Type(4, 3, 5), "s": backendtest.F32Type(3), "m": backendtest.F32Type(3)},
			map[string]*graph.Tensor{"v": graph.FromFloat32([]float32{0.5, 1, 2}, 3)}},
		{"BatchNormalization/training", onnxNode(internal("BatchNormalization", []string{"x", "s", "b", "m", "v"}, 3, graph.IntAttr("training_mode", 1), graph.FloatAttr("momentum", 0.8), graph.IntAttr(graph.UnbiasedVarAttr, 1))),
			map[string]*graph.Type{"x": backendtest.F32Type(4, 3, 2, 5), "s": backendtest.F32Type(3), "b": backendtest.F32Type(3), "m": backendtest.F32Type(3)},
			map[string]*graph.Tensor{"v": graph.FromFloat32([]float32{0.5, 1, 2}, 3)}},
		{"LayerNormalizationGrad", internal("LayerNormalizationGrad", []string{"dy", "x", "s"}, 3, graph.IntAttr("axis", -2), graph.FloatAttr("epsilon", 1e-3)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 3, 4, 5), "x": backendtest.F32Type(2, 3, 4, 5), "s": backendtest.F32Type(4, 5)}, nil},
		{"LayerNormalizationGrad/broadcast-scale", internal("LayerNormalizationGrad", []string{"dy", "x", "s"}, 3),
			map[string]*graph.Type{"dy": backendtest.F32Type(3, 6), "x": backendtest.F32Type(3, 6), "s": backendtest.F32Type(1)}, nil},
		{"SoftmaxCrossEntropyLossGrad/mean", internal("SoftmaxCrossEntropyLossGrad", []string{"dy", "x", "t", "w", ""}, 1, graph.IntAttr("ignore_index", 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(), "x": backendtest.F32Type(3, 4, 2), "w": backendtest.F32Type(4)},
			map[string]*graph.Tensor{"t": idx([]int64{0, 2, 3, 1, 2, 0}, 3, 2)}},
		{"SoftmaxCrossEntropyLossGrad/none+logp", internal("SoftmaxCrossEntropyLossGrad", []string{"dy", "x", "t", "", "dlp"}, 1, graph.StringAttr("reduction", "none")),
			map[string]*graph.Type{"dy": backendtest.F32Type(3), "x": backendtest.F32Type(3, 4), "dlp": backendtest.F32Type(3, 4)},
			map[string]*graph.Tensor{"t": idx([]int64{0, 3, 1}, 3)}},
		{"SoftmaxCrossEntropyLossGrad/sum", internal("SoftmaxCrossEntropyLossGrad", []string{"dy", "x", "t"}, 1, graph.StringAttr("reduction", "sum")),
			map[string]*graph.Type{"dy": backendtest.F32Type(), "x": backendtest.F32Type(3, 4)},
			map[string]*graph.Tensor{"t": idx([]int64{0, 3, 1}, 3)}},
		{"ConvTransposeBackwardData", internal("ConvTransposeBackwardData", []string{"dy", "w", "xs"}, 1, graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 0, 1, 1), graph.IntsAttr("output_padding", 1, 0), graph.IntAttr("group", 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 4, 8, 8), "w": backendtest.F32Type(4, 2, 3, 3)},
			map[string]*graph.Tensor{"xs": idx([]int64{2, 4, 4, 4}, 4)}},
		{"ConvTransposeBackwardFilter", internal("ConvTransposeBackwardFilter", []string{"dy", "x", "ws"}, 1, graph.IntsAttr("strides", 2, 1), graph.IntsAttr("pads", 1, 0, 0, 1), graph.IntsAttr("dilations", 1, 2)),
			map[string]*graph.Type{"dy": backendtest.F32Type(2, 3, 8, 8), "x": backendtest.F32Type(2, 4, 4, 5)},
			map[string]*graph.Tensor{"ws": idx([]int64{4, 3, 3, 3}, 4)}},
		{"TileGrad", internal("TileGrad", []string{"dy", "x"}, 1),
			map[string]*graph.Type{"dy": backendtest.F32Type(4, 9), "x": backendtest.F32Type(2, 3)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.NewGraph(tc.name)
			for _, in := range tc.n.Inputs {
				if in == "" {
					continue
				}
				if c := tc.consts[in]; c != nil {
					g.Initializers[in] = c
					continue
				}
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: in, Type: tc.inputs[in]})
			}
			for _, o := range tc.n.Outputs {
				g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o})
			}
			g.Nodes = []*graph.Node{tc.n}
			m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
			inputs := backendtest.NormalInputs(g, rand.New(rand.NewPCG(3, 5)), 1)
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
			for name, want := range outs[0] {
				got := outs[1][name]
				require.NotNil(t, got, name)
				require.Equal(t, want.Shape, got.Shape, name)
				for i, w := range want.Float32s() {
					assert.LessOrEqual(t, math.Abs(float64(got.Float32s()[i]-w)), 1e-5+1e-5*math.Abs(float64(w)), "%s[%d]", name, i)
				}
			}
		})
	}
}
