package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

const (
	transformerLossModel = "../models/transformer_loss/transformer_loss_train.onnx"
	transformerLossData  = "../models/transformer_loss/train_case.npz"
)

// transformerLossConfig is `train` on the transformer fixture (loss in the
// graph) with AdamW and --grad-accum 4, micro-batches of 2.
func transformerLossConfig() train.Config {
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data, cfg.Loss = transformerLossModel, transformerLossData, "output:loss"
	cfg.BatchSize, cfg.GradAccum, cfg.Steps = 2, 4, 3
	cfg.Shuffle, cfg.LogFormat = false, "json"
	cfg.Optimizer, cfg.LR, cfg.WeightDecay = "adamw", 1e-3, 0.05
	return cfg
}

// The Go API's pipeline (AcceleratorConfig.Pipeline, PreparePipeline): two
// stages on cpu:0 and cpu:1 of this process, 4 micro-batches of 2 per step,
// give the losses of `train --grad-accum 4` in one process, step for step,
// for every schedule.
func TestPreparePipelineMatchesGradAccum(t *testing.T) {
	want := runRecords(t, transformerLossConfig())
	require.Len(t, want, 3)
	for _, schedule := range []string{"gpipe", "1f1b", "interleaved", "zb1p", "zbv"} {
		t.Run(schedule, func(t *testing.T) {
			got, pm := preparedPipelineSteps(t, train.AcceleratorConfig{Seed: 0,
				Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: schedule, Devices: []string{"cpu:0", "cpu:1"}}}, len(want), nil)
			require.Equal(t, schedule, pm.Schedule.Name)
			for i := range want {
				assert.LessOrEqual(t, math.Abs(got[i].loss-want[i].Loss), 1e-5*math.Abs(want[i].Loss), "step %d: got %.8f, want %.8f", i+1, got[i].loss, want[i].Loss)
			}
		})
	}
}

// MicroBatches 2 with GradAccum 2 in the Go API: each Step of 4
// micro-batches runs the schedule twice, summing the gradients, and gives
// the losses of `train --grad-accum 4` in one process, as the command's
// `--micro-batches 2 --grad-accum 2` does; a step of 5 is refused.
func TestPreparePipelineFlushes(t *testing.T) {
	want := runRecords(t, transformerLossConfig())
	require.Len(t, want, 3)
	for _, schedule := range []string{"1f1b", "zbv"} {
		t.Run(schedule, func(t *testing.T) {
			got, pm := preparedPipelineSteps(t, train.AcceleratorConfig{Seed: 0, GradAccum: 2,
				Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 2, Schedule: schedule, Devices: []string{"cpu:0", "cpu:1"}}}, len(want), nil)
			for i := range want {
				assert.LessOrEqual(t, math.Abs(got[i].loss-want[i].Loss), 1e-5*math.Abs(want[i].Loss), "step %d: got %.8f, want %.8f", i+1, got[i].loss, want[i].Loss)
			}
			batch := &data.Batch{}
			_, err := pm.Step(context.Background(), []*data.Batch{batch, batch, batch, batch, batch})
			require.ErrorContains(t, err, "5 micro-batches, want 1 to 4")
		})
	}
}

