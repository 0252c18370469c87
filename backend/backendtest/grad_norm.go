package backendtest

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Finite-difference checks of the softmax, normalisation, loss, Dropout,
// CumSum and TopK gradient rules (graph/grad_nn_norm.go).

func (kc checker) gradNormSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	axis := func(a int64) *graph.Attr { return graph.IntAttr("axis", a) }
	var cases []gradCase
	for _, op := range []string{"Softmax", "LogSoftmax"} {
		cases = append(cases,
			gradCase{name: op + " default axis", op: op, inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}},
			gradCase{name: op + " axis 1", op: op, inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, attrs: []*graph.Attr{axis(1)}},
			gradCase{name: op + " axis 0", op: op, inputs: []*graph.Tensor{x(3, 2)}, wrt: []int{0}, attrs: []*graph.Attr{axis(0)}},
			gradCase{name: op + " negative axis", op: op, inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, attrs: []*graph.Attr{axis(-2)}},
			gradCase{name: op + " opset 13", op: op, inputs: []*graph.Tensor{x(2, 5)}, wrt: []int{0}, opset: 13},
			// Before opset 13 the input is coerced to 2-D at axis (default 1).
			gradCase{name: op + " opset 11 coerced default", op: op, inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, opset: 11},
			gradCase{name: op + " opset 11 coerced axis 2", op: op, inputs: []*graph.Tensor{x(2, 3, 2, 2)}, wrt: []int{0}, opset: 11, attrs: []*graph.Attr{axis(2)}},
			gradCase{name: op + " opset 11 coerced negative axis", op: op, inputs: []*graph.Tensor{x(2, 3, 4)}, wrt: []int{0}, opset: 11, attrs: []*graph.Attr{axis(-1)}},
			gradCase{name: op + " opset 11 coerced axis 0", op: op, inputs: []*graph.Tensor{x(2, 3)}, wrt: []int{0}, opset: 11, attrs: []*graph.Attr{axis(0)}},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormBatchNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	pos := func(shape ...int) *graph.Tensor { return Rand64(r, 0.5, 2, shape...) }
	train := graph.IntAttr("training_mode", 1)
	eps := graph.FloatAttr("epsilon", 1e-3)
	cases := []gradCase{
		{name: "training 4-D opset 15", op: "BatchNormalization", opset: 15, outputs: 3, attrs: []*graph.Attr{train},
			inputs: []*graph.Tensor{any(3, 2, 2, 3), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 1, 2}},
		{name: "training 2-D opset 14 epsilon", op: "BatchNormalization", opset: 14, outputs: 3, attrs: []*graph.Attr{train, eps, graph.FloatAttr("momentum", 0.8)},
			inputs: []*graph.Tensor{any(4, 3), any(3), any(3), any(3), pos(3)}, wrt: []int{0, 1, 2}},
		{name: "training 3-D only X", op: "BatchNormalization", opset: 15, outputs: 3, attrs: []*graph.Attr{train},
			inputs: []*graph.Tensor{any(2, 3, 4), any(3), any(3), any(3), pos(3)}, wrt: []int{0}},
		{name: "training running outputs unused", op: "BatchNormalization", opset: 15, outputs: 3, attrs: []*graph.Attr{train},
			inputs: []*graph.Tensor{any(2, 2, 3), any(2), any(2), any(2), pos(2)}, wrt: []int{1, 2}},
		// Opset 9: training is told by the extra outputs.
		{name: "training opset 9", op: "BatchNormalization", opset: 9, outputs: 5,
			inputs: []*graph.Tensor{any(3, 2, 3), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 1, 2}},
		// Per-activation parameters (the old spatial=0 form).
		{name: "training per-activation", op: "BatchNormalization", opset: 15, outputs: 3, attrs: []*graph.Attr{train},
			inputs: []*graph.Tensor{any(4, 2, 3), any(6), any(6), any(6), pos(6)}, wrt: []int{0, 1, 2}},
		{name: "inference", op: "BatchNormalization", opset: 15,
			inputs: []*graph.Tensor{any(2, 3, 2, 2), any(3), any(3), any(3), pos(3)}, wrt: []int{0, 1, 2, 3, 4}},
		{name: "inference training_mode 0 epsilon", op: "BatchNormalization", opset: 15, attrs: []*graph.Attr{graph.IntAttr("training_mode", 0), eps},
			inputs: []*graph.Tensor{any(3, 2), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 1, 2, 3, 4}},
		{name: "inference opset 9", op: "BatchNormalization", opset: 9,
			inputs: []*graph.Tensor{any(2, 2, 3), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 3, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormLayerNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	axis := func(a int64) *graph.Attr { return graph.IntAttr("axis", a) }
	cases := []gradCase{
		{name: "default axis", op: "LayerNormalization", inputs: []*graph.Tensor{any(3, 5), any(5), any(5)}, wrt: []int{0, 1, 2}},
		{name: "axis 1 of 3", op: "LayerNormalization", attrs: []*graph.Attr{axis(1)},
			inputs: []*graph.Tensor{any(2, 3, 4), any(3, 4), any(3, 4)}, wrt: []int{0, 1, 2}},
		{name: "negative axis epsilon", op: "LayerNormalization", attrs: []*graph.Attr{axis(-2), graph.FloatAttr("epsilon", 1e-2)},
			inputs: []*graph.Tensor{any(2, 3, 4), any(3, 4), any(3, 4)}, wrt: []int{0, 1, 2}},
		{name: "axis 0", op: "LayerNormalization", attrs: []*graph.Attr{axis(0)},
			inputs: []*graph.Tensor{any(2, 3), any(2, 3), any(2, 3)}, wrt: []int{0, 1, 2}},
		{name: "no bias", op: "LayerNormalization", inputs: []*graph.Tensor{any(4, 3), any(3)}, wrt: []int{0, 1}},
		{name: "broadcast scale and bias", op: "LayerNormalization", attrs: []*graph.Attr{axis(1)},
			inputs: []*graph.Tensor{any(2, 3, 4), any(4), any(1, 4)}, wrt: []int{0, 1, 2}},
		// The Mean and InvStdDev outputs are named but carry no gradient.
		{name: "statistics outputs named", op: "LayerNormalization", outputs: 3,
			inputs: []*graph.Tensor{any(3, 4), any(4), any(4)}, wrt: []int{0, 1, 2}},
		{name: "only parameters", op: "LayerNormalization", inputs: []*graph.Tensor{any(3, 4), any(4), any(4)}, wrt: []int{1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormInstanceGroupNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	groups := func(g int64) *graph.Attr { return graph.IntAttr("num_groups", g) }
	cases := []gradCase{
		{name: "InstanceNormalization 3-D", op: "InstanceNormalization",
			inputs: []*graph.Tensor{any(2, 3, 4), any(3), any(3)}, wrt: []int{0, 1, 2}},
		{name: "InstanceNormalization 4-D epsilon", op: "InstanceNormalization", attrs: []*graph.Attr{graph.FloatAttr("epsilon", 1e-2)},
			inputs: []*graph.Tensor{any(2, 2, 2, 3), any(2), any(2)}, wrt: []int{0, 1, 2}},
		{name: "GroupNormalization per-channel opset 21", op: "GroupNormalization", opset: 21, attrs: []*graph.Attr{groups(2)},
			inputs: []*graph.Tensor{any(2, 4, 3), any(4), any(4)}, wrt: []int{0, 1, 2}},
		{name: "GroupNormalization per-group opset 18", op: "GroupNormalization", opset: 18, attrs: []*graph.Attr{groups(2)},
			inputs: []*graph.Tensor{any(2, 4, 3), any(2), any(2)}, wrt: []int{0, 1, 2}},
		{name: "GroupNormalization one group", op: "GroupNormalization", opset: 21, attrs: []*graph.Attr{groups(1)},
			inputs: []*graph.Tensor{any(3, 2, 2, 2), any(2), any(2)}, wrt: []int{0, 1, 2}},
		{name: "GroupNormalization rank 2", op: "GroupNormalization", opset: 21, attrs: []*graph.Attr{groups(3)},
			inputs: []*graph.Tensor{any(2, 6), any(6), any(6)}, wrt: []int{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormLosses(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	pos := func(shape ...int) *graph.Tensor { return Rand64(r, 0.5, 2, shape...) }
	labels := func(v []int64, shape ...int) *graph.Tensor { return graph.FromInt64(v, shape...) }
	red := func(s string) *graph.Attr { return graph.StringAttr("reduction", s) }
	ignore := func(i int64) *graph.Attr { return graph.IntAttr("ignore_index", i) }
	t1 := labels([]int64{2, 0, 3, 1}, 4)
	t2 := labels([]int64{0, 2, 1, 1, 2, 0}, 2, 3)
	tIgn := labels([]int64{2, 1, 3, 1}, 4)
	tNeg := labels([]int64{0, -100, 2, 1, -100, 0}, 2, 3)
	var cases []gradCase
	for _, op := range []string{"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"} {
		for _, rd := range []string{"none", "sum", "mean"} {
			cases = append(cases,
				gradCase{name: op + " " + rd, op: op, attrs: []*graph.Attr{red(rd)},
					inputs: []*graph.Tensor{any(4, 4), t1}, wrt: []int{0}},
				gradCase{name: op + " " + rd + " weight", op: op, attrs: []*graph.Attr{red(rd)},
					inputs: []*graph.Tensor{any(4, 4), t1, pos(4)}, wrt: []int{0}},
				gradCase{name: op + " " + rd + " extra dims weight", op: op, attrs: []*graph.Attr{red(rd)},
					inputs: []*graph.Tensor{any(2, 3, 3), t2, pos(3)}, wrt: []int{0}},
				gradCase{name: op + " " + rd + " ignore_index", op: op, attrs: []*graph.Attr{red(rd), ignore(1)},
					inputs: []*graph.Tensor{any(4, 4), tIgn, pos(4)}, wrt: []int{0}},
				gradCase{name: op + " " + rd + " negative ignore_index extra dims", op: op, attrs: []*graph.Attr{red(rd), ignore(-100)},
					inputs: []*graph.Tensor{any(2, 3, 3), tNeg}, wrt: []int{0}},
			)
		}
		cases = append(cases, gradCase{name: op + " default reduction", op: op,
			inputs: []*graph.Tensor{any(2, 4, 1, 2), labels([]int64{0, 3, 2, 2}, 2, 1, 2)}, wrt: []int{0}})
	}
	// SoftmaxCrossEntropyLoss's log_prob output may carry a gradient too.
	cases = append(cases,
		gradCase{name: "SoftmaxCrossEntropyLoss loss and log_prob", op: "SoftmaxCrossEntropyLoss", outputs: 2, lossOutputs: []int{0, 1},
			attrs: []*graph.Attr{red("mean"), ignore(1)}, inputs: []*graph.Tensor{any(4, 4), tIgn, pos(4)}, wrt: []int{0}},
		gradCase{name: "SoftmaxCrossEntropyLoss only log_prob", op: "SoftmaxCrossEntropyLoss", outputs: 2, lossOutputs: []int{1},
			inputs: []*graph.Tensor{any(2, 3, 3), t2}, wrt: []int{0}},
		gradCase{name: "SoftmaxCrossEntropyLoss none with log_prob", op: "SoftmaxCrossEntropyLoss", outputs: 2, lossOutputs: []int{0, 1},
			attrs: []*graph.Attr{red("none")}, inputs: []*graph.Tensor{any(2, 3, 3), t2, pos(3)}, wrt: []int{0}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormCumSumTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	axis := func(a int64) *graph.Tensor { return graph.FromInt64([]int64{a}) }
	k := func(v int64) *graph.Tensor { return graph.FromInt64([]int64{v}, 1) }
	excl := graph.IntAttr("exclusive", 1)
	rev := graph.IntAttr("reverse", 1)
	cases := []gradCase{
		{name: "CumSum axis 0", op: "CumSum", inputs: []*graph.Tensor{any(3, 4), axis(0)}, wrt: []int{0}},
		{name: "CumSum axis 1", op: "CumSum", inputs: []*graph.Tensor{any(2, 3, 4), axis(1)}, wrt: []int{0}},
		{name: "CumSum negative axis", op: "CumSum", inputs: []*graph.Tensor{any(2, 3, 4), axis(-1)}, wrt: []int{0}},
		{name: "CumSum exclusive", op: "CumSum", inputs: []*graph.Tensor{any(2, 5), axis(1)}, wrt: []int{0}, attrs: []*graph.Attr{excl}},
		{name: "CumSum reverse", op: "CumSum", inputs: []*graph.Tensor{any(2, 5), axis(1)}, wrt: []int{0}, attrs: []*graph.Attr{rev}},
		{name: "CumSum exclusive reverse", op: "CumSum", inputs: []*graph.Tensor{any(4, 2), axis(0)}, wrt: []int{0}, attrs: []*graph.Attr{excl, rev}},
		{name: "TopK last axis", op: "TopK", outputs: 2, inputs: []*graph.Tensor{any(3, 5), k(2)}, wrt: []int{0}},
		{name: "TopK axis 0", op: "TopK", outputs: 2, inputs: []*graph.Tensor{any(4, 3), k(3)}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntAttr("axis", 0)}},
		{name: "TopK smallest negative axis", op: "TopK", outputs: 2, inputs: []*graph.Tensor{any(2, 4, 3), k(2)}, wrt: []int{0},
			attrs: []*graph.Attr{graph.IntAttr("axis", -2), graph.IntAttr("largest", 0)}},
		{name: "TopK k all", op: "TopK", outputs: 2, inputs: []*graph.Tensor{any(2, 3), k(3)}, wrt: []int{0}},
		// Opset 1-9 TopK takes k as an attribute.
		{name: "TopK opset 9 attribute k", op: "TopK", outputs: 2, opset: 9, inputs: []*graph.Tensor{any(2, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{graph.IntAttr("k", 2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradNormTopKUnnamedIndices(t *testing.T) {
	// A TopK node that leaves its indices output unnamed is run again in
	// the backward graph; the gradient goes to the selected elements.
	x := graph.FromFloat64([]float64{1, 5, 3, 4, 2, 0}, 2, 3)
	g := graph.NewGraph("topk")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g.Initializers["k"] = graph.FromInt64([]int64{1}, 1)
	g.Nodes = []*graph.Node{
		{Name: "topk", OpType: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"v", ""}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"v"}, Outputs: []string{"loss"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	grads, err := graph.Gradients(g, "loss", []string{"x"}, "", 17)
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: grads[0]}}
	res := kc.runModel(t, g, 17, map[string]*graph.Tensor{"x": x})
	assert.Equal(t, []float64{0, 1, 0, 1, 0, 0}, res[grads[0]].Float64s())
}

// runModel compiles g at opset and runs it once.
func (kc checker) runModel(t *testing.T, g *graph.Graph, opset int64, feeds map[string]*graph.Tensor) map[string]*graph.Tensor {
	t.Helper()
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}, backend.CompileOptions{NoFold: true, Seed: 3})
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	return res
}

// dropoutGraph builds loss = ReduceSum(Dropout(x, ratio, training)·R).
func dropoutGraph(ratio float64, training, nameMask bool, weights *graph.Tensor) *graph.Graph {
	g := graph.NewGraph("dropout")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g.Initializers["ratio"] = graph.Scalar(graph.Float64, ratio)
	g.Initializers["training"] = graph.FromBool([]bool{training})
	g.Initializers["R"] = weights
	mask := ""
	if nameMask {
		mask = "mask"
	}
	g.Nodes = []*graph.Node{
		{Name: "drop", OpType: "Dropout", Inputs: []string{"x", "ratio", "training"}, Outputs: []string{"y", mask}},
		{Name: "mul", OpType: "Mul", Inputs: []string{"y", "R"}, Outputs: []string{"p"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"p"}, Outputs: []string{"loss"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	return g
}

func (kc checker) gradNormDropout(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	t.Run("training uses the mask", func(t *testing.T) {
		x := Rand64(r, 0.5, 2, 8, 16)
		weights := Rand64(r, -1, 1, 8, 16)
		const ratio = 0.3
		g := dropoutGraph(ratio, true, true, weights)
		grads, err := graph.Gradients(g, "loss", []string{"x"}, "", 13)
		require.NoError(t, err)
		g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "mask"}, {Name: grads[0]}}
		res := kc.runModel(t, g, 13, map[string]*graph.Tensor{"x": x})
		mask, y, dx := res["mask"].Bools(), res["y"].Float64s(), res[grads[0]].Float64s()
		kept := 0
		for i, keep := range mask {
			want := 0.0
			if keep {
				kept++
				want = weights.Float64s()[i] / (1 - ratio)
				assert.InDelta(t, x.Float64s()[i]/(1-ratio), y[i], 1e-12, "y[%d]", i)
			}
			assert.InDelta(t, want, dx[i], 1e-12, "dx[%d]", i)
		}
		assert.Greater(t, kept, 0, "some elements are kept")
		assert.Less(t, kept, len(mask), "some elements are dropped")
	})
	t.Run("training_mode false is the identity", func(t *testing.T) {
		x := Rand64(r, -1, 1, 3, 4)
		weights := Rand64(r, -1, 1, 3, 4)
		g := dropoutGraph(0.5, false, true, weights)
		grads, err := graph.Gradients(g, "loss", []string{"x"}, "", 13)
		require.NoError(t, err)
		g.Outputs = []*graph.ValueInfo{{Name: grads[0]}}
		res := kc.runModel(t, g, 13, map[string]*graph.Tensor{"x": x})
		assert.InDeltaSlice(t, weights.Float64s(), res[grads[0]].Float64s(), 1e-12)
	})
	t.Run("training needs the mask output", func(t *testing.T) {
		g := dropoutGraph(0.5, true, false, Rand64(r, -1, 1, 2))
		_, err := graph.Gradients(g, "loss", []string{"x"}, "", 13)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "mask output")
	})
	// Without a training_mode input (and before opset 12) Dropout is the
	// identity.
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	for _, c := range []gradCase{
		{name: "inference opset 13", op: "Dropout", opset: 13, inputs: []*graph.Tensor{any(3, 4), graph.Scalar(graph.Float64, 0.4)}, wrt: []int{0}},
		{name: "opset 10 with mask", op: "Dropout", opset: 10, outputs: 2, inputs: []*graph.Tensor{any(3, 4)}, wrt: []int{0},
			attrs: []*graph.Attr{graph.FloatAttr("ratio", 0.3)}},
		{name: "training_mode false with mask", op: "Dropout", opset: 13, outputs: 2,
			inputs: []*graph.Tensor{any(3, 4), graph.Scalar(graph.Float64, 0.4), graph.FromBool([]bool{false})}, wrt: []int{0}},
	} {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

// gradNormFloat32 checks that the rules and backward kernels give in
// float32 what they give in float64 (the gradient checks run in float64;
// training runs in float32).
func (kc checker) gradNormFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	pos := func(shape ...int) *graph.Tensor { return Rand64(r, 0.5, 2, shape...) }
	labels := graph.FromInt64([]int64{2, 0, 1, 1, 2, 0}, 2, 3)
	cases := []gradCase{
		{name: "Softmax", op: "Softmax", inputs: []*graph.Tensor{any(2, 3, 4)}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntAttr("axis", 1)}},
		{name: "LogSoftmax", op: "LogSoftmax", inputs: []*graph.Tensor{any(3, 4)}, wrt: []int{0}},
		{name: "BatchNormalization training", op: "BatchNormalization", opset: 15, outputs: 3, attrs: []*graph.Attr{graph.IntAttr("training_mode", 1)},
			inputs: []*graph.Tensor{any(3, 2, 4), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 1, 2}},
		{name: "BatchNormalization inference", op: "BatchNormalization", opset: 15,
			inputs: []*graph.Tensor{any(3, 2, 4), any(2), any(2), any(2), pos(2)}, wrt: []int{0, 1, 2, 3, 4}},
		{name: "LayerNormalization", op: "LayerNormalization", attrs: []*graph.Attr{graph.IntAttr("axis", 1)},
			inputs: []*graph.Tensor{any(2, 3, 4), any(4), any(3, 4)}, wrt: []int{0, 1, 2}},
		{name: "InstanceNormalization", op: "InstanceNormalization", inputs: []*graph.Tensor{any(2, 3, 4), any(3), any(3)}, wrt: []int{0, 1, 2}},
		{name: "GroupNormalization", op: "GroupNormalization", opset: 21, attrs: []*graph.Attr{graph.IntAttr("num_groups", 2)},
			inputs: []*graph.Tensor{any(2, 4, 3), any(4), any(4)}, wrt: []int{0, 1, 2}},
		{name: "NegativeLogLikelihoodLoss", op: "NegativeLogLikelihoodLoss", inputs: []*graph.Tensor{any(2, 3, 3), labels, pos(3)}, wrt: []int{0}},
		{name: "SoftmaxCrossEntropyLoss", op: "SoftmaxCrossEntropyLoss", outputs: 2, lossOutputs: []int{0, 1},
			attrs: []*graph.Attr{graph.IntAttr("ignore_index", 1)}, inputs: []*graph.Tensor{any(2, 3, 3), labels, pos(3)}, wrt: []int{0}},
		{name: "CumSum", op: "CumSum", inputs: []*graph.Tensor{any(3, 4), graph.FromInt64([]int64{1})}, wrt: []int{0}},
		{name: "TopK", op: "TopK", outputs: 2, inputs: []*graph.Tensor{any(3, 5), graph.FromInt64([]int64{2}, 1)}, wrt: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := kc.gradsIn(t, c, graph.Float64)
			got := kc.gradsIn(t, c, graph.Float32)
			for i := range want {
				require.Equal(t, graph.Float32, got[i].DType)
				require.Equal(t, want[i].Shape, got[i].Shape)
				for j := 0; j < want[i].Size(); j++ {
					assert.InDelta(t, want[i].Float(j), got[i].Float(j), 1e-4+1e-4*abs(want[i].Float(j)), "gradient %d [%d]", i, j)
				}
			}
		})
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// gradsIn returns the gradients of loss = Σ_k ReduceSum(out_k·R_k) for case
// c with its float inputs converted to dtype d. The weights R_k come from a
// generator seeded the same on every call.
func (kc checker) gradsIn(t *testing.T, c gradCase, d graph.DType) []*graph.Tensor {
	t.Helper()
	cast := func(x *graph.Tensor) *graph.Tensor {
		if x == nil || x.DType != graph.Float64 || d == graph.Float64 {
			return x
		}
		out := graph.Zeros(graph.Float32, x.Shape...)
		for i, v := range x.Float64s() {
			out.Float32s()[i] = float32(v)
		}
		return out
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
		name := ""
		if in != nil {
			name = "in" + string(rune('0'+i))
			g.Initializers[name] = cast(in)
		}
		node.Inputs = append(node.Inputs, name)
	}
	for _, w := range c.wrt {
		name := node.Inputs[w]
		feeds[name] = g.Initializers[name]
		delete(g.Initializers, name)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: d}})
		xs = append(xs, name)
	}
	nout := max(c.outputs, 1)
	for k := 0; k < nout; k++ {
		node.Outputs = append(node.Outputs, "out"+string(rune('0'+k)))
	}
	g.Nodes = []*graph.Node{node}
	lossOuts := c.lossOutputs
	if lossOuts == nil {
		lossOuts = []int{0}
	}
	for _, k := range lossOuts {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: node.Outputs[k]})
	}
	outs := kc.runModel(t, g, opset, feeds)
	wr := rand.New(rand.NewPCG(21, 22))
	loss := ""
	for _, k := range lossOuts {
		o := node.Outputs[k]
		rn, p, s := "R"+o, "prod"+o, "sum"+o
		g.Initializers[rn] = cast(Rand64(wr, -1, 1, outs[o].Shape...))
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: p, OpType: "Mul", Inputs: []string{o, rn}, Outputs: []string{p}},
			&graph.Node{Name: s, OpType: "ReduceSum", Inputs: []string{p}, Outputs: []string{s}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
		if loss == "" {
			loss = s
			continue
		}
		g.Nodes = append(g.Nodes, &graph.Node{Name: "add" + s, OpType: "Add", Inputs: []string{loss, s}, Outputs: []string{"add" + s}})
		loss = "add" + s
	}
	grads, err := graph.Gradients(g, loss, xs, "", opset)
	require.NoError(t, err)
	g.Outputs = nil
	for _, gn := range grads {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: gn})
	}
	res := kc.runModel(t, g, opset, feeds)
	out := make([]*graph.Tensor, len(grads))
	for i, gn := range grads {
		out[i] = res[gn]
	}
	return out
}
