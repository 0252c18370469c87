package cpu

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// baseExecutable compiles a program whose one state buffer "base" is b
// (read-only: Y = Neg(base)), for views to be declared on.
func baseExecutable(t *testing.T, b *graph.Tensor) *Executable {
	t.Helper()
	g := &graph.Graph{Name: "base", Initializers: map[string]*graph.Tensor{},
		Inputs:  []*graph.ValueInfo{{Name: "base", Type: stateF32Type(int64(b.Size()))}},
		Nodes:   []*graph.Node{{Name: "neg", OpType: "Neg", Inputs: []string{"base"}, Outputs: []string{"Y"}}},
		Outputs: []*graph.ValueInfo{{Name: "Y"}}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	exe, err := (&Backend{}).Compile(m, backend.CompileOptions{State: []backend.StateSpec{{Name: "base", Init: b}}})
	require.NoError(t, err)
	return exe.(*Executable)
}

// TestStateViewUpdatesBaseInPlace: a view is a window on its base's
// memory: AccumulateGrad over the view changes the base's elements of the
// view's range only, in place (no byte copied), and ReadState/WriteState
// of the view move its range only.
func TestStateViewUpdatesBaseInPlace(t *testing.T) {
	base := graph.FromFloat32([]float32{0, 1, 2, 3, 4, 5, 6, 7}, 8)
	e := baseExecutable(t, base)
	require.NoError(t, e.ViewState("S", "base", 4, []int{3}))
	require.NoError(t, e.ViewState("S", "base", 4, []int{3}), "declaring the same view again")
	v := e.HostState("S")
	require.NotNil(t, v)
	assert.Equal(t, []int{3}, v.Shape)
	assert.Equal(t, unsafe.Pointer(&base.Float32s()[4]), unsafe.Pointer(&v.Float32s()[0]), "the view is the base's memory")
	assert.Equal(t, []string{"S", "base"}, e.StateNames())

	exe, err := (&Backend{}).Compile(accumulateModel(false), backend.CompileOptions{ShareState: e,
		State: []backend.StateSpec{{Name: "S", Init: graph.Zeros(graph.Float32, 3), UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	for _, fresh := range []bool{false, false} {
		_, err := exe.Run(context.Background(), map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{fresh}}, "G": graph.FromFloat32([]float32{10, 20, 30}, 3)})
		require.NoError(t, err)
	}
	assert.Equal(t, []float32{0, 1, 2, 3, 24, 45, 66, 7}, base.Float32s())
	assert.Equal(t, backend.StateTraffic{}, e.StateTraffic(), "the view's update is made in the base, in place")

	host := graph.Zeros(graph.Float32, 3)
	require.NoError(t, e.ReadState("S", host))
	assert.Equal(t, []float32{24, 45, 66}, host.Float32s())
	require.NoError(t, e.WriteState("S", graph.FromFloat32([]float32{-1, -2, -3}, 3)))
	assert.Equal(t, []float32{0, 1, 2, 3, -1, -2, -3, 7}, base.Float32s())
	assert.Equal(t, backend.StateTraffic{ReadBytes: 12, WriteBytes: 12}, e.StateTraffic())

	// A view of a view lies in the same memory.
	require.NoError(t, e.ViewState("T", "S", 1, []int{2, 1}))
	assert.Equal(t, unsafe.Pointer(&base.Float32s()[5]), unsafe.Pointer(&e.HostState("T").Float32s()[0]))
}

// TestStateViewCopyFallback: where the view's update cannot be made in
// place (another node reads the view), the copy after the run lands in
// the base's range.
func TestStateViewCopyFallback(t *testing.T) {
	base := graph.FromFloat32([]float32{1, 1, 1, 1, 1}, 5)
	e := baseExecutable(t, base)
	require.NoError(t, e.ViewState("S", "base", 1, []int{3}))
	exe, err := (&Backend{}).Compile(accumulateModel(true), backend.CompileOptions{ShareState: e,
		State: []backend.StateSpec{{Name: "S", Init: graph.Zeros(graph.Float32, 3), UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"fresh": {DType: graph.Bool, Data: []bool{false}}, "G": graph.FromFloat32([]float32{1, 2, 3}, 3)})
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, -1, -1}, out["Z"].Float32s(), "Neg read the view before the update")
	assert.Equal(t, []float32{1, 2, 3, 4, 1}, base.Float32s())
	assert.Equal(t, int64(12), e.StateTraffic().UpdateCopyBytes)
}

// TestStateViewErrors: bad views and programs that update memory they
// also read through another buffer are errors that name the buffers.
func TestStateViewErrors(t *testing.T) {
	e := baseExecutable(t, graph.Zeros(graph.Float32, 8))
	assert.ErrorContains(t, e.ViewState("V", "nope", 0, []int{2}), `no state named "nope" to view`)
	assert.ErrorContains(t, e.ViewState("V", "base", 6, []int{3}), `elements [6, 9) are outside "base" (8 elements)`)
	assert.ErrorContains(t, e.ViewState("V", "base", -1, []int{3}), `elements [-1, 2) are outside "base"`)
	assert.ErrorContains(t, e.ViewState("V", "base", 0, []int{-3}), "negative dimension")
	assert.ErrorContains(t, e.ViewState("", "base", 0, []int{3}), "the view has no name")
	assert.ErrorContains(t, e.ViewState("base", "base", 0, []int{3}), `"base": the name is taken`)
	require.NoError(t, e.ViewState("S", "base", 2, []int{3}))
	assert.ErrorContains(t, e.ViewState("S", "base", 3, []int{3}), `"S": the name is taken`)

	// S = base[2:5) is updated, G = base[4:7) is read: they overlap.
	require.NoError(t, e.ViewState("G", "base", 4, []int{3}))
	_, err := (&Backend{}).Compile(accumulateModel(false), backend.CompileOptions{ShareState: e, State: []backend.StateSpec{
		{Name: "S", Init: graph.Zeros(graph.Float32, 3), UpdatedBy: "S_new"}, {Name: "G", Init: graph.Zeros(graph.Float32, 3)}}})
	assert.ErrorContains(t, err, `states "S" and "G" share memory of "base" (elements [2, 5) and [4, 7))`)
	// Disjoint ranges are fine, and so is reading overlapping ones.
	require.NoError(t, e.ViewState("G2", "base", 5, []int{3}))
	_, err = (&Backend{}).Compile(accumulateModel(false), backend.CompileOptions{ShareState: e, State: []backend.StateSpec{
		{Name: "S", Init: graph.Zeros(graph.Float32, 3), UpdatedBy: "S_new"}}})
	require.NoError(t, err)
	_, err = (&Backend{}).Compile(accumulateModel(false), backend.CompileOptions{ShareState: e, State: []backend.StateSpec{
		{Name: "S", Init: graph.Zeros(graph.Float32, 3)}, {Name: "G", Init: graph.Zeros(graph.Float32, 3)}}})
	require.NoError(t, err)
}