// PreparePipeline refuses what pipelining does not do, naming it.
func TestPreparePipelineRefusals(t *testing.T) {
	ctx := context.Background()
	m, err := importer.Load(transformerLossModel)
	require.NoError(t, err)
	newOpt := func(ps []*optim.Param) (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.1}) }
	loss := train.LossConfig{Kind: "output", Output: "loss"}
	for _, tc := range []struct {
		cfg  train.AcceleratorConfig
		opts train.PipelineOptions
		want string
	}{
		{train.AcceleratorConfig{}, train.PipelineOptions{NewOptimizer: newOpt}, "Pipeline.Stages > 0"},
		{train.AcceleratorConfig{Pipeline: train.PipelineConfig{Stages: 2}}, train.PipelineOptions{}, "NewOptimizer"},
		{train.AcceleratorConfig{Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: -1}}, train.PipelineOptions{NewOptimizer: newOpt}, "MicroBatches must be at least 1"},
		{train.AcceleratorConfig{Pipeline: train.PipelineConfig{Stages: 2, Schedule: "round-robin"}}, train.PipelineOptions{NewOptimizer: newOpt}, "round-robin"},
	} {
		acc, err := train.NewAccelerator(tc.cfg)
		require.NoError(t, err)
		_, err = acc.PreparePipeline(ctx, m, loss, tc.opts)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// The pipeline options in a YAML config (the flags' names) train as the
// flags do: the losses of --grad-accum 4 in one process.
func TestPipelineYAML(t *testing.T) {
	want := runRecords(t, transformerLossConfig())
	path := filepath.Join(t.TempDir(), "pipe.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`pipeline-stages: 2
micro-batches: 4
schedule: zb1p
devices: cpu:0,cpu:1
partition: estimate
stage-memory: 1GiB
`), 0o600))
	cfg := transformerLossConfig()
	cfg.GradAccum = 1
	require.NoError(t, train.LoadYAML(path, &cfg))
	require.Equal(t, 2, cfg.PipelineStages)
	require.Equal(t, "zb1p", cfg.Schedule)
	require.Equal(t, "cpu:0,cpu:1", cfg.Devices)
	assertSameRecords(t, want, runRecords(t, cfg))
}

// The small GPT export trained from its uint16 token file with a 2-stage
// pipeline (2 micro-batches of 2 windows per step) follows PyTorch's
// batch-4 AdamW losses (models/gpt/tokens_golden.json) as the one-process
// run does, and equals `--grad-accum 2` to 1e-5.
func TestPipelineGPTFromTokenFile(t *testing.T) {
	var g tokenGolden
	b, err := os.ReadFile("../models/gpt/tokens_golden.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &g))
	one := gptTokenConfig(g)
	one.BatchSize, one.GradAccum = g.BatchSize/2, 2
	want := runRecords(t, one)
	for _, schedule := range []string{"1f1b", "zbv"} {
		cfg := gptTokenConfig(g)
		cfg.BatchSize, cfg.PipelineStages, cfg.MicroBatches, cfg.Schedule = g.BatchSize/2, 2, 2, schedule
		got := runRecords(t, cfg)
		assertSameRecords(t, want, got)
		require.Len(t, got, len(g.Losses))
		for i, ref := range g.Losses {
			assert.LessOrEqual(t, math.Abs(got[i].Loss-ref), 1e-3*math.Abs(ref), "%s step %d: loss %.7f, PyTorch %.7f", schedule, i+1, got[i].Loss, ref)
		}
	}
}

// pipelineStepRecord is what one PreparePipeline step reports.
type pipelineStepRecord struct {
	loss, norm, scale float64
	skipped           bool
}

// preparedPipelineSteps trains the transformer fixture through the Go
// API's pipeline (PreparePipeline on acfg, 4 micro-batches of 2 per step,
// measuring the gradient norm as the command logs it) for steps steps;
// before the first, setup may change the Accelerator.
func preparedPipelineSteps(t *testing.T, acfg train.AcceleratorConfig, steps int, setup func(*train.Accelerator), with ...func(*train.PipelineOptions)) ([]pipelineStepRecord, *train.PipelineModel) {
	t.Helper()
	ctx := context.Background()
	acc, err := train.NewAccelerator(acfg)
	require.NoError(t, err)
	m, err := importer.Load(transformerLossModel)
	require.NoError(t, err)
	opts := train.PipelineOptions{BatchSize: 2,
		NewOptimizer: func(ps []*optim.Param) (optim.Optimizer, error) {
			return train.NewOptimizer(transformerLossConfig(), ps)
		}}
	for _, w := range with {
		w(&opts)
	}
	pm, err := acc.PreparePipeline(ctx, m, train.LossConfig{Kind: "output", Output: "loss"}, opts)
	require.NoError(t, err)
	t.Cleanup(pm.Close)
	if setup != nil {
		setup(acc)
	}
	ds, err := data.OpenNPZ(transformerLossData, data.NPZOptions{NoLabels: true})
	require.NoError(t, err)
	loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2})
	require.NoError(t, err)
	var got []pipelineStepRecord
	for epoch := 0; len(got) < steps; epoch++ {
		var window []*data.Batch
		for b, err := range loader.Epoch(ctx, epoch, 0) {
			require.NoError(t, err)
			window = append(window, b)
			if len(window) < 4 {
				continue
			}
			loss, err := pm.Step(ctx, window)
			require.NoError(t, err)
			norm, err := pm.ClipGradNorm(0)
			require.NoError(t, err)
			require.NoError(t, pm.OptimizerStep())
			got = append(got, pipelineStepRecord{loss: loss, norm: norm, scale: acc.LossScale(), skipped: acc.StepWasSkipped()})
			window = nil
			if len(got) == steps {
				break
			}
		}
	}
	assert.Equal(t, steps, acc.Step())
	return got, pm
}

// fp16 in the Go API: PreparePipeline scales every stage's backward seed
// by the Accelerator's one loss scale and agrees on inf/NaN over every
// stage. On the transformer fixture, two stages (1f1b and zbv) give the
// per-step losses, gradient norms and loss scales of the command's
// pipelined fp16 run and of one process's fp16 run with --grad-accum 4,
// to 1e-5; fp16 changes the run.
func TestPreparePipelineFP16(t *testing.T) {
	const steps = 6
	one := transformerLossConfig()
	one.MixedPrecision, one.Steps = "fp16", steps
	want := runRecords(t, one)
	require.Len(t, want, steps)
	f32 := transformerLossConfig()
	f32.Steps = steps
	plain := runRecords(t, f32)
	for _, schedule := range []string{"1f1b", "zbv"} {
		t.Run(schedule, func(t *testing.T) {
			cmd := transformerLossConfig()
			cmd.MixedPrecision, cmd.Steps = "fp16", steps
			cmd.PipelineStages, cmd.Schedule, cmd.GradAccum, cmd.MicroBatches = 2, schedule, 1, 4
			piped := runRecords(t, cmd)
			require.Len(t, piped, steps)
			got, _ := preparedPipelineSteps(t, train.AcceleratorConfig{MixedPrecision: "fp16",
				Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: schedule, Devices: []string{"cpu:0", "cpu:1"}}}, steps, nil)
			differs := false
			for i := range want {
				for _, ref := range []train.StepRecord{want[i], piped[i]} {
					assert.InDelta(t, ref.Loss, got[i].loss, 1e-5*math.Abs(ref.Loss), "step %d loss", i+1)
					assert.InDelta(t, ref.GradNorm, got[i].norm, 1e-5*ref.GradNorm, "step %d grad norm", i+1)
					assert.Equal(t, ref.LossScale, got[i].scale, "step %d loss scale", i+1)
					assert.Equal(t, ref.Skipped, got[i].skipped, "step %d skipped", i+1)
				}
				differs = differs || math.Abs(plain[i].GradNorm-got[i].norm) > 1e-5*plain[i].GradNorm
			}
			assert.True(t, differs, "fp16 must change the run for the comparison to mean something")
		})
	}
}

// An overflowing loss scale (3e38: the float16 gradients become inf) makes
// OptimizerStep skip the step in every stage: no parameter moves, the scale
// halves, StepWasSkipped and SkippedSteps say so; the next steps skip until
// the scale is small enough, then train.
func TestPreparePipelineFP16Skips(t *testing.T) {
	acfg := train.AcceleratorConfig{MixedPrecision: "fp16", Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: "zb1p", Devices: []string{"cpu:0", "cpu:1"}}}
	var acc *train.Accelerator
	got, pm := preparedPipelineSteps(t, acfg, 1, func(a *train.Accelerator) {
		acc = a
		require.NoError(t, a.GradScaler().LoadState(map[string]float64{"scale": 3e38, "growth_tracker": 0}))
	})
	require.Len(t, got, 1)
	assert.True(t, got[0].skipped, "step 1 is skipped")
	assert.Equal(t, 1.5e38, got[0].scale, "the scale backs off by half")
	assert.Equal(t, 1, acc.SkippedSteps())
	// The parameters did not move: they equal the model file's.
	fresh, err := importer.Load(transformerLossModel)
	require.NoError(t, err)
	params, _ := pm.Weights()
	require.NotEmpty(t, params)
	for name, p := range params {
		assert.Equal(t, fresh.Graph.Initializers[name].Float32s(), p.Float32s(), "parameter %s moved in a skipped step", name)
	}
	// A normal scale trains: the next step is not skipped and moves them.
	got, pm = preparedPipelineSteps(t, acfg, 1, nil)
	assert.False(t, got[0].skipped)
	params, _ = pm.Weights()
	moved := 0
	for name, p := range params {
		if !assert.ObjectsAreEqual(fresh.Graph.Initializers[name].Float32s(), p.Float32s()) {
			moved++
		}
	}
	assert.Positive(t, moved, "an unskipped step moves the parameters")
}

// PipelineOptions.TrainOnly: the stages train only the matching parameters
// (here the second half's MLP and head, and the attention projections of
// the first), as one process with --train-only does: the same losses and
// gradient norms, and the frozen parameters keep their values.
func TestPreparePipelineTrainOnly(t *testing.T) {
	const pattern = `^(block\.mlp\.|head\.|block\.attn\.proj\.)`
	cfg := transformerLossConfig()
	cfg.TrainOnly = pattern
	want := runRecords(t, cfg)
	got, pm := preparedPipelineSteps(t, train.AcceleratorConfig{Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: "zb1p"}}, len(want), nil,
		func(o *train.PipelineOptions) { o.TrainOnly = pattern })
	for i := range want {
		assert.InDelta(t, want[i].Loss, got[i].loss, 1e-5*want[i].Loss, "step %d loss", i+1)
		assert.InDelta(t, want[i].GradNorm, got[i].norm, 1e-5*want[i].GradNorm, "step %d grad norm", i+1)
	}
	params, _ := pm.Weights()
	assert.Contains(t, params, "block.attn.proj.weight")
	assert.Contains(t, params, "block.mlp.0.weight")
	assert.NotContains(t, params, "block.attn.qkv.weight", "frozen: a constant of its stage")
	assert.NotContains(t, params, "embed.weight", "frozen: a constant of its stage")
	all := runRecords(t, transformerLossConfig())
	assert.NotEqual(t, all[len(all)-1].Loss, want[len(want)-1].Loss, "freezing changes the run")
}

// Per-device worker counts ("cpu:0=2,cpu:1=1") reach the runner's device
// pools from the Go API (PipelineConfig.Devices), from a YAML file's
// devices key and from the command (whose log names them), and the runs
// still equal --grad-accum 4.
func TestPipelineDeviceWorkerCounts(t *testing.T) {
	want := runRecords(t, transformerLossConfig())
	got, pm := preparedPipelineSteps(t, train.AcceleratorConfig{
		Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: "1f1b", Devices: []string{"cpu:0=2", "cpu:1=1"}}}, len(want), nil)
	assert.Equal(t, []int{2, 1}, pm.Runner().Workers)
	assert.Equal(t, []string{"cpu:0", "cpu:1"}, pm.Runner().Devices)
	for i := range want {
		assert.InDelta(t, want[i].Loss, got[i].loss, 1e-5*want[i].Loss, "step %d", i+1)
	}

	path := filepath.Join(t.TempDir(), "pipe.yaml")
	require.NoError(t, os.WriteFile(path, []byte("pipeline-stages: 2\nmicro-batches: 4\ndevices: cpu:0=1,cpu:1=3\n"), 0o600))
	cfg := transformerLossConfig()
	cfg.GradAccum = 1
	require.NoError(t, train.LoadYAML(path, &cfg))
	require.Equal(t, "cpu:0=1,cpu:1=3", cfg.Devices)
	assertSameRecords(t, want, runRecords(t, cfg))
	cfg.LogFormat = "text"
	var msg bytes.Buffer
	_, err := train.Run(context.Background(), cfg, io.Discard, &msg)
	require.NoError(t, err)
	assert.Contains(t, msg.String(), "on cpu:0=1,cpu:1=3 (schedule 1f1b")
	cfg.Devices = "cpu:0=0,cpu:1"
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `device "cpu:0=0" (rank 0): the worker count`)
}
