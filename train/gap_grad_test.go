package train_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// noReluGradBackend is the CPU backend without the fused ReluGrad, so that
// neither fuse-relu-grad nor fold-expand-into-relu-grad runs.
const noReluGradBackend = "cpu-no-relugrad"

func init() { registerCPUWithout(noReluGradBackend, graph.ReluGrad) }

// TestGlobalPoolGradientFolded: in resnet18_small's step the global
// average pool's gradient reaches the Relu before the pool without an
// Expand (fold-expand-into-relu-grad), and the loss and every gradient
// are bit for bit those of the step without the fused ReluGrad (Expand,
// Greater and Where as autodiff wrote them).
func TestGlobalPoolGradientFolded(t *testing.T) {
	dir := filepath.Join("..", "models", "resnet18_small")
	m, err := importer.Load(filepath.Join(dir, "resnet18_small_train.onnx"))
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ(filepath.Join(dir, "train_case.npz"))
	require.NoError(t, err)
	run := func(be string) gradOutcome {
		return gradStep(t, m, batch, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, Backend: be})
	}
	on, off := run("cpu"), run(noReluGradBackend)
	assert.Zero(t, on.ops["Expand"], "the pool's gradient is not broadcast into a tensor")
	assert.Positive(t, off.ops["Expand"], "without the fused ReluGrad the Expand stays")
	assert.Equal(t, off.loss, on.loss)
	require.Len(t, on.grads, len(off.grads))
	for name, g := range on.grads {
		assert.Equal(t, off.grads[name], g, name)
	}
}
