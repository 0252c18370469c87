package main

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// A batch of 2^40 is planned from shapes like a batch of 2: the
// estimate allocates no more at that size (no batch, no activation is
// made), and its batch-dependent parts scale exactly with the batch.
func TestEstimateMemoryHugeBatchAllocatesNothing(t *testing.T) {
	const model = "../../models/fmnist_cnn/fmnist_cnn_train.onnx"
	allocated := func(batch int) (*MemoryEstimate, uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		est, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: batch, Optimizer: "adamw", Loss: "cross_entropy"})
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		return est, after.TotalAlloc - before.TotalAlloc
	}
	small, smallAlloc := allocated(2)
	huge, hugeAlloc := allocated(1 << 40)
	t.Logf("batch 2: %d bytes allocated; batch 2^40: %d bytes allocated, estimate %d bytes", smallAlloc, hugeAlloc, huge.Total)
	// The same work at both sizes (import, build, planning): allow for
	// the runtime's own noise, not for anything the size of a batch.
	assert.Less(t, float64(hugeAlloc), 1.5*float64(smallAlloc)+(1<<20))
	assert.Equal(t, small.Parameters, huge.Parameters)
	assert.Equal(t, small.OptimizerState, huge.OptimizerState)
	// 28x28 float32 images and int64 labels: (3136+8) bytes an example.
	assert.Equal(t, int64(3144)<<40, huge.Inputs)
	assert.Greater(t, huge.Activations, int64(1)<<50, "activations grow with the batch")
}

// A batch far beyond this machine's memory is estimated without running
// it, and the command fails naming --batch-size after showing the estimate.
func TestEstimateMemoryTooLargeNamesBatchSize(t *testing.T) {
	if train.MachineMemory() == 0 {
		testutil.Skip(t, "the machine's memory is unknown here (not Linux)")
	}
	out, _, err := runCLIResult("estimate-memory", "../../models/fmnist_cnn/fmnist_cnn_train.onnx", "--batch-size", "1099511627776")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--batch-size 1099511627776 asks for")
	assert.Contains(t, err.Error(), "more than this machine's memory")
	assert.True(t, strings.Contains(out, "planned from the shapes of a batch of 1099511627776"), out)
	assert.Contains(t, out, "total:")
}

// bench refuses a batch or a GEMM larger than memory, naming the flag,
// before allocating anything.
func TestBenchTooLargeNamesTheFlag(t *testing.T) {
	if train.MachineMemory() == 0 {
		testutil.Skip(t, "the machine's memory is unknown here (not Linux)")
	}
	_, _, err := runCLIResult("bench", "--model", "../../models/fmnist_cnn/fmnist_cnn_train.onnx", "--batch-size", "1000000000", "--steps", "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--batch-size 1000000000 asks for")
	_, _, err = runCLIResult("bench", "--gemm", "1000000,1000000,1000000")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--gemm 1000000,1000000,1000000 asks for")
	assert.Contains(t, err.Error(), "more than this machine's memory")
}
