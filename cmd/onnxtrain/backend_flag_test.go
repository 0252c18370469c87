package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cuda"
)

// TestBackendCUDAFailsFirst: every command that takes --backend opens the
// backend before anything else. Without a GPU, `--backend cuda` fails with
// the backend's one-line reason even where the model or data named after
// it do not exist (so nothing was loaded first); with a GPU the check
// passes and the command goes on to the missing file.
func TestBackendCUDAFailsFirst(t *testing.T) {
	_, gpuErr := cuda.Open()
	for _, args := range [][]string{
		{"train", "--backend", "cuda", "--model", "/nonexistent/m.onnx", "--data", "/nonexistent/d.npz", "--loss", "cross_entropy"},
		{"run", "--backend", "cuda", "--model", "/nonexistent/m.onnx"},
		{"bench", "--backend", "cuda", "--model", "/nonexistent/m.onnx"},
		{"conformance", "--backend", "cuda", "--testdata", "/nonexistent"},
		{"estimate-memory", "/nonexistent/m.onnx", "--batch-size", "4", "--backend", "cuda"},
		{"eval", "--backend", "cuda", "--model", "/nonexistent/m.onnx", "--data", "/nonexistent"},
	} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		require.Error(t, err, "%v", args)
		if gpuErr != nil {
			assert.Equal(t, gpuErr.Error(), err.Error(), "%v", args)
			assert.NotContains(t, err.Error(), "\n")
			assert.NotContains(t, err.Error(), "nonexistent", "%v: the backend is checked before files are read", args)
			assert.Equal(t, 1, exitCode(err))
		} else {
			assert.True(t, strings.Contains(err.Error(), "nonexistent"), "%v: with a GPU the check passes: %v", args, err)
		}
	}
}

func TestEnvListsCUDA(t *testing.T) {
	r := collectEnv()
	assert.Contains(t, r.Backends, "cuda")
	require.True(t, r.GPU.CUDABackend)
	require.NotEmpty(t, r.GPU.CUDA)
	var buf bytes.Buffer
	writeEnvText(&buf, r)
	assert.Contains(t, buf.String(), "cuda:")
	if _, err := cuda.Open(); err != nil {
		assert.Contains(t, buf.String(), "unavailable")
	} else {
		assert.Contains(t, buf.String(), "driver API")
	}
}
