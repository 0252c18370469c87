package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// TestCommFlag: --comm takes tcp or mpi; a binary built without the build
// tag mpi says so when asked for MPI, instead of failing later.
func TestCommFlag(t *testing.T) {
	common := []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz", "--steps", "1"}
	_, _, err := runCLIResult(append(common, "--comm", "nccl")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--comm must be tcp or mpi, got "nccl"`)

	if distrib.MPIBuilt {
		t.Log("built with -tags mpi: TestMPITrainMatchesTCP covers --comm mpi")
		return
	}
	_, _, err = runCLIResult(append(common, "--comm", "mpi")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--comm mpi")
	assert.Contains(t, err.Error(), "built without MPI support")
	assert.Contains(t, err.Error(), "-tags mpi")
}
