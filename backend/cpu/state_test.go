package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

func stateF32Type(shape ...int64) *graph.Type {
	t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}
	for _, d := range shape {
		t.Shape = append(t.Shape, graph.Dim{Value: d, Known: true})
	}
	return t
}

// accumulateModel: S' = fresh ? G : S + G, and the loss-like output
// Y = ReduceSum(G); with alsoRead, a second node reads S (so the update
// cannot be in place).
func accumulateModel(alsoRead bool) *graph.Model {
	g := &graph.Graph{Name: "acc", Initializers: map[string]*graph.Tensor{}}
	g.Inputs = []*graph.ValueInfo{
		{Name: "fresh", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}},
		{Name: "S", Type: stateF32Type(3)},
		{Name: "G", Type: stateF32Type(3)},
	}
	g.Nodes = []*graph.Node{
		{Name: "acc", OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain, Inputs: []string{"fresh", "S", "G"}, Outputs: []string{"S_new"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"G"}, Outputs: []string{"Y"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "Y"}, {Name: "S_new"}}
	if alsoRead {
		g.Nodes = append(g.Nodes, &graph.Node{Name: "neg", OpType: "Neg", Inputs: []string{"S"}, Outputs: []string{"Z"}})
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "Z"})
	}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
}

// TestStateAccumulatesInPlace: a state buffer declared with its initial
// tensor is that tensor (no copy), AccumulateGrad updates it in place
// (clearing on fresh), Run returns the other outputs only, and no byte is
// copied through the state API or for the updates; ReadState/WriteState
// count what they move.
func TestStateAccumulatesInPlace(t *testing.T) {
	be := &Backend{}
	s := graph.FromFloat32([]float32{100, 100, 100}, 3)
	exe, err := be.Compile(accumulateModel(false), backend.CompileOptions{State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	st := exe.(backend.Stateful)
	assert.Same(t, s, st.HostState("S"))
	assert.Equal(t, []string{"S"}, st.StateNames())
	ctx := context.Background()
	run := func(fresh bool, g ...float32) map[string]*graph.Tensor {
		out, err := exe.Run(ctx, map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{fresh}}, "G": graph.FromFloat32(g, 3)})
		require.NoError(t, err)
		return out
	}
	out := run(true, 1, 2, 3)
	assert.NotContains(t, out, "S_new", "state updates stay in the buffer")
	assert.InDelta(t, 6, out["Y"].Float(0), 0)
	assert.Equal(t, []float32{1, 2, 3}, s.Float32s())
	for range 3 {
		run(false, 1, 1, 1)
	}
	assert.Equal(t, []float32{4, 5, 6}, s.Float32s())
	assert.Equal(t, backend.StateTraffic{}, st.StateTraffic(), "in-place updates copy nothing")

	host := graph.Zeros(graph.Float32, 3)
	require.NoError(t, st.ReadState("S", host))
	assert.Equal(t, []float32{4, 5, 6}, host.Float32s())
	require.NoError(t, st.WriteState("S", graph.FromFloat32([]float32{7, 8, 9}, 3)))
	assert.Equal(t, []float32{7, 8, 9}, s.Float32s())
	assert.Equal(t, backend.StateTraffic{ReadBytes: 12, WriteBytes: 12}, st.StateTraffic())
	require.NoError(t, st.ReadState("S", s), "reading a buffer into itself")
	assert.Equal(t, backend.StateTraffic{ReadBytes: 12, WriteBytes: 12}, st.StateTraffic(), "is no copy")

	_, err = exe.Run(ctx, map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{true}}, "G": graph.Zeros(graph.Float32, 3), "S": s})
	assert.ErrorContains(t, err, `"S" is a state buffer`)
	assert.ErrorContains(t, st.ReadState("T", host), `no state named "T"`)
	assert.ErrorContains(t, st.WriteState("S", graph.Zeros(graph.Float32, 4)), "does not fit")
}

