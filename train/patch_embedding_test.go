package train_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train"
)

// noPatchifyBackend is the CPU backend without the Patchify kernel, so
// that fuse-patch-embedding does not run.
const noPatchifyBackend = "cpu-no-patchify"

func init() { registerCPUWithout(noPatchifyBackend, graph.Patchify) }

// registerCPUWithout registers, as name, the CPU backend without the fused
// op op, so that the passes that make it do not run.
func registerCPUWithout(name, op string) {
	backend.Register(name, func() (backend.Backend, error) {
		ops := slices.DeleteFunc((&cpu.Backend{}).FusedOps(), func(o string) bool { return o == op })
		return &cpu.Backend{FusedOnly: ops}, nil
	})
}

// TestPatchEmbeddingGradients: the patch embeddings of vit_tiny (timm's
// flatten(2).transpose(1, 2)) and vit_tv (torchvision's reshape and
// permute) run as Patchify and one GEMM (fuse-patch-embedding), and the
// filters' gradient as one GEMM over the output's gradient: the step has a
// Patchify and no Conv forward or ConvBackwardFilter, and gives the loss and gradients of
// the step without the pass to rounding (within 1e-5 of each gradient's
// RMS), both matching PyTorch's (models/vit_tiny_grad_golden.py).
func TestPatchEmbeddingGradients(t *testing.T) {
	for _, name := range []string{"vit_tiny", "vit_tv"} {
		t.Run(name, func(t *testing.T) { patchEmbeddingGradients(t, name) })
	}
}

func patchEmbeddingGradients(t *testing.T, name string) {
	m, batch, golden := gradFixture(t, name)
	step := func(be string) gradOutcome {
		return gradStep(t, m, batch, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, Backend: be})
	}
	on, off := step("cpu"), step(noPatchifyBackend)
	assert.Equal(t, 1, on.ops[graph.Patchify], "the pass ran")
	assert.Zero(t, on.ops["Conv"], "no Conv forward left")
	assert.Zero(t, on.ops["ConvBackwardFilter"], "the filters' gradient is one GEMM over dT")
	assert.Zero(t, off.ops[graph.Patchify])
	assert.Equal(t, 1, off.ops["Conv"])
	assert.Equal(t, 1, off.ops["ConvBackwardFilter"])

	torchLoss := float64(golden["loss"].Float32s()[0])
	assert.InEpsilon(t, torchLoss, on.loss, 1e-6, "loss with the pass against PyTorch")
	assert.InEpsilon(t, off.loss, on.loss, 1e-7, "loss with and without the pass")
	diffBits, total, worstOff, worstTorch := compareGradients(t, golden, on.grads, off.grads)
	t.Logf("gradient elements that differ from the step without the pass: %d of %d; worst max|diff|/RMS: %.3g against it, %.3g against PyTorch",
		diffBits, total, worstOff, worstTorch)
}
