package train_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/train"
)

// TestTrainingMatchesPyTorchPrimitivesOnly is TestTrainingMatchesPyTorch
// with the backend restricted to the primitive and extended sets
// (Config.PrimitivesOnly): every op outside them runs in its lowered form,
// and the per-step losses and gradient norms still match PyTorch's within
// the same tolerances.
func TestTrainingMatchesPyTorchPrimitivesOnly(t *testing.T) {
	files, err := filepath.Glob("../models/*/train_golden.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	primitivesOnly := func(c *train.Config) { c.PrimitivesOnly = true }
	for _, f := range files {
		gf, names := readGolden(t, f)
		for _, name := range names {
			t.Run(filepath.Base(filepath.Dir(f))+"/"+name, func(t *testing.T) {
				checkGolden(t, filepath.Dir(f), gf, gf.Configs[name], primitivesOnly)
			})
		}
	}
}
