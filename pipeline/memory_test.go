package pipeline_test

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// In-flight micro-batches per stage, counted from the action lists: 1F1B
// holds min(S-s, M) in stage s, GPipe all M everywhere.
func TestScheduleInFlight(t *testing.T) {
	for _, c := range []struct{ ranks, micro int }{{2, 4}, {4, 8}, {4, 2}} {
		f, err := pipeline.New("1f1b", c.ranks, c.micro, 0)
		require.NoError(t, err)
		g, err := pipeline.New("gpipe", c.ranks, c.micro, 0)
		require.NoError(t, err)
		for s := 0; s < c.ranks; s++ {
			assert.Equal(t, min(c.ranks-s, c.micro), f.InFlight(s), "1f1b %v stage %d", c, s)
			assert.Equal(t, c.micro, g.InFlight(s), "gpipe %v stage %d", c, s)
		}
		assert.Zero(t, f.InFlight(c.ranks), "no such stage")
	}
	for _, name := range []string{"interleaved", "zb1p", "zbv"} {
		sched, err := pipeline.New(name, 2, 4, 2)
		require.NoError(t, err)
		for s := 0; s < sched.Stages(); s++ {
			n := sched.InFlight(s)
			assert.True(t, n >= 1 && n <= 4, "%s stage %d: %d in flight", name, s, n)
		}
	}
}

// The plan's memory per stage, refined from each stage's training graph,
// against what the stage measurably holds when it trains: its parameters,
// gradient sums and AdamW state (the tensors), the most activations its
// micro-batches in flight kept at once, and the largest planned peak of one
// of its passes. On both fixtures, 2 and 4 stages, a split-backward and a
// plain schedule: each stage within 15%, and the activations kept per
// micro-batch as the runner counts them.
func TestPlanMemoryMatchesStages(t *testing.T) {
	for _, f := range fixtures {
		cfg := f.config(4, 4, 2, "adamw")
		m, sc := loadForStages(t, cfg)
		ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{Inputs: f.inputs, NoLabels: !f.labels})
		require.NoError(t, err)
		var micro []pipeline.Batch
		for i := 0; i < cfg.GradAccum; i++ {
			idx := make([]int, cfg.BatchSize)
			for k := range idx {
				idx[k] = (i*cfg.BatchSize + k) % ds.Len()
			}
			in, labels, err := ds.Gather(0, idx)
			require.NoError(t, err)
			micro = append(micro, pipeline.Batch{Inputs: in, Labels: labels})
		}
		for _, c := range []struct {
			schedule string
			ranks    int
		}{{"1f1b", 2}, {"1f1b", 4}, {"zb1p", 2}, {"gpipe", 4}} {
			sched, err := pipeline.New(c.schedule, c.ranks, cfg.GradAccum, 0)
			require.NoError(t, err)
			plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: cfg.BatchSize, OptimizerSlots: 2,
				InFlight: func(s, _ int) int { return sched.InFlight(s) }})
			require.NoError(t, err)
			sc.SplitBackward = sched.SplitBackward()
			require.NoError(t, plan.RefineMemory(sc))
			r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc,
				NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
			require.NoError(t, err)
			for step := 0; step < 2; step++ {
				_, err := r.Step(context.Background(), micro)
				require.NoError(t, err)
			}
			for s, p := range r.Profile() {
				st := plan.Stages[s]
				assert.InDelta(t, float64(p.KeptBytes), float64(st.ActivationBytes), 16,
					"%s %s stage %d: activations kept per micro-batch (the last stage's env also holds the 4-byte loss scale)", f.name, c.schedule, s)
				measured := r.StateBytes(s) + p.HeldPeakBytes + r.PassPeakBytes(s)
				require.Positive(t, measured)
				off := float64(st.EstMemoryBytes)/float64(measured) - 1
				assert.Less(t, math.Abs(off), 0.15, "%s %s, %d stages, stage %d: estimated %d bytes, measured %d", f.name, c.schedule, sched.Stages(), s, st.EstMemoryBytes, measured)
			}
		}
	}
}

