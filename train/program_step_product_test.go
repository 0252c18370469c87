package train

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestFusedStepUpdatesWeightsFromTheirProduct: with every weight over
// graph.UpdateProductMinBytes (set to 0 here) the fused step updates the
// GPT's and the ViT's linear weights, whose gradient is one MatMulGradB
// over the batch, with SGDUpdateProduct or AdamUpdateProduct, and the
// step's bits stay the separate path's: loss, the reported gradient norm,
// every parameter and the optimizer's state, three steps, also when the
// step reports the norm (the per-tensor ClipGradNorm taken in). (The
// fixtures' weights fit one block; optimizer.TestUpdateProductMatches...
// cuts them into many.)
func TestFusedStepUpdatesWeightsFromTheirProduct(t *testing.T) {
	old := graph.UpdateProductMinBytes
	graph.UpdateProductMinBytes = 0
	defer func() { graph.UpdateProductMinBytes = old }()
	ctx := context.Background()
	for _, c := range []string{"gpt", "vit_tiny"} {
		model, loss, inputs, labels := fusedBatch(t, c)
		for _, o := range fusedOpts {
			if o.name != "sgd-momentum-wd" && o.name != "adamw-amsgrad" && o.name != "sgd" {
				continue
			}
			for _, report := range []bool{false, true} {
				name := c + "/" + o.name
				if report {
					name += "/norm"
				}
				t.Run(name, func(t *testing.T) {
					sep, fused, optA, optB := separateAndFused(t, model, loss, o)
					pa := optParams(sep)
					require.NoError(t, fused.BindUpdate(optB, optParams(fused), UpdateRecipe{ReportNorm: report}))
					for step := range 3 {
						sep.StartWindow()
						r, err := sep.ForwardBackward(ctx, inputs, labels, 1)
						require.NoError(t, err)
						norm, err := sep.ClipGradNorm(ctx, math.Inf(1))
						require.NoError(t, err)
						for i := range pa {
							pa[i].Grad = r.Grads[i]
						}
						require.NoError(t, optA.Step(pa))
						out, err := fused.Step(ctx, inputs, labels, 1)
						require.NoError(t, err)
						assert.Equal(t, math.Float64bits(r.Loss), math.Float64bits(out.Loss), "step %d: loss", step)
						if report {
							assert.Equal(t, math.Float32bits(float32(norm)), math.Float32bits(float32(out.GradNorm)), "step %d: gradient norm", step)
						}
						for i := range sep.Params {
							require.Equal(t, bitsOf(sep.Params[i].Value), bitsOf(fused.Params[i].Value), "step %d: parameter %s", step, sep.Params[i].Name)
						}
					}
					stA, stB := optA.State(), optB.State()
					for k, v := range stA {
						if v.DType == graph.Float32 {
							assert.Equal(t, bitsOf(v), bitsOf(stB[k]), "optimizer state %s", k)
						}
					}
					products := 0
					for _, n := range fused.Executable().(backend.PlanInspector).LastRunNodes() {
						if graph.IsProductUpdate(n) {
							products++
							assert.Equal(t, report, n.AttrInt("norm", 0) == 1, "%s takes the norm in", n.Name)
						}
					}
					assert.Positive(t, products, "weights updated from their product")
				})
			}
		}
	}
}