// TestStateUpdateCopiesWhenRead: when another node reads the state, the
// update is not made in place (that node must see the old value) and is
// copied into the buffer after the run; the results are the same.
func TestStateUpdateCopiesWhenRead(t *testing.T) {
	be := &Backend{}
	s := graph.FromFloat32([]float32{1, 2, 3}, 3)
	exe, err := be.Compile(accumulateModel(true), backend.CompileOptions{State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	for range 2 {
		out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{false}}, "G": graph.FromFloat32([]float32{1, 1, 1}, 3)})
		require.NoError(t, err)
		assert.Equal(t, -(s.Float32s()[0] - 1), out["Z"].Float32s()[0], "Neg read the value before the update")
	}
	assert.Equal(t, []float32{3, 4, 5}, s.Float32s())
	assert.Equal(t, int64(24), exe.(backend.Stateful).StateTraffic().UpdateCopyBytes)
}

// TestShareState: a second executable compiled with ShareState binds a
// state of the same name to the first one's buffer, and rejects a
// declaration of another shape; bad declarations are errors.
func TestShareState(t *testing.T) {
	be := &Backend{}
	s := graph.FromFloat32([]float32{0, 0, 0}, 3)
	a, err := be.Compile(accumulateModel(false), backend.CompileOptions{State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	b, err := be.Compile(accumulateModel(false), backend.CompileOptions{ShareState: a, State: []backend.StateSpec{{Name: "S", Init: graph.Zeros(graph.Float32, 3), UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	_, err = b.Run(context.Background(), map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{true}}, "G": graph.FromFloat32([]float32{5, 6, 7}, 3)})
	require.NoError(t, err)
	assert.Equal(t, []float32{5, 6, 7}, s.Float32s(), "b updated a's buffer")

	_, err = be.Compile(accumulateModel(false), backend.CompileOptions{ShareState: a, State: []backend.StateSpec{{Name: "S", Init: graph.Zeros(graph.Float32, 4)}}})
	assert.ErrorContains(t, err, `state "S" is float32[3] in the shared state, declared float32[4]`)
	_, err = be.Compile(accumulateModel(false), backend.CompileOptions{State: []backend.StateSpec{{Name: "Q", Init: s}}})
	assert.ErrorContains(t, err, `state "Q" is not an input of the graph`)
	_, err = be.Compile(accumulateModel(false), backend.CompileOptions{State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "nope"}}})
	assert.ErrorContains(t, err, `updated by "nope", which is not an output`)
	_, err = be.Compile(accumulateModel(false), backend.CompileOptions{State: []backend.StateSpec{{Name: "S"}}})
	assert.ErrorContains(t, err, `state "S" has no initial value`)
}

// TestStaticShapesKeepsOnePlan: with StaticShapes, runs at the declared
// shapes use the compiled plan itself, memory-planned from the second run
// (the results of a specialised plan), and no specialised copy is kept.
func TestStaticShapesKeepsOnePlan(t *testing.T) {
	ctx := context.Background()
	for _, static := range []bool{false, true} {
		s := graph.FromFloat32([]float32{0, 0, 0}, 3)
		exe, err := (&Backend{}).Compile(accumulateModel(false), backend.CompileOptions{
			State: []backend.StateSpec{{Name: "S", Init: s, UpdatedBy: "S_new"}}, StaticShapes: static})
		require.NoError(t, err)
		e := exe.(*Executable)
		for run := 0; run < 3; run++ {
			out, err := e.Run(ctx, map[string]*graph.Tensor{
				"fresh": {DType: graph.Bool, Data: []bool{run == 0}},
				"G":     graph.FromFloat32([]float32{1, 2, 3}, 3)})
			require.NoError(t, err)
			assert.InDelta(t, 6.0, out["Y"].Float(0), 0, "static %v, run %d", static, run)
		}
		assert.Equal(t, []float32{3, 6, 9}, s.Float32s(), "static %v: the state summed three runs", static)
		assert.True(t, e.MemoryStats().Planned, "static %v: the runs use a memory plan", static)
		if static {
			assert.Empty(t, e.specialised, "no specialised copy of the plan")
			assert.Same(t, e.main, e.last.Load(), "the runs use the compiled plan")
		} else {
			assert.Len(t, e.specialised, 1)
		}
	}
}
