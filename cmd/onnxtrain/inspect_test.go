package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// inspect reports parameters, the op histogram, and which ops training
// cannot differentiate.
func TestInspectReport(t *testing.T) {
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	m, err := importer.Load("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	r := Inspect("mlp", m, b)
	assert.Equal(t, int64(52650), r.Parameters)
	assert.Equal(t, 3, r.OpHistogram["Gemm"])
	assert.Empty(t, r.Unsupported)
	assert.Empty(t, r.NoGradient)
	assert.Equal(t, "float32[batch,784]", r.Inputs[0].Type)

	// Det has a kernel but neither a gradient rule nor a lowering.
	onnxData := testutil.ONNXTestdata(t)
	lp, err := importer.Load(filepath.Join(onnxData, "node", "test_det_2d", "model.onnx"))
	require.NoError(t, err)
	r = Inspect("det", lp, b)
	require.Len(t, r.NoGradient, 1)
	assert.Equal(t, "Det", r.NoGradient[0].Op)
	// GridSample has no gradient rule but trains through its lowering.
	gs, err := importer.Load(filepath.Join(onnxData, "node", "test_gridsample", "model.onnx"))
	require.NoError(t, err)
	r = Inspect("gridsample", gs, b)
	assert.Empty(t, r.NoGradient)
	// LSTM has both.
	lstm, err := importer.Load(filepath.Join(onnxData, "node", "test_lstm_defaults", "model.onnx"))
	require.NoError(t, err)
	r = Inspect("lstm", lstm, b)
	assert.Empty(t, r.NoGradient)
}
