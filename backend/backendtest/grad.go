package backendtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// gradCase is one finite-difference check: a single node applied to inputs,
// differentiated with respect to the inputs listed in wrt.
type gradCase struct {
	name   string
	op     string
	attrs  []*graph.Attr
	inputs []*graph.Tensor // nil entries are omitted optional inputs
	wrt    []int
	// outputs is the number of node outputs (default 1); the loss uses
	// output 0 unless lossOutputs lists others.
	outputs     int
	lossOutputs []int
	opset       int64
	// lower runs graph.LowerForAutodiff before autodiff (as training
	// does), with the inputs' shapes known: for ops differentiated through
	// their lowering.
	lower bool
}

// Rand64 returns a float64 tensor with entries in [lo, hi).
func Rand64(r *rand.Rand, lo, hi float64, shape ...int) *graph.Tensor {
	t := graph.Zeros(graph.Float64, shape...)
	for i := range t.Float64s() {
		t.Float64s()[i] = lo + (hi-lo)*r.Float64()
	}
	return t
}

// runGradCheck builds loss = sum_k ReduceSum(out_k * R_k) with fixed random
// R_k, computes the gradient with autodiff and compares it with central
// differences in float64.
func (kc checker) runGradCheck(t *testing.T, c gradCase) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 11))
	g := graph.NewGraph(c.name)
	node := &graph.Node{Name: "op", OpType: c.op}
	for _, a := range c.attrs {
		node.SetAttr(a)
	}
	for i, in := range c.inputs {
		if in == nil {
			node.Inputs = append(node.Inputs, "")
			continue
		}
		name := fmt.Sprintf("in%d", i)
		node.Inputs = append(node.Inputs, name)
		isWrt := false
		for _, w := range c.wrt {
			isWrt = isWrt || w == i
		}
		if isWrt {
			typ := &graph.Type{Kind: graph.KindTensor, DType: in.DType}
			if c.lower {
				typ.HasShape = true
				for _, d := range in.Shape {
					typ.Shape = append(typ.Shape, graph.Dim{Value: int64(d), Known: true})
				}
			}
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typ})
		} else {
			g.Initializers[name] = in
		}
	}
	nout := c.outputs
	if nout == 0 {
		nout = 1
	}
	for k := 0; k < nout; k++ {
		node.Outputs = append(node.Outputs, fmt.Sprintf("out%d", k))
	}
	g.Nodes = append(g.Nodes, node)
	lossOuts := c.lossOutputs
	if lossOuts == nil {
		lossOuts = []int{0}
	}
	// The weights R_k need the output shapes: run the forward once.
	opset := c.opset
	if opset == 0 {
		opset = 17
	}
	fwd := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}
	for _, k := range lossOuts {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: fmt.Sprintf("out%d", k)})
	}
	feeds := map[string]*graph.Tensor{}
	for _, w := range c.wrt {
		feeds[fmt.Sprintf("in%d", w)] = c.inputs[w]
	}
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	exe, err := b.Compile(fwd, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	outs, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)

	var terms []string
	for _, k := range lossOuts {
		o := outs[fmt.Sprintf("out%d", k)]
		require.Equal(t, graph.Float64, o.DType, "gradient checks run in float64")
		rk := Rand64(r, -1, 1, o.Shape...)
		rn := fmt.Sprintf("R%d", k)
		g.Initializers[rn] = rk
		p := fmt.Sprintf("prod%d", k)
		s := fmt.Sprintf("sum%d", k)
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: p, OpType: "Mul", Inputs: []string{fmt.Sprintf("out%d", k), rn}, Outputs: []string{p}},
			&graph.Node{Name: s, OpType: "ReduceSum", Inputs: []string{p}, Outputs: []string{s}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
		terms = append(terms, s)
	}
	loss := terms[0]
	for i, s := range terms[1:] {
		name := fmt.Sprintf("loss%d", i)
		g.Nodes = append(g.Nodes, &graph.Node{Name: name, OpType: "Add", Inputs: []string{loss, s}, Outputs: []string{name}})
		loss = name
	}
	g.Outputs = []*graph.ValueInfo{{Name: loss}}
	var xs []string
	for _, w := range c.wrt {
		xs = append(xs, fmt.Sprintf("in%d", w))
	}
	if c.lower {
		require.NoError(t, graph.LowerForAutodiff(g, opset))
	}
	grads, err := graph.Gradients(g, loss, xs, "", opset)
	require.NoError(t, err)
	for i, gname := range grads {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: fmt.Sprintf("grad%d", i)})
		g.Nodes = append(g.Nodes, &graph.Node{Name: "id" + gname, OpType: "Identity", Inputs: []string{gname}, Outputs: []string{fmt.Sprintf("grad%d", i)}})
	}
	exe, err = b.Compile(fwd, backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	res, err := exe.Run(context.Background(), feeds)
	require.NoError(t, err)

	lossAt := func() float64 {
		out, err := exe.Run(context.Background(), feeds)
		require.NoError(t, err)
		return out[loss].Float(0)
	}
	const eps = 1e-6
	for i, w := range c.wrt {
		x := c.inputs[w]
		analytic := res[fmt.Sprintf("grad%d", i)]
		require.Equal(t, x.Shape, analytic.Shape, "%s: gradient of input %d has the wrong shape", c.name, w)
		data := x.Float64s()
		for j := range data {
			orig := data[j]
			data[j] = orig + eps
			up := lossAt()
			data[j] = orig - eps
			down := lossAt()
			data[j] = orig
			numeric := (up - down) / (2 * eps)
			got := analytic.Float(j)
			if math.Abs(got-numeric) > 1e-5+1e-4*math.Abs(numeric) {
				t.Errorf("%s: d loss / d in%d[%d] = %.9g by autodiff, %.9g by finite differences", c.name, w, j, got, numeric)
			}
		}
	}
}

