package train_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestTrainingMatchesPyTorchWinograd runs the convolutional fixtures'
// PyTorch traces (as TestTrainingMatchesPyTorch does) with the CPU
// compile option backend.Tuning.Winograd forced on, so that every 3×3 stride-1
// convolution, input gradient and filter gradient the transform can
// compute goes through it, and compares the per-step losses and gradient
// norms to the same tolerances. It also checks that the convolutions did
// reach both transforms (the fixtures' layers are below the sizes where
// the automatic policy uses them).
func TestTrainingMatchesPyTorchWinograd(t *testing.T) {
	force := func(c *train.Config) { c.Tuning.Winograd = backend.WinogradForce }
	for _, fixture := range []string{"resnet18_small", "cifar_resnet"} {
		dir := filepath.Join("..", "models", fixture)
		gf, names := readGolden(t, filepath.Join(dir, "train_golden.json"))
		for _, name := range names {
			t.Run(fixture+"/"+name, func(t *testing.T) {
				calls, filter := nn.WinogradCalls(), nn.WinogradFilterGradCalls()
				checkGolden(t, dir, gf, gf.Configs[name], force)
				assert.Greater(t, nn.WinogradCalls(), calls, "convolutions and input gradients ran through the Winograd transform")
				assert.Greater(t, nn.WinogradFilterGradCalls(), filter, "filter gradients ran through the Winograd transform")
			})
		}
	}
}
