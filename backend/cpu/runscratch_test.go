package cpu

import (
	"context"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	// ViewOf: y = x as a view (kern.View), in the node's result slice.
	kern.RegisterSpec(testDomain, "ViewOf", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return kern.Results(n, kern.View(n, in[0], in[0].Shape)), nil
	}})
}

// viewModel: v = ViewOf(a), w = AddOne(b).
func viewModel(size int) *graph.Model {
	g := graph.NewGraph("views")
	g.Inputs = []*graph.ValueInfo{{Name: "a", Type: vecType(size)}, {Name: "b", Type: vecType(size)}}
	g.Nodes = []*graph.Node{
		{Name: "v", OpType: "ViewOf", Domain: testDomain, Inputs: []string{"a"}, Outputs: []string{"v"}},
		{Name: "w", OpType: "AddOne", Domain: testDomain, Inputs: []string{"b"}, Outputs: []string{"w"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "v"}, {Name: "w"}}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, testDomain: 1}, Graph: g}
}

func mapID(m map[string]*graph.Tensor) uintptr { return uintptr(reflect.ValueOf(m).UnsafePointer()) }

// TestRunReusesItsOutputMap: in the arena, a run returns the map of the
// arena's previous run, refilled; with SetCopyOutputs each run has its
// own. A node's view header (kern.View) is reused run after run.
func TestRunReusesItsOutputMap(t *testing.T) {
	ctx := context.Background()
	exe := compileTest(t, viewModel(4))
	a, b := ramp(4, 0), ramp(4, 10)
	var outs []map[string]*graph.Tensor
	for i := 0; i < 4; i++ { // record, then the arena's runs
		out, err := exe.Run(ctx, map[string]*graph.Tensor{"a": a, "b": b})
		require.NoError(t, err)
		assert.Equal(t, []float32{11, 12, 13, 14}, out["w"].Float32s(), "run %d", i)
		assert.Equal(t, a.Float32s(), out["v"].Float32s(), "run %d", i)
		assert.Len(t, out, 2)
		outs = append(outs, out)
	}
	require.True(t, exe.MemoryStats().Planned)
	assert.Equal(t, mapID(outs[2]), mapID(outs[3]), "the arena's runs share their map")
	assert.Same(t, outs[2]["v"], outs[3]["v"], "and the view's header")
	exe.SetCopyOutputs(true)
	o1, err := exe.Run(ctx, map[string]*graph.Tensor{"a": a, "b": b})
	require.NoError(t, err)
	o2, err := exe.Run(ctx, map[string]*graph.Tensor{"a": a, "b": b})
	require.NoError(t, err)
	assert.NotEqual(t, mapID(o1), mapID(o2), "copied outputs come in a map of their own")
	assert.Equal(t, []float32{11, 12, 13, 14}, o1["w"].Float32s())
}

// TestOutputViewFedBack: a view a run returned (its header is the node's,
// its data outside the arena) fed back as an input of the next run is not
// overwritten by that run: the run takes another arena.
func TestOutputViewFedBack(t *testing.T) {
	ctx := context.Background()
	exe := compileTest(t, viewModel(4))
	a, b, c := ramp(4, 0), ramp(4, 10), ramp(4, 100)
	var v *graph.Tensor
	for i := 0; i < 3; i++ {
		out, err := exe.Run(ctx, map[string]*graph.Tensor{"a": a, "b": b})
		require.NoError(t, err)
		v = out["v"]
	}
	// v is a's data under ViewOf's header; the next run views c with the
	// same node, and reads v as b.
	out, err := exe.Run(ctx, map[string]*graph.Tensor{"a": c, "b": v})
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4}, out["w"].Float32s(), "b is the previous run's view of a")
	assert.Equal(t, c.Float32s(), out["v"].Float32s())
	assert.Equal(t, 2, exe.MemoryStats().Arenas)
}
