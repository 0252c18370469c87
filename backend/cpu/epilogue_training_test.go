package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

// epilogueFusedOps are the fused ops that fold a memory pass into the
// GEMM epilogue or a normalisation's row loop.
var epilogueFusedOps = []string{graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.LayerNormGradAdd,
	graph.PermutedMatMulAdd, graph.MatMulAddAdd}

func init() { registerCPUWithout("cpu-no-epilogue-fusions", epilogueFusedOps) }

// TestEpilogueFusionsTrainAlike runs the training step (forward, loss,
// backward) of the transformer fixtures (the ViT, and the pre-norm
// transformer with its loss in the graph) on three batches on the CPU
// with and without the epilogue fusions: the fused steps run the fused ops
// in place of their chains (the MLP's GELU in both products' epilogues,
// the residual gradients added in LayerNorm's gradient), and the losses
// and every gradient are the same bits. (The kit's Training part checks
// the fused steps, updates included, against PyTorch's goldens.)
func TestEpilogueFusionsTrainAlike(t *testing.T) {
	for _, fixture := range []string{"vit_tiny", "transformer_loss"} {
		t.Run(fixture, func(t *testing.T) {
			fused := runFixtureSteps(t, fixture, "cpu")
			plain := runFixtureSteps(t, fixture, "cpu-no-epilogue-fusions")
			requireSameSteps(t, plain, fused, epilogueFusedOps)
			assert.Positive(t, fused.ops[graph.MatMulAddGeluErf], "%v", fused.ops)
			assert.Positive(t, fused.ops[graph.MatMulGeluErfGrad], "%v", fused.ops)
			assert.Positive(t, fused.ops[graph.LayerNormGradAdd], "%v", fused.ops)
			assert.Zero(t, fused.ops[graph.GeluErfGradX], "%v", fused.ops)
			t.Logf("%s: fused ops %v", fixture, fused.ops)
		})
	}
}
