package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// readThenAccumulate: Z = Neg(S) (or, with view, Z = Neg(Reshape(S)) with
// the Neg after the update), then S' = S + G.
func readThenAccumulate(view bool) *graph.Model {
	m := accumulateModel(false)
	g := m.Graph
	shape := "onnxtrain/test/shape"
	g.Initializers[shape] = graph.FromInt64([]int64{3, 1}, 2)
	if view {
		g.Nodes = append([]*graph.Node{{Name: "view", OpType: "Reshape", Inputs: []string{"S", shape}, Outputs: []string{"V"}}}, g.Nodes...)
		g.Nodes = append(g.Nodes, &graph.Node{Name: "neg", OpType: "Neg", Inputs: []string{"V"}, Outputs: []string{"Z"}})
	} else {
		g.Nodes = append([]*graph.Node{{Name: "neg", OpType: "Neg", Inputs: []string{"S"}, Outputs: []string{"Z"}}}, g.Nodes...)
	}
	g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "Z"})
	return m
}

// TestStateUpdatedInPlaceAfterItsReaders: a state that an earlier node
// reads is updated in place (nothing copied), and the reader saw the old
// value; a reader of a view of the state placed after the update makes it
// a copy again, with the same results.
func TestStateUpdatedInPlaceAfterItsReaders(t *testing.T) {
	for _, view := range []bool{false, true} {
		be := &Backend{}
		s := graph.FromFloat32([]float32{1, 2, 3}, 3)
		exe, err := be.Compile(readThenAccumulate(view), backend.CompileOptions{State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "S_new"}}})
		require.NoError(t, err)
		for range 2 {
			old := s.Float32s()[2]
			out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{false}}, "G": graph.FromFloat32([]float32{1, 1, 1}, 3)})
			require.NoError(t, err)
			assert.Equal(t, -old, out["Z"].Float32s()[2], "view=%v: Neg read the value before the update", view)
		}
		assert.Equal(t, []float32{3, 4, 5}, s.Float32s())
		want := int64(0)
		if view {
			want = 24 // two runs' copies of 12 bytes
		}
		assert.Equal(t, want, exe.(backend.Stateful).StateTraffic().UpdateCopyBytes, "view=%v", view)
	}
}
