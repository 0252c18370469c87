package pipeline_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// TestSyncBatchNormAcrossReplicas: resnet18_small (20 BatchNorms) in 2
// stages × 2 replicas with --sync-batchnorm: micro-batch m of each replica
// is normalised with the statistics of both replicas' micro-batches m, so
// every step's loss equals that of one replica whose micro-batch m is the
// two micro-batches m together (batch 2b), to 1e-5; without the sync the
// losses differ.
func TestSyncBatchNormAcrossReplicas(t *testing.T) {
	const b, M, steps, R, S = 2, 2, 3, 2, 2
	m, err := importer.Load("../models/resnet18_small/resnet18_small_train.onnx")
	require.NoError(t, err)
	ds, err := data.OpenNPZ("../models/resnet18_small/train_case.npz", data.NPZOptions{Inputs: []string{"input"}})
	require.NoError(t, err)
	lc, err := train.ParseLoss("cross_entropy")
	require.NoError(t, err)
	sc := pipeline.StageConfig{Loss: train.LossAppender(m, lc), Rewrite: func(g *graph.Graph, opset int64) error {
		_, err := train.SyncBatchNorm(g, opset)
		return err
	}}
	sched, err := pipeline.New("1f1b", S, M, 0)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: S, BatchSize: b})
	require.NoError(t, err)
	sgd := func(int, []*optim.Param) (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	}
	// replica q's micro-batch k of step s: b examples from (s·R·M + q·M + k)·b
	idx := func(step, q, k int) []int {
		out := make([]int, b)
		for i := range out {
			out[i] = ((step*R*M+q*M+k)*b + i) % ds.Len()
		}
		return out
	}
	gather := func(ix []int) pipeline.Batch {
		in, labels, err := ds.Gather(0, ix)
		require.NoError(t, err)
		return pipeline.Batch{Inputs: in, Labels: labels}
	}
	ctx := context.Background()
	one, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, NewOptimizer: sgd})
	require.NoError(t, err)
	var want []float64
	for step := 0; step < steps; step++ {
		var micro []pipeline.Batch
		for k := 0; k < M; k++ {
			micro = append(micro, gather(append(idx(step, 0, k), idx(step, 1, k)...)))
		}
		st, err := one.Step(ctx, micro)
		require.NoError(t, err)
		want = append(want, st.Loss)
	}
	run := func(sync bool) [][]float64 {
		groups := startGroups(t, R*S)
		got := make([][]float64, R*S)
		errs := onRanks(R*S, func(proc int) error {
			replica, rank := proc/S, proc%S
			tr, err := pipeline.NewTCPTransport(ctx, groups[proc], "", 20*time.Second)
			if err != nil {
				return err
			}
			defer tr.Close()
			r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc, Transport: pipeline.ReplicaTransport(tr, replica*S),
				Rank: rank, Group: groups[proc], Replicas: R, Replica: replica, RecvTimeout: 20 * time.Second, SyncBatchNorm: sync, NewOptimizer: sgd})
			if err != nil {
				return err
			}
			for step := 0; step < steps; step++ {
				var micro []pipeline.Batch
				for k := 0; k < M; k++ {
					micro = append(micro, gather(idx(step, replica, k)))
				}
				if err := r.ForwardBackward(ctx, micro); err != nil {
					return err
				}
				if err := r.Update(); err != nil {
					return err
				}
				got[proc] = append(got[proc], r.LastStats().Loss)
			}
			return nil
		})
		for p, err := range errs {
			require.NoError(t, err, "process %d", p)
		}
		return got
	}
	got := run(true)
	for p := range got {
		require.Len(t, got[p], steps)
		for i := range want {
			assert.LessOrEqual(t, math.Abs(got[p][i]-want[i]), 1e-5*math.Abs(want[i]), "process %d step %d: %.8f, one replica of batch 2b %.8f", p, i+1, got[p][i], want[i])
		}
	}
	plain := run(false)
	differs := false
	for i := range want {
		differs = differs || math.Abs(plain[0][i]-want[i]) > 1e-5*math.Abs(want[i])
	}
	assert.True(t, differs, "without the sync the replicas normalise alone")
}