func (kc checker) gradElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pos := func(shape ...int) *graph.Tensor { return Rand64(r, 0.5, 2, shape...) }
	any := func(shape ...int) *graph.Tensor { return Rand64(r, -2, 2, shape...) }
	cases := []gradCase{
		{name: "Add broadcast", op: "Add", inputs: []*graph.Tensor{any(2, 3), any(3)}, wrt: []int{0, 1}},
		{name: "Sub broadcast", op: "Sub", inputs: []*graph.Tensor{any(2, 1, 3), any(4, 1)}, wrt: []int{0, 1}},
		{name: "Mul", op: "Mul", inputs: []*graph.Tensor{any(2, 3), any(2, 3)}, wrt: []int{0, 1}},
		{name: "Div", op: "Div", inputs: []*graph.Tensor{any(2, 3), pos(3)}, wrt: []int{0, 1}},
		{name: "Pow", op: "Pow", inputs: []*graph.Tensor{pos(2, 3), any(3)}, wrt: []int{0, 1}},
		{name: "Neg", op: "Neg", inputs: []*graph.Tensor{any(5)}, wrt: []int{0}},
		{name: "Exp", op: "Exp", inputs: []*graph.Tensor{any(5)}, wrt: []int{0}},
		{name: "Log", op: "Log", inputs: []*graph.Tensor{pos(5)}, wrt: []int{0}},
		{name: "Sqrt", op: "Sqrt", inputs: []*graph.Tensor{pos(5)}, wrt: []int{0}},
		{name: "Reciprocal", op: "Reciprocal", inputs: []*graph.Tensor{pos(5)}, wrt: []int{0}},
		{name: "Tanh", op: "Tanh", inputs: []*graph.Tensor{any(5)}, wrt: []int{0}},
		{name: "Sigmoid", op: "Sigmoid", inputs: []*graph.Tensor{any(5)}, wrt: []int{0}},
		{name: "Erf", op: "Erf", inputs: []*graph.Tensor{any(5)}, wrt: []int{0}},
		{name: "Relu", op: "Relu", inputs: []*graph.Tensor{any(7)}, wrt: []int{0}},
		{name: "Abs", op: "Abs", inputs: []*graph.Tensor{any(7)}, wrt: []int{0}},
		{name: "Sin", op: "Sin", inputs: []*graph.Tensor{any(4)}, wrt: []int{0}},
		{name: "Cos", op: "Cos", inputs: []*graph.Tensor{any(4)}, wrt: []int{0}},
		{name: "Max", op: "Max", inputs: []*graph.Tensor{any(2, 3), any(3)}, wrt: []int{0, 1}},
		{name: "Min", op: "Min", inputs: []*graph.Tensor{any(2, 3), any(2, 3)}, wrt: []int{0, 1}},
		{name: "Where", op: "Where", inputs: []*graph.Tensor{graph.FromBool([]bool{true, false, true}, 3), any(2, 3), any(1)}, wrt: []int{1, 2}},
		{name: "Identity", op: "Identity", inputs: []*graph.Tensor{any(3)}, wrt: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}

func (kc checker) gradReduce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := func() *graph.Tensor { return Rand64(r, -2, 2, 2, 3, 4) }
	axes := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	keep := func(k int64) *graph.Attr { return graph.IntAttr("keepdims", k) }
	cases := []gradCase{
		{name: "ReduceSum all", op: "ReduceSum", inputs: []*graph.Tensor{x()}, wrt: []int{0}, attrs: []*graph.Attr{keep(0)}},
		{name: "ReduceSum axes keepdims", op: "ReduceSum", inputs: []*graph.Tensor{x(), axes(1)}, wrt: []int{0}},
		{name: "ReduceSum negative axes", op: "ReduceSum", inputs: []*graph.Tensor{x(), axes(-1, 0)}, wrt: []int{0}, attrs: []*graph.Attr{keep(0)}},
		{name: "ReduceMean attr axes", op: "ReduceMean", inputs: []*graph.Tensor{x()}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntsAttr("axes", 2), keep(0)}},
		{name: "ReduceMean all", op: "ReduceMean", inputs: []*graph.Tensor{x()}, wrt: []int{0}},
		{name: "ReduceMax", op: "ReduceMax", inputs: []*graph.Tensor{x()}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntsAttr("axes", 1)}},
		{name: "ReduceMin", op: "ReduceMin", inputs: []*graph.Tensor{x()}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntsAttr("axes", 0, 2), keep(0)}},
		{name: "ReduceProd", op: "ReduceProd", inputs: []*graph.Tensor{Rand64(r, 0.5, 1.5, 2, 3)}, wrt: []int{0}, attrs: []*graph.Attr{graph.IntsAttr("axes", 1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { kc.runGradCheck(t, c) })
	}
}
