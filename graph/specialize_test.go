package graph_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/models"
)

// attentionReshape builds x [B, S, 768] → Reshape(x, Concat(Unsqueeze(
// Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [12, 64])) → Relu.
func attentionReshape() *graph.Graph {
	g := graph.NewGraph("attn")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, param("B"), param("S"), graph.Dim{Value: 768, Known: true}))}
	g.Outputs = []*graph.ValueInfo{{Name: "out"}}
	g.Initializers["i0"] = graph.FromInt64([]int64{0})
	g.Initializers["i1"] = graph.FromInt64([]int64{1})
	g.Nodes = []*graph.Node{
		{Name: "shape", OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"shape"}},
		{Name: "g0", OpType: "Gather", Inputs: []string{"shape", "i0"}, Outputs: []string{"b"}, Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", 0)}},
		{Name: "g1", OpType: "Gather", Inputs: []string{"shape", "i1"}, Outputs: []string{"s"}},
		{Name: "ax", OpType: "Constant", Outputs: []string{"ax"}, Attrs: map[string]*graph.Attr{"value": graph.TensorAttr("value", graph.FromInt64([]int64{0}, 1))}},
		{Name: "u0", OpType: "Unsqueeze", Inputs: []string{"b", "ax"}, Outputs: []string{"b1"}},
		{Name: "u1", OpType: "Unsqueeze", Inputs: []string{"s", "ax"}, Outputs: []string{"s1"}},
		{Name: "heads", OpType: "Constant", Outputs: []string{"heads"}, Attrs: map[string]*graph.Attr{"value_ints": {Name: "value_ints", Type: graph.AttrInts, Ints: []int64{12, 64}}}},
		{Name: "cat", OpType: "Concat", Inputs: []string{"b1", "s1", "heads"}, Outputs: []string{"target"}, Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", 0)}},
		{Name: "reshape", OpType: "Reshape", Inputs: []string{"x", "target"}, Outputs: []string{"y"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"out"}},
	}
	return g
}

func TestSpecializeFoldsShapeChain(t *testing.T) {
	g := attentionReshape()
	before := len(g.Nodes)
	sg, err := graph.Specialize(g, 17, map[string][]int{"x": {2, 5, 768}}, nil)
	require.NoError(t, err)

	var ops []string
	var reshape *graph.Node
	for _, n := range sg.Nodes {
		ops = append(ops, n.OpType)
		if n.OpType == "Reshape" {
			reshape = n
		}
	}
	assert.Equal(t, []string{"Reshape", "Relu"}, ops)
	require.NotNil(t, reshape)
	target := sg.Initializers[reshape.Inputs[1]]
	require.NotNil(t, target, "the reshape target is a constant")
	assert.Equal(t, graph.Int64, target.DType)
	assert.Equal(t, []int{4}, target.Shape)
	assert.Equal(t, []int64{2, 5, 12, 64}, target.Int64s())
	assert.Equal(t, "float32[2,5,12,64]", sg.ValueInfo["out"].Type.String())
	assert.Equal(t, "float32[2,5,768]", sg.Inputs[0].Type.String())

	// The caller's graph is untouched.
	assert.Len(t, g.Nodes, before)
	assert.Equal(t, "Shape", g.Nodes[0].OpType)
	assert.NotContains(t, g.Initializers, "target")
	assert.Equal(t, "float32[B,S,768]", g.Inputs[0].Type.String())
}

func TestSpecializeUsesEvaluatorForTheRest(t *testing.T) {
	g := attentionReshape()
	// A constant subgraph that only an evaluator can fold.
	g.Initializers["w"] = graph.FromFloat32([]float32{1, -2}, 2)
	g.Nodes = append(g.Nodes, &graph.Node{Name: "negw", OpType: "Neg", Inputs: []string{"w"}, Outputs: []string{"nw"}})
	g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "nw"})
	calls := 0
	eval := func(n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		calls++
		if n.OpType != "Neg" {
			return nil, graph.ErrUnsupportedOp
		}
		src := in[0].Float32s()
		out := make([]float32, len(src))
		for i, v := range src {
			out[i] = -v
		}
		return []*graph.Tensor{graph.FromFloat32(out, len(out))}, nil
	}
	sg, err := graph.Specialize(g, 17, map[string][]int{"x": {1, 3, 768}}, eval)
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	require.Contains(t, sg.Initializers, "nw")
	assert.Equal(t, []float32{-1, 2}, sg.Initializers["nw"].Float32s())
	assert.Len(t, sg.Nodes, 2)
}

