package train

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// FuzzLoadState: whatever a checkpoint's model, optimizer and state files
// hold (past the manifest's checks, as a file damaged before it was saved
// would be), LoadState's decoding returns an error or a state whose
// every tensor is valid, and the resume path after it (CheckCompatible
// against the model's tensors, then the optimizer's LoadState) errs or
// succeeds without panicking.
func FuzzLoadState(f *testing.F) {
	st := fullState(f)
	seedDir := f.TempDir()
	require.NoError(f, SaveState(seedDir, st))
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(seedDir, name))
		require.NoError(f, err)
		return b
	}
	model, opt, state := read(CheckpointModelFile), read(CheckpointOptimizerFile), read(CheckpointStateFile)
	f.Add(model, opt, state)
	f.Add(model, opt, []byte(`{"step":1,"schedule":{"x":[1,{"y":null}]},"rng":{"a":"AAEC"},"loss_scaler":{"scale":1e309}}`))
	f.Add(model, []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}, state)
	f.Fuzz(func(t *testing.T, modelFile, optFile, stateFile []byte) {
		got, err := decodeState("ck", map[string][]byte{
			CheckpointModelFile: modelFile, CheckpointOptimizerFile: optFile, CheckpointStateFile: stateFile,
		})
		if err != nil {
			// Content the manifest vouches for is corrupt, or names shard
			// files the checkpoint lacks.
			if !errors.Is(err, ErrCheckpointIncomplete) {
				require.ErrorIs(t, err, ErrCheckpointCorrupt, "%v", err)
			}
			return
		}
		for _, m := range []map[string]*graph.Tensor{got.Params, got.Buffers, got.Optimizer} {
			for name, v := range m {
				require.NoError(t, v.Validate(), name)
			}
		}
		if CheckCompatible(got, st.Params, st.Buffers) != nil {
			return
		}
		o, err := optim.NewAdam(optim.AdamConfig{LR: 1e-3})
		require.NoError(t, err)
		_ = o.LoadState(got.Optimizer)
	})
}
