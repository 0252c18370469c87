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

// TestTransientClipInPlace: an optimizer-step op that replaces a value of
// the run (a gradient clipped before its update) writes into it when
// nothing else reads the value or what it is a view of; a later reader
// makes it a copy. The results are the same.
func TestTransientClipInPlace(t *testing.T) {
	for _, alsoRead := range []bool{false, true} {
		g := &graph.Graph{Name: "clip", Initializers: map[string]*graph.Tensor{"max": graph.Scalar(graph.Float32, 1)}}
		g.Inputs = []*graph.ValueInfo{{Name: "X", Type: stateF32Type(4)}}
		g.Nodes = []*graph.Node{
			{Name: "relu", OpType: "Relu", Inputs: []string{"X"}, Outputs: []string{"Y"}},
			{Name: "view", OpType: "Identity", Inputs: []string{"Y"}, Outputs: []string{"V"}},
			{Name: "clip", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain, Inputs: []string{"max", "V"}, Outputs: []string{"N", "C"},
				Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}},
			{Name: "neg", OpType: "Neg", Inputs: []string{"C"}, Outputs: []string{"Z"}},
		}
		g.Outputs = []*graph.ValueInfo{{Name: "N"}, {Name: "Z"}}
		if alsoRead {
			g.Nodes = append(g.Nodes, &graph.Node{Name: "abs", OpType: "Abs", Inputs: []string{"Y"}, Outputs: []string{"A"}})
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "A"})
		}
		m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
		exe, err := (&Backend{}).Compile(m, backend.CompileOptions{})
		require.NoError(t, err)
		for range 2 {
			out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"X": graph.FromFloat32([]float32{3, -1, 4, 0}, 4)})
			require.NoError(t, err)
			assert.InDelta(t, 5, out["N"].Float(0), 1e-6, "alsoRead=%v: norm", alsoRead)
			z := out["Z"].Float32s()
			assert.InDelta(t, -0.6, z[0], 1e-6)
			assert.InDelta(t, -0.8, z[2], 1e-6)
			if alsoRead {
				assert.Equal(t, []float32{3, 0, 4, 0}, out["A"].Float32s(), "Abs read the unclipped value")
			}
		}
		p := exe.(*Executable).last.Load()
		require.NotNil(t, p)
		for _, st := range p.steps {
			if st.node.OpType == graph.ClipGradNormOp {
				assert.Equal(t, !alsoRead, st.inplace, "alsoRead=%v: clipped in place", alsoRead)
			}
		}
	}
}