// A stage memory limit that the cost model's estimate meets but the
// refined one does not is refused by RefineMemory, naming the stage.
func TestRefineMemoryChecksStageMemory(t *testing.T) {
	m, err := importer.Load(filepath.Join("..", "models", "transformer_loss", "transformer_loss_train.onnx"))
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 4})
	require.NoError(t, err)
	before := plan.Stages[0].EstMemoryBytes
	require.NoError(t, plan.RefineMemory(pipeline.StageConfig{LossOutput: "loss"}))
	after := plan.Stages[0].EstMemoryBytes
	require.NotEqual(t, before, after, "the refined estimate differs from the cost model's on this fixture")
	require.Positive(t, plan.Stages[0].PassBytes)

	limit := min(before, after) + (max(before, after)-min(before, after))/2
	plan, err = pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 4, StageMemory: limit, SplitAt: []string{plan.Stages[1].Nodes[0]}})
	if before > after {
		require.Error(t, err, "the cost model's estimate is over the limit")
		return
	}
	require.NoError(t, err)
	err = plan.RefineMemory(pipeline.StageConfig{LossOutput: "loss"})
	require.ErrorIs(t, err, pipeline.ErrPartition)
	assert.Contains(t, err.Error(), "stage 0")
}

// The activations each rank holds at once, measured as the runner keeps
// and drops them: GPipe holds every micro-batch's (M), 1F1B at most one
// per stage from it to the last (min(S-s, M)) — the memory the schedules
// are chosen for.
func TestHeldActivationsFollowSchedule(t *testing.T) {
	f := fixtures[1] // transformer_loss
	cfg := f.config(4, 4, 1, "sgd")
	m, err := importer.Load(cfg.Model)
	require.NoError(t, err)
	ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{Inputs: f.inputs, NoLabels: true})
	require.NoError(t, err)
	var micro []pipeline.Batch
	for i := 0; i < cfg.GradAccum; i++ {
		in, _, err := ds.Gather(0, []int{(4 * i) % ds.Len(), (4*i + 1) % ds.Len(), (4*i + 2) % ds.Len(), (4*i + 3) % ds.Len()})
		require.NoError(t, err)
		micro = append(micro, pipeline.Batch{Inputs: in})
	}
	for _, name := range []string{"gpipe", "1f1b"} {
		sched, err := pipeline.New(name, 2, cfg.GradAccum, 0)
		require.NoError(t, err)
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: cfg.BatchSize})
		require.NoError(t, err)
		r, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"},
			NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
		require.NoError(t, err)
		_, err = r.Step(context.Background(), micro)
		require.NoError(t, err)
		prof, held := r.Profile(), r.HeldPeakByRank()
		for s := range prof {
			want := prof[s].KeptBytes * int64(sched.InFlight(s))
			assert.Equal(t, want, held[s], "%s rank %d", name, s)
			assert.Equal(t, want, prof[s].HeldPeakBytes, "%s stage %d", name, s)
		}
		if name == "gpipe" {
			assert.Equal(t, 4, sched.InFlight(0))
		} else {
			assert.Equal(t, 2, sched.InFlight(0))
			assert.Equal(t, 1, sched.InFlight(1))
		}
	}
}

// Sizing the stages copies no weights: RefineMemory on a model whose two
// 2048×2048 weights (32 MiB) dwarf everything else allocates a small
// fraction of them (BuildStage would copy each and zero a gradient sum
// beside it: 64 MiB).
func TestRefineMemoryCopiesNoWeights(t *testing.T) {
	const D = 2048
	g := graph.NewGraph("wide")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Known: true, Value: D}}}}}
	g.Outputs = []*graph.ValueInfo{{Name: "loss", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}}
	g.Initializers["W1"] = graph.Zeros(graph.Float32, D, D)
	g.Initializers["W2"] = graph.Zeros(graph.Float32, D, D)
	g.Nodes = []*graph.Node{
		{Name: "mm1", OpType: "MatMul", Inputs: []string{"x", "W1"}, Outputs: []string{"h1"}},
		{Name: "act", OpType: "Relu", Inputs: []string{"h1"}, Outputs: []string{"h2"}},
		{Name: "mm2", OpType: "MatMul", Inputs: []string{"h2", "W2"}, Outputs: []string{"h3"}},
		{Name: "loss", OpType: "ReduceSum", Inputs: []string{"h3"}, Outputs: []string{"loss"}, Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}},
	}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 4})
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, plan.RefineMemory(pipeline.StageConfig{LossOutput: "loss"}))
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "bytes allocated while sizing two 16 MiB weights' stages")
	for _, st := range plan.Stages {
		assert.Positive(t, st.PassBytes, "stage %d sized", st.Index)
	}
}
