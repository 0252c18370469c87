package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/optimizer"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestProductUpdateBufferInShapePlan: the gradient buffer an
// SGDUpdateProduct takes from the step's memory plan (the whole 3000×40
// gradient here, one block) is in the plan from shapes too, so that the
// two peaks agree: X's updated copy and the buffer, alive at once.
func TestProductUpdateBufferInShapePlan(t *testing.T) {
	const m, k, cols = 16, 3000, 40
	ty := func(s ...int64) *graph.Type {
		t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true}
		for _, d := range s {
			t.Shape = append(t.Shape, graph.Dim{Known: true, Value: d})
		}
		return t
	}
	g := graph.NewGraph("upd")
	g.Inputs = []*graph.ValueInfo{{Name: "c", Type: ty(2)}, {Name: "h", Type: ty(1, 3)}, {Name: "a", Type: ty(m, k)}, {Name: "x", Type: ty(k, cols)}, {Name: "dy", Type: ty(m, cols)}}
	g.Outputs = []*graph.ValueInfo{{Name: "x1", Type: ty(k, cols)}}
	g.Nodes = []*graph.Node{{Name: "upd", OpType: graph.SGDUpdateProductOp, Domain: graph.InternalDomain,
		Inputs: []string{"c", "h", "a", "x", "dy"}, Outputs: []string{"x1"}, Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}}
	m0 := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	exe, err := (&Backend{}).Compile(m0, backend.CompileOptions{})
	require.NoError(t, err)
	in := map[string]*graph.Tensor{
		"c": graph.FromFloat32([]float32{0, 1}, 2), "h": graph.FromFloat32([]float32{-0.1, 0, 0}, 1, 3),
		"a": graph.Zeros(graph.Float32, m, k), "x": graph.Zeros(graph.Float32, k, cols), "dy": graph.Zeros(graph.Float32, m, cols),
	}
	for range 2 {
		_, err = exe.Run(context.Background(), in)
		require.NoError(t, err)
	}
	recorded := exe.(backend.PeakReporter).PeakBytes()
	plan, err := exe.(*Executable).PlanMemoryFromShapes(map[string][]int{"c": {2}, "h": {1, 3}, "a": {m, k}, "x": {k, cols}, "dy": {m, cols}})
	require.NoError(t, err)
	buffer := int64(4 * optimizer.ProductBufferElems(k, cols, m))
	require.Equal(t, int64(4*k*cols), buffer, "one block holds the whole gradient")
	assert.Equal(t, recorded, plan.PeakBytes, "recorded against planned from shapes")
	assert.GreaterOrEqual(t, plan.PeakBytes, 4*int64(k*cols)+buffer, "X's copy and the buffer")
}
