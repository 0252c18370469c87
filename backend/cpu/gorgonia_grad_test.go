package cpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/graph"
)

// An independent check of our autodiff: gorgonia's symbolic
// differentiation (gorgonia.org/gorgonia, another project's gradient rules
// and kernels) computes the gradients of loss = Σ op(x…)·R for the ops it
// shares with ONNX, in float64, and ours must agree to rounding.

// gorgoniaCase is one op: its ONNX form (op, attributes, constant inputs
// after the differentiated ones) and the same function built in gorgonia.
type gorgoniaCase struct {
	name   string
	op     string
	attrs  []*graph.Attr
	consts []*graph.Tensor // extra ONNX inputs (axes), not differentiated
	inputs []*graph.Tensor // differentiated inputs
	build  func(g *G.ExprGraph, xs []*G.Node) (*G.Node, error)
}

// oursGrads returns loss and d loss / d inputs by onnxtrain's autodiff and
// CPU backend, for loss = ReduceSum(op(inputs…) * R).
func oursGrads(t *testing.T, c gorgoniaCase, r *graph.Tensor) (float64, []*graph.Tensor) {
	t.Helper()
	g := graph.NewGraph(c.name)
	node := &graph.Node{Name: "op", OpType: c.op, Outputs: []string{"y"}}
	for _, a := range c.attrs {
		node.SetAttr(a)
	}
	var xs []string
	feeds := map[string]*graph.Tensor{}
	for i, in := range c.inputs {
		name := fmt.Sprintf("x%d", i)
		node.Inputs = append(node.Inputs, name)
		xs = append(xs, name)
		feeds[name] = in
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}})
	}
	for i, k := range c.consts {
		name := fmt.Sprintf("k%d", i)
		node.Inputs = append(node.Inputs, name)
		g.Initializers[name] = k
	}
	g.Initializers["R"] = r
	g.Nodes = append(g.Nodes, node,
		&graph.Node{Name: "prod", OpType: "Mul", Inputs: []string{"y", "R"}, Outputs: []string{"prod"}},
		&graph.Node{Name: "loss", OpType: "ReduceSum", Inputs: []string{"prod"}, Outputs: []string{"loss"},
			Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
	g.Outputs = []*graph.ValueInfo{{Name: "loss"}}
	grads, err := graph.Gradients(g, "loss", xs, "", 17)
	require.NoError(t, err)
	for i, gn := range grads {
		out := fmt.Sprintf("grad%d", i)
		g.Nodes = append(g.Nodes, &graph.Node{Name: "id" + out, OpType: "Identity", Inputs: []string{gn}, Outputs: []string{out}})
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: out})
	}
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	exe, err := b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}, backend.CompileOptions{})
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	out := make([]*graph.Tensor, len(grads))
	for i := range grads {
		out[i] = res[fmt.Sprintf("grad%d", i)]
	}
	return res["loss"].Float(0), out
}

// gorgoniaGrads returns loss and its gradients by gorgonia for the same
// function.
func gorgoniaGrads(t *testing.T, c gorgoniaCase, r *graph.Tensor) (float64, [][]float64) {
	t.Helper()
	g := G.NewGraph()
	val := func(x *graph.Tensor) tensor.Tensor {
		return tensor.New(tensor.WithShape(x.Shape...), tensor.WithBacking(append([]float64(nil), x.Float64s()...)))
	}
	xs := make([]*G.Node, len(c.inputs))
	for i, in := range c.inputs {
		xs[i] = G.NewTensor(g, tensor.Float64, len(in.Shape), G.WithShape(in.Shape...), G.WithName(fmt.Sprintf("x%d", i)), G.WithValue(val(in)))
	}
	y, err := c.build(g, xs)
	require.NoError(t, err)
	rn := G.NewTensor(g, tensor.Float64, len(r.Shape), G.WithShape(r.Shape...), G.WithName("R"), G.WithValue(val(r)))
	prod, err := G.HadamardProd(y, rn)
	require.NoError(t, err)
	loss, err := G.Sum(prod)
	require.NoError(t, err)
	grads, err := G.Grad(loss, xs...)
	require.NoError(t, err)
	m := G.NewTapeMachine(g)
	defer m.Close()
	require.NoError(t, m.RunAll())
	out := make([][]float64, len(grads))
	for i, gn := range grads {
		out[i] = append([]float64(nil), gn.Value().Data().([]float64)...)
	}
	return loss.Value().Data().(float64), out
}

