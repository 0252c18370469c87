package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// fixture is a committed model with its training data.
type fixture struct {
	name, model, data, loss string
	inputs                  []string
	labels                  bool
}

var fixtures = []fixture{
	{name: "vit_tiny", model: "vit_tiny/vit_tiny_train.onnx", data: "vit_tiny/train_case.npz", loss: "cross_entropy", inputs: []string{"input"}, labels: true},
	{name: "transformer_loss", model: "transformer_loss/transformer_loss_train.onnx", data: "transformer_loss/train_case.npz", loss: "output:loss", inputs: []string{"x", "labels"}},
}

func (f fixture) config(batch, accum, steps int, opt string) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model = filepath.Join("..", "models", f.model)
	cfg.Data = filepath.Join("..", "models", f.data)
	cfg.Loss = f.loss
	cfg.BatchSize = batch
	cfg.GradAccum = accum
	cfg.Steps = steps
	cfg.Shuffle = false
	cfg.LogFormat = "json"
	cfg.Optimizer = opt
	switch opt {
	case "sgd":
		cfg.LR, cfg.Momentum = 0.05, 0.9
	case "adamw":
		cfg.LR, cfg.WeightDecay = 0.001, 0.05
	}
	return cfg
}

// loadForStages loads cfg's model and the stage configuration of its loss
// (the loss output, or the loss appended to the last stage).
func loadForStages(t *testing.T, cfg train.Config) (*graph.Model, pipeline.StageConfig) {
	t.Helper()
	m, err := importer.Load(cfg.Model)
	require.NoError(t, err)
	lc, err := train.ParseLoss(cfg.Loss)
	require.NoError(t, err)
	sc := pipeline.StageConfig{}
	if lc.Kind == "output" {
		sc.LossOutput = lc.Output
	} else {
		sc.Loss = train.LossAppender(m, lc)
	}
	return m, sc
}

// reference trains with train.Run, the single-process path of
// `onnxtrain train --batch-size b --grad-accum M`, and returns the
// per-step losses.
func reference(t *testing.T, cfg train.Config) []float64 {
	t.Helper()
	var out bytes.Buffer
	_, err := train.Run(context.Background(), cfg, &out, io.Discard)
	require.NoError(t, err)
	var losses []float64
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r))
		losses = append(losses, r.Loss)
	}
	return losses
}

// pipelined trains the same configuration cut into stages and run by the
// in-process runner on the named schedule.
func pipelined(t *testing.T, f fixture, cfg train.Config, ranks int, schedule string, with ...func(*pipeline.RunnerConfig)) []float64 {
	t.Helper()
	m, sc := loadForStages(t, cfg)
	sched, err := pipeline.New(schedule, ranks, cfg.GradAccum, 2)
	require.NoError(t, err)
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: cfg.BatchSize})
	require.NoError(t, err)
	rc := pipeline.RunnerConfig{Stage: sc,
		NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }}
	for _, w := range with {
		w(&rc)
	}
	run, err := pipeline.NewRunner(plan, sched, rc)
	require.NoError(t, err)
	ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{NoLabels: !f.labels, Inputs: f.inputs})
	require.NoError(t, err)
	var losses []float64
	next := 0
	for step := 0; step < cfg.Steps; step++ {
		micro := make([]pipeline.Batch, cfg.GradAccum)
		for i := range micro {
			// epochs in file order, as train.Run without --shuffle
			require.Zero(t, ds.Len()%(cfg.BatchSize*cfg.GradAccum), "windows must not straddle epochs")
			idx := make([]int, cfg.BatchSize)
			for k := range idx {
				idx[k] = next % ds.Len()
				next++
			}
			in, labels, err := ds.Gather(0, idx)
			require.NoError(t, err)
			micro[i] = pipeline.Batch{Inputs: in, Labels: labels}
		}
		st, err := run.Step(context.Background(), micro)
		require.NoError(t, err)
		losses = append(losses, st.Loss)
	}
	return losses
}

// TestPipelineMatchesGradAccum: on the ViT fixture and the transformer
// with its loss in the graph, 2 and 4 pipeline ranks with each schedule
// give, step for step, the losses of one process with --grad-accum M to
// 1e-5 relative.
func TestPipelineMatchesGradAccum(t *testing.T) {
	const batch, accum, steps = 2, 4, 3
	for _, f := range fixtures {
		for _, opt := range []string{"sgd", "adamw"} {
			cfg := f.config(batch, accum, steps, opt)
			want := reference(t, cfg)
			require.Len(t, want, steps)
			for _, ranks := range []int{2, 4} {
				for _, name := range pipeline.ScheduleNames() {
					t.Run(fmt.Sprintf("%s/%s/p%d/%s", f.name, opt, ranks, name), func(t *testing.T) {
						got := pipelined(t, f, cfg, ranks, name)
						require.Len(t, got, steps)
						for i := range want {
							assert.LessOrEqual(t, math.Abs(got[i]-want[i]), 1e-5*math.Abs(want[i]), "step %d: pipeline %.8f, one process %.8f", i+1, got[i], want[i])
						}
						// the losses must move, or the test proves little
						assert.NotEqual(t, want[0], want[steps-1])
					})
				}
			}
		}
	}
}

