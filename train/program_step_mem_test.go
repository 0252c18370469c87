package train

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// TestFusedStepPlansLessMemory: what a step holds beyond its parameters
// and optimizer state, the memory plan's peak plus the gradient sums kept
// as state, drops by about the gradients' bytes when the update runs
// inside the step: the program keeps no sums, and each gradient is a
// transient value of the plan, freed once its update has read it.
func TestFusedStepPlansLessMemory(t *testing.T) {
	ctx := context.Background()
	for _, c := range []string{"vit_tiny", "gpt", "cifar_resnet"} {
		t.Run(c, func(t *testing.T) {
			model, loss, inputs, labels := fusedBatch(t, c)
			ma, err := importer.Load(model)
			require.NoError(t, err)
			mb, err := importer.Load(model)
			require.NoError(t, err)
			sep, err := Build(ma, ProgramConfig{Loss: loss, GradSums: true})
			require.NoError(t, err)
			fused, err := Build(mb, ProgramConfig{Loss: loss, FusedUpdate: true})
			require.NoError(t, err)
			optA, err := optim.NewAdamW(optim.DefaultAdamWConfig(1e-3))
			require.NoError(t, err)
			optB, err := optim.NewAdamW(optim.DefaultAdamWConfig(1e-3))
			require.NoError(t, err)
			optA.(optim.Binder).Bind(sep.Backend(), sep.Executable())
			pa := optParams(sep)
			require.NoError(t, fused.BindUpdate(optB, optParams(fused), UpdateRecipe{}))
			for range 2 { // the second step runs in the recorded plan
				r, err := sep.ForwardBackward(ctx, inputs, labels, 1)
				require.NoError(t, err)
				for i := range pa {
					pa[i].Grad = r.Grads[i]
				}
				require.NoError(t, optA.Step(pa))
				_, err = fused.Step(ctx, inputs, labels, 1)
				require.NoError(t, err)
			}
			var grads int64
			for _, p := range sep.Params {
				grads += 4 * int64(p.Value.Size())
			}
			before := sep.PlannedBytes() + grads // the sums are state
			after := fused.PlannedBytes()
			t.Logf("%s: planned %d + sums %d = %d before, %d after (saved %.2f of the gradient bytes)", c, sep.PlannedBytes(), grads, before, after, float64(before-after)/float64(grads))
			require.Positive(t, sep.PlannedBytes())
			assert.Less(t, after, before)
			assert.GreaterOrEqual(t, before-after, grads*3/4, "the saving is about the gradients' bytes")
			assert.LessOrEqual(t, after, sep.PlannedBytes()+grads/4, "the plan holds at most a few gradients at once")
		})
	}
}