func TestGradientsMatchGorgonia(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	away := func(lo, hi float64, shape ...int) *graph.Tensor {
		// Values kept off 0, where Relu's derivative is a convention.
		x := backendtest.Rand64(r, lo, hi, shape...)
		for i, v := range x.Float64s() {
			if math.Abs(v) < 0.05 {
				x.Float64s()[i] = 0.05 + v
			}
		}
		return x
	}
	unary := func(f func(*G.Node) (*G.Node, error)) func(*G.ExprGraph, []*G.Node) (*G.Node, error) {
		return func(_ *G.ExprGraph, xs []*G.Node) (*G.Node, error) { return f(xs[0]) }
	}
	binary := func(f func(a, b *G.Node) (*G.Node, error)) func(*G.ExprGraph, []*G.Node) (*G.Node, error) {
		return func(_ *G.ExprGraph, xs []*G.Node) (*G.Node, error) { return f(xs[0], xs[1]) }
	}
	cases := []gorgoniaCase{
		{name: "MatMul", op: "MatMul", inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 4), backendtest.Rand64(r, -1, 1, 4, 5)},
			build: binary(func(a, b *G.Node) (*G.Node, error) { return G.Mul(a, b) })},
		{name: "Add", op: "Add", inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 4), backendtest.Rand64(r, -1, 1, 3, 4)}, build: binary(G.Add)},
		{name: "Sub", op: "Sub", inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 4), backendtest.Rand64(r, -1, 1, 3, 4)}, build: binary(G.Sub)},
		{name: "Mul", op: "Mul", inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 4), backendtest.Rand64(r, -1, 1, 3, 4)}, build: binary(G.HadamardProd)},
		{name: "Div", op: "Div", inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 4), backendtest.Rand64(r, 0.5, 2, 3, 4)}, build: binary(G.HadamardDiv)},
		{name: "Tanh", op: "Tanh", inputs: []*graph.Tensor{backendtest.Rand64(r, -2, 2, 3, 4)}, build: unary(G.Tanh)},
		{name: "Sigmoid", op: "Sigmoid", inputs: []*graph.Tensor{backendtest.Rand64(r, -3, 3, 3, 4)}, build: unary(G.Sigmoid)},
		{name: "Exp", op: "Exp", inputs: []*graph.Tensor{backendtest.Rand64(r, -2, 2, 3, 4)}, build: unary(G.Exp)},
		{name: "Log", op: "Log", inputs: []*graph.Tensor{backendtest.Rand64(r, 0.2, 3, 3, 4)}, build: unary(G.Log)},
		{name: "Sqrt", op: "Sqrt", inputs: []*graph.Tensor{backendtest.Rand64(r, 0.2, 3, 3, 4)}, build: unary(G.Sqrt)},
		{name: "Relu", op: "Relu", inputs: []*graph.Tensor{away(-1, 1, 3, 4)}, build: unary(G.Rectify)},
		{name: "Softmax", op: "Softmax", attrs: []*graph.Attr{graph.IntAttr("axis", -1)}, inputs: []*graph.Tensor{backendtest.Rand64(r, -2, 2, 3, 5)},
			build: unary(func(x *G.Node) (*G.Node, error) { return G.SoftMax(x) })},
		{name: "ReduceSum", op: "ReduceSum", attrs: []*graph.Attr{graph.IntAttr("keepdims", 0)}, consts: []*graph.Tensor{graph.FromInt64([]int64{1}, 1)},
			inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 5)},
			build:  unary(func(x *G.Node) (*G.Node, error) { return G.Sum(x, 1) })},
		{name: "ReduceMean", op: "ReduceMean", attrs: []*graph.Attr{graph.IntsAttr("axes", 0), graph.IntAttr("keepdims", 0)},
			inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 3, 5)},
			build:  unary(func(x *G.Node) (*G.Node, error) { return G.Mean(x, 0) })},
		{name: "Conv", op: "Conv", attrs: []*graph.Attr{graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("pads", 1, 1, 1, 1), graph.IntsAttr("strides", 1, 1)},
			inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 2, 3, 6, 5), backendtest.Rand64(r, -1, 1, 4, 3, 3, 3)},
			build: binary(func(x, w *G.Node) (*G.Node, error) {
				return G.Conv2d(x, w, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})
			})},
		{name: "Conv/stride2", op: "Conv", attrs: []*graph.Attr{graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("pads", 0, 0, 0, 0), graph.IntsAttr("strides", 2, 2)},
			inputs: []*graph.Tensor{backendtest.Rand64(r, -1, 1, 2, 2, 7, 7), backendtest.Rand64(r, -1, 1, 3, 2, 3, 3)},
			build: binary(func(x, w *G.Node) (*G.Node, error) {
				return G.Conv2d(x, w, tensor.Shape{3, 3}, []int{0, 0}, []int{2, 2}, []int{1, 1})
			})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The output shape, for R: run the op once without gradients.
			probe, _ := oursForward(t, c)
			rt := backendtest.Rand64(r, -1, 1, probe.Shape...)
			lossO, ours := oursGrads(t, c, rt)
			lossG, theirs := gorgoniaGrads(t, c, rt)
			require.InDelta(t, lossG, lossO, 1e-12*math.Max(1, math.Abs(lossG)), "loss")
			require.Len(t, ours, len(theirs))
			for i := range ours {
				got := ours[i].Float64s()
				require.Len(t, got, len(theirs[i]), "gradient %d", i)
				for j := range got {
					if d := math.Abs(got[j] - theirs[i][j]); d > 1e-12*math.Max(1, math.Abs(theirs[i][j])) {
						t.Errorf("d loss / d x%d[%d]: ours %.17g, gorgonia %.17g", i, j, got[j], theirs[i][j])
					}
				}
			}
		})
	}
}

// oursForward runs the op alone and returns its output.
func oursForward(t *testing.T, c gorgoniaCase) (*graph.Tensor, error) {
	t.Helper()
	g := graph.NewGraph(c.name)
	node := &graph.Node{Name: "op", OpType: c.op, Outputs: []string{"y"}}
	for _, a := range c.attrs {
		node.SetAttr(a)
	}
	feeds := map[string]*graph.Tensor{}
	for i, in := range c.inputs {
		name := fmt.Sprintf("x%d", i)
		node.Inputs = append(node.Inputs, name)
		feeds[name] = in
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}})
	}
	for i, k := range c.consts {
		name := fmt.Sprintf("k%d", i)
		node.Inputs = append(node.Inputs, name)
		g.Initializers[name] = k
	}
	g.Nodes = []*graph.Node{node}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}}
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	exe, err := b.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}, backend.CompileOptions{})
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)
	return res["y"], nil
}
