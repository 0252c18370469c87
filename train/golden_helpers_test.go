package train_test

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/train"
)

// The PyTorch golden training checks live in the backend test kit
// (backend/backendtest: Training), which every backend runs; these are its
// helpers for the golden tests that stay here.

func readGolden(t *testing.T, file string) (backendtest.GoldenFile, []string) {
	t.Helper()
	return backendtest.ReadGolden(t, file)
}

func checkGolden(t *testing.T, dir string, gf backendtest.GoldenFile, gc backendtest.GoldenConfig, mods ...func(*train.Config)) {
	t.Helper()
	backendtest.CheckGolden(t, "cpu", dir, gf, gc, mods...)
}
