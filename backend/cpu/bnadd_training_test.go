package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// residualFusedOps are the fused ops of a residual block's end and its
// gradient.
var residualFusedOps = []string{graph.BatchNormAddRelu, graph.AddReluGrad, graph.BatchNormAddReluGrad}

func init() { registerCPUWithout("cpu-no-residual-fusions", residualFusedOps) }

// TestResidualFusionsTrainAlike runs the training step (forward, loss,
// backward) of the ResNet fixtures on three batches on the CPU with and
// without BatchNormAddRelu and AddReluGrad: the fused steps run them in
// place of every block end's BatchNormalization, Add and Relu and of the
// masked gradient sums, and the losses, every gradient and the BatchNorm
// running statistics are the same bits. (The kit's Training part checks
// the fused steps, updates included, against PyTorch's goldens.)
func TestResidualFusionsTrainAlike(t *testing.T) {
	for _, fixture := range []string{"resnet18_small", "cifar_resnet"} {
		t.Run(fixture, func(t *testing.T) {
			fused := runFixtureSteps(t, fixture, "cpu")
			plain := runFixtureSteps(t, fixture, "cpu-no-residual-fusions")
			requireSameSteps(t, plain, fused, residualFusedOps)
			assert.Positive(t, fused.ops[graph.BatchNormAddRelu], "%v", fused.ops)
			assert.Positive(t, fused.ops[graph.BatchNormAddReluGrad], "%v", fused.ops)
			assert.Less(t, fused.ops["Add"], plain.ops["Add"], "fused %v, plain %v", fused.ops, plain.ops)
			require.NotEmpty(t, fused.stats)
			t.Logf("%s: fused ops %v", fixture, fused.ops)
		})
	}
}
