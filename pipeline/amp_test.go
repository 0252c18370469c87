package pipeline_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// TestUnscaleAgreesOnInf: fp16's inf/NaN check is one flag for the whole
// pipeline. An inf in the last stage's gradients makes UnscaleGrads report
// it in one process (both ranks in it) and, over a process group, in the
// process of the first stage too, whose own gradients are finite, so every
// stage skips the same step; a finite step reports none; every gradient is
// multiplied by the inverse scale once.
func TestUnscaleAgreesOnInf(t *testing.T) {
	f := fixtures[1] // transformer_loss, the loss in the graph
	m, err := importer.Load("../models/" + f.model)
	require.NoError(t, err)
	ds, err := data.OpenNPZ("../models/"+f.data, data.NPZOptions{NoLabels: true, Inputs: f.inputs})
	require.NoError(t, err)
	var micro []pipeline.Batch
	for i := 0; i < 2; i++ {
		in, _, err := ds.Gather(0, []int{2 * i, 2*i + 1})
		require.NoError(t, err)
		micro = append(micro, pipeline.Batch{Inputs: in})
	}
	sched, err := pipeline.New("1f1b", 2, 2, 0)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 2})
	require.NoError(t, err)
	sc := pipeline.StageConfig{LossOutput: "loss"}
	ctx := context.Background()

	// one process, both ranks
	r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc})
	require.NoError(t, err)
	r.SetLossScale(1024)
	require.NoError(t, r.ForwardBackward(ctx, micro))
	g0 := r.Params(0)[0].Grad.Float32s()
	before := g0[0]
	found, err := r.UnscaleGrads(ctx, 1.0/1024)
	require.NoError(t, err)
	assert.False(t, found, "finite gradients")
	assert.Equal(t, before*(1.0/1024), g0[0], "unscaled once")
	require.NoError(t, r.ForwardBackward(ctx, micro))
	r.Params(1)[0].Grad.Float32s()[0] = float32(math.Inf(1))
	found, err = r.UnscaleGrads(ctx, 1.0/1024)
	require.NoError(t, err)
	assert.True(t, found, "an inf in stage 1")

	// two processes: the inf in rank 1's stage only
	groups := startGroups(t, 2)
	flags := make([][]bool, 2)
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
		run.SetLossScale(1024)
		for step := 0; step < 2; step++ {
			if err := run.ForwardBackward(ctx, micro); err != nil {
				return err
			}
			if step == 1 && rank == 1 {
				run.Params(1)[0].Grad.Float32s()[0] = float32(math.NaN())
			}
			found, err := run.UnscaleGrads(ctx, 1.0/1024)
			if err != nil {
				return err
			}
			flags[rank] = append(flags[rank], found)
		}
		return nil
	})
	for rank, err := range errs {
		require.NoError(t, err, "process %d", rank)
	}
	assert.Equal(t, []bool{false, true}, flags[0], "process 0 (stage 0, finite) learns of stage 1's NaN")
	assert.Equal(t, []bool{false, true}, flags[1])
}