// TestPipelineWithDataParallel: two replicas of a 2-rank pipeline, each on
// its own M micro-batches, with gradients averaged across them, train as
// one process with --grad-accum 2M.
func TestPipelineWithDataParallel(t *testing.T) {
	const batch, accum, steps, R = 2, 2, 3, 2
	for _, f := range fixtures {
		for _, name := range []string{"1f1b", "zbv"} {
			t.Run(f.name+"/"+name, func(t *testing.T) {
				cfg := f.config(batch, R*accum, steps, "adamw")
				want := reference(t, cfg)
				m, sc := loadForStages(t, cfg)
				var reps []*pipeline.Runner
				for r := 0; r < R; r++ {
					sched, err := pipeline.New(name, 2, accum, 0)
					require.NoError(t, err)
					plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: sched.Stages(), BatchSize: batch})
					require.NoError(t, err)
					run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: sc,
						NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
					require.NoError(t, err)
					reps = append(reps, run)
				}
				ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{NoLabels: !f.labels, Inputs: f.inputs})
				require.NoError(t, err)
				next := 0
				for step := 0; step < steps; step++ {
					loss := 0.0
					for _, run := range reps {
						micro := make([]pipeline.Batch, accum)
						for i := range micro {
							idx := make([]int, batch)
							for k := range idx {
								idx[k] = next % ds.Len()
								next++
							}
							in, labels, err := ds.Gather(0, idx)
							require.NoError(t, err)
							micro[i] = pipeline.Batch{Inputs: in, Labels: labels}
						}
						require.NoError(t, run.ForwardBackward(context.Background(), micro))
						loss += run.LastStats().Loss / R
					}
					require.NoError(t, pipeline.AverageReplicas(reps))
					for _, run := range reps {
						require.NoError(t, run.Update())
					}
					assert.LessOrEqual(t, math.Abs(loss-want[step]), 1e-5*math.Abs(want[step]), "step %d: %.8f, one process %.8f", step+1, loss, want[step])
				}
				assert.NotEqual(t, want[0], want[steps-1])
			})
		}
	}
}

// TestReceiveTimeout: a rank whose peer never sends fails the step within
// the receive timeout, naming the rank, device, micro-batch, stage and the
// silent peer; the other ranks stop too (the step returns).
func TestReceiveTimeout(t *testing.T) {
	f := fixtures[1]
	cfg := f.config(2, 2, 1, "sgd")
	m, err := importer.Load(cfg.Model)
	require.NoError(t, err)
	sched, err := pipeline.New("1f1b", 2, 2, 0)
	require.NoError(t, err)
	// rank 0 "hangs": it never sends its second micro-batch's activations
	var kept []pipeline.Action
	for _, a := range sched.Actions[0] {
		if !(a.Kind == pipeline.SendAct && a.Micro == 1) {
			kept = append(kept, a)
		}
	}
	sched.Actions[0] = kept
	plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 2})
	require.NoError(t, err)
	run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{LossOutput: "loss"}, RecvTimeout: 3 * time.Second})
	require.NoError(t, err)
	ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{NoLabels: true, Inputs: f.inputs})
	require.NoError(t, err)
	var micro []pipeline.Batch
	for i := 0; i < 2; i++ {
		in, _, err := ds.Gather(0, []int{2 * i, 2*i + 1})
		require.NoError(t, err)
		micro = append(micro, pipeline.Batch{Inputs: in})
	}
	err = run.ForwardBackward(context.Background(), micro)
	require.ErrorIs(t, err, pipeline.ErrTimeout)
	// rank 1 times out waiting for the activations; rank 0, waiting for
	// the gradients that never come, may time out at the same moment.
	assert.Regexp(t, `rank 1 \(cpu:1\) waited 3s for the activations of micro-batch 1, stage 1, from rank 0|rank 0 \(cpu:0\) waited 3s for the gradients of micro-batch 1, stage 1, from rank 1`, err.Error())
}

// TestRecomputePerStage: with --recompute each stage keeps less per
// micro-batch in flight from its forward pass to its backward, and the
// losses stay those of one process.
func TestRecomputePerStage(t *testing.T) {
	f := fixtures[0]
	cfg := f.config(2, 4, 2, "sgd")
	want := reference(t, cfg)
	kept := map[bool][]int64{}
	for _, recompute := range []bool{false, true} {
		m, err := importer.Load(cfg.Model)
		require.NoError(t, err)
		lc, err := train.ParseLoss(cfg.Loss)
		require.NoError(t, err)
		sched, err := pipeline.New("1f1b", 2, cfg.GradAccum, 0)
		require.NoError(t, err)
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: cfg.BatchSize})
		require.NoError(t, err)
		run, err := pipeline.NewRunner(plan, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{Loss: train.LossAppender(m, lc), Recompute: recompute},
			NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return train.NewOptimizer(cfg, ps) }})
		require.NoError(t, err)
		ds, err := data.OpenNPZ(cfg.Data, data.NPZOptions{Inputs: f.inputs})
		require.NoError(t, err)
		next := 0
		for step := 0; step < cfg.Steps; step++ {
			var micro []pipeline.Batch
			for i := 0; i < cfg.GradAccum; i++ {
				in, labels, err := ds.Gather(0, []int{next % ds.Len(), (next + 1) % ds.Len()})
				require.NoError(t, err)
				next += 2
				micro = append(micro, pipeline.Batch{Inputs: in, Labels: labels})
			}
			st, err := run.Step(context.Background(), micro)
			require.NoError(t, err)
			assert.LessOrEqual(t, math.Abs(st.Loss-want[step]), 1e-5*math.Abs(want[step]), "recompute %v step %d", recompute, step+1)
		}
		for _, p := range run.Profile() {
			kept[recompute] = append(kept[recompute], p.KeptBytes)
		}
	}
	for s := range kept[false] {
		assert.Less(t, kept[true][s], kept[false][s], "stage %d keeps less with --recompute", s)
	}
	t.Logf("bytes kept per micro-batch: %v without, %v with --recompute", kept[false], kept[true])
}
