//go:build unix

package train_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Everything a run writes (model files, checkpoints, the loss curve)
// honours the umask: 0644 files under umask 022, never 0600.
func TestOutputsHonourUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	cfg := controlConfig(t)
	cfg.Output, cfg.Steps, cfg.CheckpointEvery = t.TempDir(), 2, 2
	_, _, err := run(t, cfg)
	require.NoError(t, err)
	n := 0
	require.NoError(t, filepath.WalkDir(cfg.Output, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		st, err := os.Stat(p)
		require.NoError(t, err)
		if d.IsDir() {
			if p != cfg.Output {
				assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), p)
			}
			return nil
		}
		n++
		assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), p)
		return nil
	}))
	assert.GreaterOrEqual(t, n, 7, "model.onnx, model.safetensors, loss.png and the checkpoint's files")
	assert.FileExists(t, filepath.Join(cfg.Output, "loss.png"))
}
