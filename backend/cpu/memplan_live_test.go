package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestPeakLiveListsTheFullestStep: in a chain x → v0 → v1 → v2 → y each
// step holds its input and its output, so the fullest step is the first
// with two values alive (step 1); PeakLive names them, their producers,
// sizes, lifetimes and last readers. Before the first run it is empty.
func TestPeakLiveListsTheFullestStep(t *testing.T) {
	exe := compileTest(t, chainModel("AddOne", 4, 100))
	assert.Empty(t, exe.PeakLive().Values)
	in := map[string]*graph.Tensor{"x": ramp(100, 0)}
	for range 2 {
		_, err := exe.Run(context.Background(), in)
		require.NoError(t, err)
	}
	pl := exe.PeakLive()
	assert.Equal(t, 1, pl.Step)
	assert.Equal(t, 4, pl.Steps)
	assert.Equal(t, "v1", pl.Node)
	assert.Equal(t, "AddOne", pl.Op)
	assert.Equal(t, int64(800), pl.Bytes)
	assert.LessOrEqual(t, pl.Bytes, exe.MemoryStats().ArenaBytes)
	assert.Equal(t, []LiveValue{
		{Value: "v0", Node: "v0", Op: "AddOne", Bytes: 400, Born: 0, Dies: 1, LastReader: "AddOne v1"},
		{Value: "v1", Node: "v1", Op: "AddOne", Bytes: 400, Born: 1, Dies: 2, LastReader: "AddOne v2"},
	}, pl.Values)
}
