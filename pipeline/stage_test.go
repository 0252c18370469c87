package pipeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// TestSplitBackward: a stage's input-gradient and weight-gradient passes
// together give the gradients of its whole backward pass, the input
// gradient pass computes no parameter gradient, and the weight-gradient
// pass does real work (the weight matmuls), so the zero-bubble schedules
// have something to move into the bubbles.
func TestSplitBackward(t *testing.T) {
	f := fixtures[0]
	m := loadFixture(t, f)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 4})
	require.NoError(t, err)
	lc, err := train.ParseLoss(f.loss)
	require.NoError(t, err)
	cfg := pipeline.StageConfig{Loss: train.LossAppender(m, lc)}
	whole, err := pipeline.BuildStage(plan, 1, cfg)
	require.NoError(t, err)
	cfg.SplitBackward = true
	split, err := pipeline.BuildStage(plan, 1, cfg)
	require.NoError(t, err)

	passes := split.Passes()
	require.Len(t, passes, 3)
	for _, o := range passes[1].Outputs {
		assert.False(t, strings.HasPrefix(o, "pipeline/dparam/"), "the input-gradient pass computes %s", o)
	}
	assert.Greater(t, passes[1].Nodes, 10)
	assert.Greater(t, passes[2].Nodes, 10)

	// Feed both the same activations: run stage 0 forward for them.
	first, err := pipeline.BuildStage(plan, 0, pipeline.StageConfig{})
	require.NoError(t, err)
	ds, err := data.OpenNPZ("../models/"+f.data, data.NPZOptions{Inputs: f.inputs})
	require.NoError(t, err)
	in, labels, err := ds.Gather(0, []int{0, 1, 2, 3})
	require.NoError(t, err)
	ctx := context.Background()
	e0 := pipeline.Env{"input": in["input"]}
	require.NoError(t, first.Forward(ctx, e0, 1))
	envFor := func() pipeline.Env {
		e := pipeline.Env{whole.Labels: labels}
		for _, name := range whole.Inputs {
			e[name] = e0[name]
		}
		return e
	}
	ew, es := envFor(), envFor()
	require.NoError(t, whole.Forward(ctx, ew, 0.25))
	require.NoError(t, whole.Backward(ctx, ew))
	require.NoError(t, split.Forward(ctx, es, 0.25))
	require.NoError(t, split.BackwardInput(ctx, es))
	for _, p := range split.Params {
		assert.Nil(t, split.ParamGrad(p.Name), "%s before the weight pass", p.Name)
	}
	for _, name := range split.Inputs {
		require.NotNil(t, split.InputGrad(es, name))
		assertClose(t, whole.InputGrad(ew, name), split.InputGrad(es, name), name)
	}
	require.NoError(t, split.BackwardWeight(ctx, es))
	require.NotEmpty(t, split.Params)
	for _, p := range split.Params {
		require.NotNil(t, split.ParamGrad(p.Name), p.Name)
		assertClose(t, whole.ParamGrad(p.Name), split.ParamGrad(p.Name), p.Name)
	}
}

func assertClose(t *testing.T, want, got *graph.Tensor, name string) {
	t.Helper()
	require.NotNil(t, want, name)
	require.Equal(t, want.Shape, got.Shape, name)
	w, g := want.Float32s(), got.Float32s()
	nonzero := false
	for i := range w {
		assert.InDelta(t, w[i], g[i], 1e-6*(1+float64(abs32(w[i]))), "%s[%d]", name, i)
		nonzero = nonzero || w[i] != 0
	}
	assert.True(t, nonzero, "%s is all zero", name)
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}
