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
	adamw, err := EstimateMemory(context.Background(), model, 8, "adamw", 0, "cross_entropy")
	require.NoError(t, err)
	const params = 52650 * 4 // 784·64+64 + 64·32+32 + 32·10+10 float32s
	assert.Equal(t, int64(params), adamw.Parameters)
	assert.Equal(t, int64(params), adamw.Gradients)
	assert.Equal(t, int64(2*params), adamw.OptimizerState)
	assert.Greater(t, adamw.Activations, int64(params), "the step's gradient outputs alone are as large as the parameters")
	sgd, err := EstimateMemory(context.Background(), model, 64, "sgd", 0.9, "cross_entropy")
	require.NoError(t, err)
	assert.Equal(t, int64(params), sgd.OptimizerState)
	assert.Greater(t, sgd.Activations, adamw.Activations)
	assert.Equal(t, sgd.Parameters+sgd.Gradients+sgd.OptimizerState+sgd.Activations+sgd.Inputs, sgd.Total)
}
