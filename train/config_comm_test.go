package train

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --compress-bf16 with --comm mpi is refused (MPI sends float32), naming
// both flags; with tcp it is accepted.
func TestCompressBF16NeedsTCP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Steps = "m.onnx", "d.npz", 1
	cfg.CompressBF16 = true
	require.NoError(t, cfg.Validate())
	cfg.Comm = "mpi"
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--compress-bf16")
	assert.Contains(t, err.Error(), "--comm tcp")
	cfg.CompressBF16 = false
	assert.NoError(t, cfg.Validate())
}
