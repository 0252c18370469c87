package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The estimate's parts follow from the model: AdamW keeps two state
// tensors per parameter, SGD with momentum one, and the planned activations
// grow with the batch.
func TestEstimateMemory(t *testing.T) {
	const model = "../../models/mlp/mlp_train.onnx"
	adamw, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 8, Optimizer: "adamw", Loss: "cross_entropy"})
	require.NoError(t, err)
	const params = 52650 * 4 // 784·64+64 + 64·32+32 + 32·10+10 float32s
	assert.Equal(t, int64(params), adamw.Parameters)
	assert.Zero(t, adamw.Gradients, "one micro-batch per step: the update runs inside the step, no gradient sums")
	accum, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 8, Optimizer: "adamw", Loss: "cross_entropy", GradAccum: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(params), accum.Gradients, "--grad-accum 2 keeps a gradient sum per parameter")
	sep, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 8, Optimizer: "adamw", Loss: "cross_entropy", SeparateUpdate: true})
	require.NoError(t, err)
	assert.Equal(t, int64(params), sep.Gradients, "--separate-update keeps the sums")
	assert.Equal(t, adamw.Total+int64(params), sep.Total)
	assert.Equal(t, int64(2*params), adamw.OptimizerState)
	clip, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 8, Optimizer: "adamw", Loss: "cross_entropy", ClipGradNorm: 1})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, clip.Activations, int64(params), "under --clip-grad-norm every gradient lives until the clip at the end of backward")
	assert.Less(t, adamw.Activations, clip.Activations, "with the update inside the step each gradient dies at its update")
	assert.GreaterOrEqual(t, adamw.Activations, int64(784*64*4), "the first layer's weight gradient")
	sgd, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 64, Optimizer: "sgd", Momentum: 0.9, Loss: "cross_entropy"})
	require.NoError(t, err)
	assert.Equal(t, int64(params), sgd.OptimizerState)
	assert.Greater(t, sgd.Activations, adamw.Activations)
	assert.Equal(t, sgd.Parameters+sgd.Gradients+sgd.OptimizerState+sgd.Activations+sgd.Inputs+sgd.Prefetch+sgd.Dataset+sgd.Workspace+sgd.FirstStep, sgd.Total)
	assert.Equal(t, 3*sgd.Inputs, sgd.Prefetch, "without --data, the loader's queue of 2 and the batch its goroutine holds")
}

func TestEstimateMemoryRejectsBadOptions(t *testing.T) {
	const model = "../../models/mlp/mlp_train.onnx"
	for _, c := range []struct {
		o    EstimateOptions
		want string
	}{
		{EstimateOptions{BatchSize: 0, Optimizer: "adamw", Loss: "cross_entropy"}, "--batch-size must be positive, got 0"},
		{EstimateOptions{BatchSize: 4, Optimizer: "lion", Loss: "cross_entropy"}, `unknown optimizer "lion"`},
		{EstimateOptions{BatchSize: 4, Optimizer: "adamw", Loss: "hinge"}, `unknown loss "hinge"`},
		{EstimateOptions{BatchSize: 4, Optimizer: "adamw", Loss: "cross_entropy", Data: "train.csv"}, "--data train.csv: only .npz and .npy"},
		{EstimateOptions{BatchSize: 4, Optimizer: "adamw", Loss: "cross_entropy", Data: "missing.npz"}, "--data"},
		{EstimateOptions{BatchSize: 4, Optimizer: "adamw", Loss: "cross_entropy", MixedPrecision: "fp8"}, `--mixed-precision "fp8": want no, bf16 or fp16`},
	} {
		_, err := EstimateMemory(context.Background(), model, c.o)
		assert.ErrorContains(t, err, c.want)
	}
}

// Under bf16 the parameters, gradients and optimizer state stay float32
// (master weights) while the CNN's convolution and linear activations are
// planned at half the bytes.
func TestEstimateMemoryMixedPrecision(t *testing.T) {
	const model = "../../models/fmnist_cnn/fmnist_cnn_train.onnx"
	f32, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 64, Optimizer: "adamw", Loss: "cross_entropy"})
	require.NoError(t, err)
	for _, mp := range []string{"bf16", "fp16"} {
		low, err := EstimateMemory(context.Background(), model, EstimateOptions{BatchSize: 64, Optimizer: "adamw", Loss: "cross_entropy", MixedPrecision: mp})
		require.NoError(t, err)
		assert.Equal(t, mp, low.MixedPrecision)
		assert.Equal(t, f32.Parameters, low.Parameters, mp)
		assert.Equal(t, f32.Gradients, low.Gradients, mp)
		assert.Equal(t, f32.OptimizerState, low.OptimizerState, mp)
		assert.Less(t, float64(low.Activations), 0.8*float64(f32.Activations), "%s: planned activations %d, float32 %d", mp, low.Activations, f32.Activations)
	}
}
