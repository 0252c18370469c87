package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// TestEvaluateAcrossProcesses: the forward-only schedule over two
// processes (zbv: the last stage back on process 0) gives each batch the
// loss and model output of the same stages in one process, and only the
// process holding the last stage returns them.
func TestEvaluateAcrossProcesses(t *testing.T) {
	f := fixtures[0] // vit_tiny, cross entropy appended: loss and logits
	m, err := importer.Load("../models/" + f.model)
	require.NoError(t, err)
	ds, err := data.OpenNPZ("../models/"+f.data, data.NPZOptions{Inputs: f.inputs})
	require.NoError(t, err)
	var batches []pipeline.Batch
	for i := 0; i < 3; i++ {
		in, labels, err := ds.Gather(0, []int{2 * i, 2*i + 1})
		require.NoError(t, err)
		batches = append(batches, pipeline.Batch{Inputs: in, Labels: labels})
	}
	lc, err := train.ParseLoss(f.loss)
	require.NoError(t, err)
	sc := pipeline.StageConfig{Loss: train.LossAppender(m, lc), Eval: true}
	sched, err := pipeline.New("zbv", 2, 2, 0)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: 2})
	require.NoError(t, err)
	ctx := context.Background()
	one, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc})
	require.NoError(t, err)
	want, err := one.Evaluate(ctx, batches)
	require.NoError(t, err)
	require.Len(t, want, 3)

	groups := startGroups(t, 2)
	got := make([][]pipeline.EvalResult, 2)
	errs := onRanks(2, func(rank int) error {
		tr, err := pipeline.NewTCPTransport(ctx, groups[rank], "", 20*time.Second)
		if err != nil {
			return err
		}
		defer tr.Close()
		run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, Transport: tr, Rank: rank, Group: groups[rank], RecvTimeout: 20 * time.Second})
		if err != nil {
			return err
		}
		for rep := 0; rep < 2; rep++ { // twice: the second run's messages are its own
			if got[rank], err = run.Evaluate(ctx, batches); err != nil {
				return err
			}
		}
		return nil
	})
	for rank, err := range errs {
		require.NoError(t, err, "process %d", rank)
	}
	assert.Empty(t, got[1], "process 1 does not hold the last stage")
	require.Len(t, got[0], 3)
	for i := range want {
		assert.Equal(t, want[i].Loss, got[0][i].Loss, "batch %d", i)
		require.NotNil(t, got[0][i].Output)
		assert.Equal(t, want[i].Output.Float32s(), got[0][i].Output.Float32s(), "batch %d logits", i)
	}
}
