package cpu

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestNoMemoryPlanOption: the compile option backend.Tuning.NoMemoryPlan
// (which replaced the process-wide ONNXTRAIN_NO_MEMPLAN read here) runs
// every step on the heap, while an executable compiled without it from the
// same model plans its memory from the second run on; both compute the
// same values.
func TestNoMemoryPlanOption(t *testing.T) {
	m := chainModel("AddOne", 3, 4)
	run := func(opts backend.CompileOptions) (*Executable, *graph.Tensor) {
		exe, err := (&Backend{}).Compile(m, opts)
		require.NoError(t, err)
		e := exe.(*Executable)
		var out map[string]*graph.Tensor
		for i := 0; i < 2; i++ {
			out, err = e.Run(context.Background(), map[string]*graph.Tensor{"x": ramp(4, 0)})
			require.NoError(t, err)
		}
		for _, v := range out {
			return e, v.Clone()
		}
		t.Fatal("no output")
		return nil, nil
	}
	planned, want := run(backend.CompileOptions{})
	heap, got := run(backend.CompileOptions{Tuning: backend.Tuning{NoMemoryPlan: true}})
	assert.True(t, planned.MemoryStats().Planned, "default: planned")
	assert.False(t, heap.MemoryStats().Planned, "NoMemoryPlan: not planned")
	assert.Equal(t, want.Float32s(), got.Float32s())
}

// TestFusedOpsHaveKernels: every fused op the backend declares has a
// kernel, and so does the op of every mode it declares (OP+mode, as
// graph.AttnRecomputePMode).
func TestFusedOpsHaveKernels(t *testing.T) {
	ops := (&Backend{}).FusedOps()
	require.NotEmpty(t, ops)
	assert.Contains(t, ops, graph.AttnRecomputePMode)
	for _, op := range ops {
		op, _, _ = strings.Cut(op, "+")
		domain := graph.FusedDomain
		if graph.IsOptimizerOp(&graph.Node{OpType: op, Domain: graph.InternalDomain}) {
			domain = graph.InternalDomain // a fused optimizer update (SGDUpdateGathered)
		}
		_, ok := kern.Lookup(domain, op, 17)
		assert.True(t, ok, op)
	}
}