func TestSpecializeRejectsBadShapes(t *testing.T) {
	g := attentionReshape()
	_, err := graph.Specialize(g, 17, map[string][]int{"x": {2, 5, 100}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `input "x"`)

	_, err = graph.Specialize(g, 17, map[string][]int{"x": {2, 768}}, nil)
	require.Error(t, err)

	_, err = graph.Specialize(g, 17, map[string][]int{"y": {2}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not an input")
	// A graph of many inputs names the first few and counts the rest.
	for i := range 20 {
		g.Inputs = append(g.Inputs, input(fmt.Sprintf("w%d", i), tensorType(graph.Float32, graph.Dim{Value: 3, Known: true})))
	}
	_, err = graph.Specialize(g, 17, map[string][]int{"y": {2}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(inputs: [x w0 w1 w2 w3 w4 w5 w6 and 13 more])")
	assert.NotContains(t, err.Error(), "w7")
	g.Inputs = g.Inputs[:len(g.Inputs)-20]

	// A symbolic dim bound to two sizes.
	g.Inputs = append(g.Inputs, input("mask", tensorType(graph.Float32, param("B"), param("S"))))
	_, err = graph.Specialize(g, 17, map[string][]int{"x": {2, 5, 768}, "mask": {3, 5}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "B")

	// A MatMul whose inner dims differ for these shapes.
	mm := graph.NewGraph("mm")
	mm.Inputs = []*graph.ValueInfo{
		input("a", tensorType(graph.Float32, param("N"), param("K"))),
		input("b", tensorType(graph.Float32, param("K2"), param("M"))),
	}
	mm.Outputs = []*graph.ValueInfo{{Name: "c"}}
	mm.Nodes = []*graph.Node{{Name: "proj", OpType: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"c"}}}
	_, err = graph.Specialize(mm, 17, map[string][]int{"a": {2, 3}, "b": {4, 5}}, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, graph.ErrShapeMismatch)
	assert.Contains(t, err.Error(), `"proj" (MatMul)`)
	sg, err := graph.Specialize(mm, 17, map[string][]int{"a": {2, 3}, "b": {3, 5}}, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[2,5]", sg.ValueInfo["c"].Type.String())
}

func TestShapeKey(t *testing.T) {
	k1 := graph.ShapeKey(map[string][]int{"b": {2}, "a": {1, 3}, "s": {}})
	k2 := graph.ShapeKey(graph.InputShapes(map[string]*graph.Tensor{
		"a": graph.Zeros(graph.Float32, 1, 3), "b": graph.Zeros(graph.Int64, 2), "s": graph.Zeros(graph.Float32),
	}))
	assert.Equal(t, k1, k2)
	assert.NotEqual(t, k1, graph.ShapeKey(map[string][]int{"b": {2}, "a": {3, 1}, "s": {}}))
}

// TestSpecializeCommittedModels specialises the PyTorch exports in models/
// to their golden inputs' shapes: no shape computation may remain, and every
// output gets a complete type.
func TestSpecializeCommittedModels(t *testing.T) {
	for _, m := range models.All {
		golden, err := models.LoadGolden(m.GoldenPath())
		if err != nil {
			t.Logf("%s: no golden values (%v)", m.Name, err)
			continue
		}
		shapes := map[string][]int{}
		for _, in := range m.Inputs {
			require.Contains(t, golden, in)
			shapes[in] = golden[in].Shape
		}
		for _, kind := range m.Exports {
			t.Run(m.Name+"/"+kind, func(t *testing.T) {
				model, err := importer.Load(m.Path(kind))
				require.NoError(t, err)
				g := model.Graph
				require.NoError(t, graph.InlineFunctions(g, model.Functions))
				shapeOps := func(g *graph.Graph) int {
					c := 0
					for _, n := range g.Nodes {
						if n.OpType == "Shape" || n.OpType == "Size" {
							c++
						}
					}
					return c
				}
				sg, err := graph.Specialize(g, model.Opset(), shapes, nil)
				require.NoError(t, err)
				assert.Zero(t, shapeOps(sg), "Shape/Size nodes left (of %d)", shapeOps(g))
				for _, o := range sg.Outputs {
					vi := sg.ValueInfo[o.Name]
					require.NotNil(t, vi, "output %s has no inferred type", o.Name)
					assert.True(t, complete(vi.Type), "output %s: %v", o.Name, vi.Type)
					if want := golden[o.Name]; want != nil && kind == models.Eval {
						assert.Equal(t, exactType(want).String(), vi.Type.String(), "output %s", o.Name)
					}
				}
				t.Logf("%d nodes (%d Shape/Size) → %d nodes", len(g.Nodes), shapeOps(g), len(sg.Nodes))
			})
		}
	}
}
