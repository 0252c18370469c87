package cpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestGPTStepStaysInPlan: a steady-state step of the small GPT (the
// nn.MultiheadAttention export of models/gpt) allocates next to nothing
// outside its memory plan. Its attention in-projection is a Linear layer
// applied to a permuted view of x; its gradients used to take
// PermutedMatMul's materialising fallback, which allocated copies of the
// views and the results on every step (78% of the step's tensor bytes
// again, per step, for the collector to reclaim).
func TestGPTStepStaysInPlan(t *testing.T) {
	if cpu.RaceEnabled {
		t.Skip("the race detector changes allocation behaviour")
	}
	m, err := importer.Load("../../models/gpt/gpt_small_train.onnx")
	require.NoError(t, err)
	loss, err := train.ParseLoss("output:loss")
	require.NoError(t, err)
	recorder.take()
	prog, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: "cpu-recording", Seed: 7})
	require.NoError(t, err)
	exes := recorder.take()
	require.Len(t, exes, 2)
	arrays, err := tensorio.ReadNPZ("../../models/gpt/train_case.npz")
	require.NoError(t, err)
	ctx := context.Background()
	step := func() {
		if _, err := prog.ForwardBackward(ctx, arrays, nil, 1); err != nil {
			panic(err)
		}
	}
	for i := 0; i < 3; i++ {
		step()
	}
	bytes := bytesPerRun(10, step)
	st := exes[0].MemoryStats()
	t.Logf("%.0f bytes per step; %d planned tensors, arena %.2f MiB, all tensors %.2f MiB", bytes, st.Tensors, mib(st.ArenaBytes), mib(st.TotalBytes))
	assert.Zero(t, st.Misses, "every allocation request matched the plan")
	assert.Less(t, bytes, 0.02*float64(st.TotalBytes), "bytes allocated per step against the step's tensors (measured: 0.15% now, 10% with the fallback)")
}
