package train

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// TestFusedStepUpdatesTheTokenTableFromItsRows: in the GPT fixture's
// fused SGD and AdamW steps the token table's update reads the gathered
// rows of its gradient (SGDUpdateGathered, AdamUpdateGathered; no
// GatherGrad left), also when the step reports the gradients' norm (the
// table's per-tensor ClipGradNorm taken in: `onnxtrain train` always
// reports it), and with a clip by norm, which reads every gradient, it
// does not. That the step's bits are the separate path's either way is
// TestFusedStepMatchesSeparateRuns's gpt/sgd* and gpt/adam* cases.
func TestFusedStepUpdatesTheTokenTableFromItsRows(t *testing.T) {
	model, loss, inputs, labels := fusedBatch(t, "gpt")
	for _, c := range []struct {
		name             string
		adamw, report    bool
		clipNorm         float64
		gathered, gather int
	}{{"sgd", false, false, 0, 1, 0}, {"sgd, clip by norm", false, false, 1, 0, 1}, {"adamw", true, false, 0, 1, 0},
		{"sgd, norm reported", false, true, 0, 1, 0}, {"adamw, norm reported", true, true, 0, 1, 0}} {
		t.Run(c.name, func(t *testing.T) {
			m, err := importer.Load(model)
			require.NoError(t, err)
			p, err := Build(m, ProgramConfig{Loss: loss, FusedUpdate: true, Seed: 3})
			require.NoError(t, err)
			var o optim.Optimizer
			if c.adamw {
				o, err = optim.NewAdamW(optim.DefaultAdamWConfig(1e-3))
			} else {
				o, err = optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
			}
			require.NoError(t, err)
			require.NoError(t, p.BindUpdate(o, optParams(p), UpdateRecipe{ClipGradNorm: c.clipNorm, ReportNorm: c.report}))
			out, err := p.Step(context.Background(), inputs, labels, 1)
			require.NoError(t, err)
			if c.report {
				assert.Greater(t, out.GradNorm, 0.0, "the norm reported with the table's part")
			}
			ops := map[string]int{}
			for _, n := range p.Executable().(backend.PlanInspector).LastRunNodes() {
				ops[n.OpType]++
			}
			assert.Equal(t, c.gathered, ops[graph.SGDUpdateGatheredOp]+ops[graph.AdamUpdateGatheredOp])
			assert.Equal(t, c.gather, ops["GatherGrad"])
		})
	}
}
