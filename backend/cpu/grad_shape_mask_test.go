package cpu_test

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

// TestGradThroughShapeBuiltMask: a mask built from Shape(x) by
// ConstantOfShape, ScatterND and a comparison (how torchvision's Swin
// exports its shifted-window attention mask) is a constant to autodiff,
// though ScatterND and Equal have no gradient rules: the loss
// sum((x + mask) * Where(mask == 0, x, 2x)) differentiates, and its gradient
// matches finite differences.
func TestGradThroughShapeBuiltMask(t *testing.T) {
	g := graph.NewGraph("mask")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}}}
	g.Initializers["idx"] = graph.FromInt64([]int64{0, 1, 1, 2}, 2, 2)
	g.Initializers["upd"] = &graph.Tensor{DType: graph.Float64, Shape: []int{2}, Data: []float64{5, -3}}
	g.Initializers["zero"] = &graph.Tensor{DType: graph.Float64, Data: []float64{0}}
	g.Initializers["two"] = &graph.Tensor{DType: graph.Float64, Data: []float64{2}}
	node := func(op string, in []string, out string, attrs ...*graph.Attr) {
		n := &graph.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}}
		for _, a := range attrs {
			n.SetAttr(a)
		}
		g.Nodes = append(g.Nodes, n)
	}
	node("Shape", []string{"x"}, "s")
	node("ConstantOfShape", []string{"s"}, "m0", graph.TensorAttr("value", &graph.Tensor{DType: graph.Float64, Shape: []int{1}, Data: []float64{0}}))
	node("ScatterND", []string{"m0", "idx", "upd"}, "m")
	node("Equal", []string{"m", "zero"}, "open")
	node("Mul", []string{"x", "two"}, "x2")
	node("Where", []string{"open", "x", "x2"}, "w")
	node("Add", []string{"x", "m"}, "a")
	node("Mul", []string{"a", "w"}, "p")
	node("ReduceSum", []string{"p"}, "loss", graph.IntAttr("keepdims", 0))
	g.Outputs = []*graph.ValueInfo{{Name: "loss"}}
	grads, err := graph.Gradients(g, "loss", []string{"x"}, "", 17)
	require.NoError(t, err, "a mask built from Shape(x) needs no gradient rule")
	g.Nodes = append(g.Nodes, &graph.Node{Name: "dx", OpType: "Identity", Inputs: []string{grads[0]}, Outputs: []string{"dx"}})
	g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "dx"})

	b, err := backend.Open("cpu")
	require.NoError(t, err)
	exe, err := b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	x := backendtest.Rand64(rand.New(rand.NewPCG(3, 4)), -1, 1, 2, 3)
	feeds := map[string]*graph.Tensor{"x": x}
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	dx := res["dx"]
	require.Equal(t, []int{2, 3}, dx.Shape)
	data := x.Float64s()
	const eps = 1e-6
	for j := range data {
		orig := data[j]
		data[j] = orig + eps
		up, err := exe.Run(context.Background(), feeds)
		require.NoError(t, err)
		u := up["loss"].Float(0)
		data[j] = orig - eps
		down, err := exe.Run(context.Background(), feeds)
		require.NoError(t, err)
		numeric := (u - down["loss"].Float(0)) / (2 * eps)
		data[j] = orig
		assert.InDelta(t, numeric, dx.Float(j), 1e-6+1e-6*math.Abs(numeric), "d loss / d x[%d]", j)
	}
}
