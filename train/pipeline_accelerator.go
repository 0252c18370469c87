package train

import (
	"context"
	"fmt"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// PipelineConfig is pipeline parallelism in the Go API
// (AcceleratorConfig.Pipeline), the options of `onnxtrain train
// --pipeline-stages` under the same names: the model is cut into Stages
// ranks, each owning its stages' parameters, gradients and optimizer
// state, and one optimizer step consumes MicroBatches micro-batches, as
// GradAccum = MicroBatches would in one process.
type PipelineConfig struct {
	// Stages is the number of ranks of one pipeline replica (0: off).
	// With AcceleratorConfig.Group, process p is rank p mod Stages of
	// replica p div Stages; without it every rank runs in this process.
	Stages int
	// MicroBatches per run of the schedule (0: AcceleratorConfig.GradAccum,
	// and one run a step). With both set, as `--micro-batches M
	// --grad-accum K`, one step is GradAccum runs of MicroBatches
	// micro-batches each, their gradients summed: K×M micro-batches, as
	// GradAccum = K×M would in one process.
	MicroBatches int
	// Schedule is gpipe, 1f1b (default), interleaved, zb1p or zbv;
	// VirtualStages the chunks per rank of interleaved (0: 2).
	Schedule      string
	VirtualStages int
	// SplitAt cuts before these nodes (or the first reader of these
	// initializers) instead of automatically.
	SplitAt []string
	// Devices of the ranks in one process ("cpu:0", "cpu:1", ...); a
	// worker count after '=' ("cpu:0=3") gives that CPU device a pool of
	// that many workers instead of its even share of the cores.
	Devices []string
	// Partition balances the stages by the cost model ("estimate", the
	// default) or by timing the model's pieces ("profile", which needs
	// PipelineOptions.Profile).
	Partition string
	// StageMemory bounds every stage's estimated memory ("4GiB").
	StageMemory string
}

// PipelineOptions tune PreparePipeline.
type PipelineOptions struct {
	// BatchSize is the size of one micro-batch (the partitioner's
	// activation estimates use it; 1 when 0).
	BatchSize int
	// NewOptimizer makes one stage's optimizer over that stage's own
	// parameters (required).
	NewOptimizer func(params []*optim.Param) (optim.Optimizer, error)
	// OptimizerSlots is the optimizer state per parameter the memory
	// estimate counts (0: 2, AdamW's; SGD with momentum has 1).
	OptimizerSlots int
	// Profile are micro-batches to time the model's pieces on, for
	// Partition "profile".
	Profile []*data.Batch
	// TrainOnly freezes every parameter whose name does not match (as
	// ModelOptions.TrainOnly): frozen ones are constants of their stages.
	TrainOnly string
}

// PipelineModel is a model prepared for pipeline parallelism: Step runs a
// step's micro-batches through the stages on the schedule, then the
// caller clips and calls OptimizerStep, as with a Model.
type PipelineModel struct {
	acc    *Accelerator
	runner *pipeline.Runner
	close  func()
	// micro is the micro-batches of one run of the schedule, flushes the
	// runs of one step (PipelineConfig.MicroBatches with GradAccum).
	micro, flushes int
	replan         zeroBubbleReplan
	// Plan is the cut (stages, parameters, crossing tensors).
	Plan *pipeline.Plan
	// Schedule is the per-rank action lists the runner follows.
	Schedule *pipeline.Schedule
}

// PreparePipeline cuts m into AcceleratorConfig.Pipeline.Stages ranks and
// builds this process's stages. MixedPrecision bf16 autocasts each stage
// where the whole graph would be; fp16 adds the Accelerator's one loss
// scale (GradScaler) to every stage's backward seed, and OptimizerStep
// skips a step whose gradients hold an inf or NaN in any stage (of any
// process), as the command's pipelined fp16 run does; SyncBatchNorm sums
// each stage's batch statistics over its replicas; ZeRO 1 shards each
// stage's optimizer state over the data-parallel replicas of that stage,
// ZeRO 2 its averaged gradients too (reduce-scattered over them).
func (a *Accelerator) PreparePipeline(ctx context.Context, m *graph.Model, loss LossConfig, opts PipelineOptions) (*PipelineModel, error) {
	pc := a.cfg.Pipeline
	switch {
	case pc.Stages <= 0:
		return nil, fmt.Errorf("accelerator: PreparePipeline needs Pipeline.Stages > 0, got %d", pc.Stages)
	case opts.NewOptimizer == nil:
		return nil, fmt.Errorf("accelerator: PreparePipeline needs PipelineOptions.NewOptimizer (each stage steps its own parameters)")
	case pc.MicroBatches < 0:
		return nil, fmt.Errorf("accelerator: Pipeline.MicroBatches must be at least 1 (or 0: GradAccum), got %d", pc.MicroBatches)
	}
	M, K := pc.MicroBatches, 1
	if M <= 0 {
		M = a.cfg.GradAccum
	} else if a.cfg.GradAccum > 1 {
		K = a.cfg.GradAccum // K runs of the schedule a step (Step)
	}
	M = max(M, 1)
	rank, replicas, replica := 0, 1, 0
	if g := a.cfg.Group; g != nil {
		if g.WorldSize()%pc.Stages != 0 {
			return nil, fmt.Errorf("accelerator: Pipeline.Stages %d over %d processes: the processes must be a multiple of the stages", pc.Stages, g.WorldSize())
		}
		replicas, rank, replica = g.WorldSize()/pc.Stages, g.Rank()%pc.Stages, g.Rank()/pc.Stages
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 1
	}
	pb := pipelineBuild{Stages: pc.Stages, Micro: M, Schedule: pc.Schedule, Virtual: pc.VirtualStages, SplitAt: pc.SplitAt,
		Devices: strings.Join(pc.Devices, ","), Partition: pc.Partition, StageMemory: pc.StageMemory, BatchSize: batch,
		Slots: opts.OptimizerSlots, Backend: a.cfg.Backend, Seed: a.cfg.Seed, Recompute: a.cfg.Recompute, MixedPrecision: a.cfg.MixedPrecision, Tuning: a.cfg.Tuning,
		Zero: a.cfg.Zero, TrainOnly: opts.TrainOnly, SyncBatchNorm: a.cfg.SyncBatchNorm, NewOptimizer: opts.NewOptimizer}
	if len(opts.Profile) > 0 {
		pb.First = func(context.Context) ([]pipeline.Batch, error) { return pipelineBatches(opts.Profile), nil }
	}
	built, err := buildPipeline(ctx, pb, m, loss, a.cfg.Group, rank, replicas, replica)
	if err != nil {
		return nil, fmt.Errorf("accelerator: %w", err)
	}
	return &PipelineModel{acc: a, runner: built.runner, close: built.close, micro: M, flushes: K, Plan: built.plan, Schedule: built.sched}, nil
}

func pipelineBatches(bs []*data.Batch) []pipeline.Batch {
	out := make([]pipeline.Batch, len(bs))
	for i, b := range bs {
		out[i] = pipeline.Batch{Inputs: b.Inputs, Labels: b.Labels}
	}
	return out
}

// Step runs one optimizer step's micro-batches (every process of a
// replica passes the same ones; each stage reads what it needs) forward
// and backward through the stages and returns the step's loss: the mean
// over the micro-batches (and replicas). With MicroBatches M and GradAccum
// K both set, the step's up to K×M micro-batches run as K runs of the
// schedule of M each, their gradients summed. The gradients wait in the
// stages for ClipGradNorm and OptimizerStep.
func (p *PipelineModel) Step(ctx context.Context, micro []*data.Batch) (float64, error) {
	if s := p.acc.amp.scaler; s != nil {
		// fp16: every stage's seed carries the one loss scale (amp.go).
		p.runner.SetLossScale(s.Scale())
	}
	if p.flushes <= 1 {
		if err := p.runner.ForwardBackwardPartial(ctx, pipelineBatches(micro)); err != nil {
			return 0, err
		}
		return p.runner.LastStats().Loss, nil
	}
	M := p.micro
	if len(micro) == 0 || len(micro) > p.flushes*M {
		return 0, fmt.Errorf("pipeline step: %d micro-batches, want 1 to %d (GradAccum %d runs of MicroBatches %d)", len(micro), p.flushes*M, p.flushes, M)
	}
	stats, err := runFlushes(ctx, p.runner, pipelineBatches(micro), M, p.flushes)
	return stats.Loss, err
}

// ClipGradNorm scales the gradients of every stage so that their joint
// L2 norm is at most maxNorm (0: only measure) and returns the norm
// before clipping. With fp16 the gradients are unscaled first (once per
// step), so the norm is that of the true gradients.
func (p *PipelineModel) ClipGradNorm(maxNorm float64) (float64, error) {
	if err := p.unscale(); err != nil {
		return 0, err
	}
	return p.runner.ClipGradNorm(maxNorm)
}

// unscale divides the step's gradients of every stage by the loss scale
// and agrees, over every stage and process, whether any was inf or NaN
// (fp16 only; once per step).
func (p *PipelineModel) unscale() error {
	s := p.acc.amp.scaler
	if s == nil {
		return nil
	}
	_, err := s.unscaleWith(func(inv float32) (bool, error) { return p.runner.UnscaleGrads(context.Background(), inv) })
	return err
}

// OptimizerStep steps every stage's optimizer over its own parameters and
// counts the step on the Accelerator. With fp16 it unscales the gradients
// (if ClipGradNorm did not), updates the loss scale, and skips the update
// when any stage's gradients held an inf or NaN: every stage skips the
// same step (Accelerator.StepWasSkipped tells; the step still counts).
func (p *PipelineModel) OptimizerStep() error {
	a := p.acc
	a.amp.lastSkipped = false
	if s := a.amp.scaler; s != nil {
		if err := p.unscale(); err != nil {
			return err
		}
		if s.Update() {
			a.amp.skipped++
			a.amp.lastSkipped = true
			a.step++
			a.log.WithField("step", a.step).Warnf("gradients hold inf/NaN at loss scale %g: step skipped in every stage, scale now %g", s.Scale()/s.cfg.BackoffFactor, s.Scale())
			return p.afterStep()
		}
	}
	if err := p.runner.UpdateContext(context.Background()); err != nil {
		return err
	}
	a.step++
	return p.afterStep()
}

// afterStep replans a zero-bubble schedule for the measured pass times
// once (zeroBubbleReplan); Schedule follows the runner's.
func (p *PipelineModel) afterStep() error {
	err := p.replan.afterStep(context.Background(), p.runner, func(f string, args ...any) { p.acc.log.Infof(f, args...) })
	p.Schedule = p.runner.Schedule
	return err
}

// SetLR sets the learning rate of every stage's optimizer.
func (p *PipelineModel) SetLR(lr float64) { p.runner.SetLR(lr) }

// Weights are the parameters and buffers of this process's stages under
// their ONNX names.
func (p *PipelineModel) Weights() (params, buffers map[string]*graph.Tensor) {
	return p.runner.Weights()
}

// Runner is the pipeline runner (per-stage profile, idle fractions).
func (p *PipelineModel) Runner() *pipeline.Runner { return p.runner }

// Close releases the connections to the other stages' processes.
func (p *PipelineModel) Close() {
	if p.close != nil {
		p.close()
		p.close = nil
	}
}
