package train

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph/passes"
)

// TestTrainingPassesOrder: the training builder's passes are accepted in
// their order, and moving autocast after autodiff (the backward pass would
// not be cast) or leaving out the lowering autodiff requires is refused.
func TestTrainingPassesOrder(t *testing.T) {
	p := &Program{}
	list := p.trainingPasses(&trainBuild{})
	pl, err := passes.New("training step", list...)
	require.NoError(t, err)
	assert.Equal(t, []string{"promote-state", "add-loss", "sync-batchnorm", "pushdown-gather", "lower-for-autodiff", "dropout-masks", "autocast",
		"autodiff", "place-gradients", "state-outputs", "recompute", "topo-sort", "check-collectives"}, pl.Names())
	at := map[string]int{}
	for i, ps := range list {
		at[ps.Name] = i
	}
	moved := func(a, b string) []passes.Pass {
		out := append([]passes.Pass(nil), list...)
		out[at[a]], out[at[b]] = out[at[b]], out[at[a]]
		return out
	}
	_, err = passes.New("training step", moved("autocast", "autodiff")...)
	require.True(t, errors.Is(err, passes.ErrOrder), "%v", err)
	assert.Contains(t, err.Error(), `"autocast"`)
	assert.Contains(t, err.Error(), `"autodiff"`)
	var noLowering []passes.Pass
	for _, ps := range list {
		if ps.Name != "lower-for-autodiff" {
			noLowering = append(noLowering, ps)
		}
	}
	_, err = passes.New("training step", noLowering...)
	require.True(t, errors.Is(err, passes.ErrOrder), "%v", err)
	assert.Contains(t, err.Error(), `"autodiff" requires "lower-for-autodiff", which the pipeline does not run`)

	// The evaluation graph's passes: autocast needs inference mode first.
	eval := p.evaluationPasses("y")
	pl, err = passes.New("evaluation", eval...)
	require.NoError(t, err)
	assert.Equal(t, []string{"to-inference", "add-loss", "promote-state", "autocast"}, pl.Names())
	_, err = passes.New("evaluation", eval[3], eval[0], eval[1], eval[2])
	require.True(t, errors.Is(err, passes.ErrOrder), "%v", err)
	assert.Contains(t, err.Error(), `"autocast" (position 1) requires "to-inference" to run first`)
}
