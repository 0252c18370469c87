package train

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"math"

	"github.com/sirupsen/logrus"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// AcceleratorConfig configures an Accelerator.
type AcceleratorConfig struct {
	// GradAccum is the number of micro-batches per optimizer step.
	GradAccum int
	// Backend runs the model ("cpu" by default).
	Backend string
	// Seed seeds random ops (Dropout) and data shuffling.
	Seed int64
	// MixedPrecision is "no" (default), "bf16" or "fp16": the model runs
	// under graph.AutoCast with float32 master weights; fp16 adds dynamic
	// loss scaling (GradScaler, amp.go).
	MixedPrecision string
	// Log receives main-process messages; nil discards them.
	Log *logrus.Logger
	// Group, when set, makes training data parallel over its processes:
	// each sees its shard of every global batch, gradients are averaged
	// across them at the end of every accumulation window, and only rank 0
	// logs and saves. Nil means one process.
	Group *distrib.Group
	// BucketBytes bounds one gradient all-reduce (default 25 MB, as
	// PyTorch DDP's buckets).
	BucketBytes int
	// CompressBF16 sends gradients as bfloat16 on the wire.
	CompressBF16 bool
	// NoOverlap reduces gradients in Backward, after the backward pass,
	// instead of while it runs (overlap.go); the result is the same.
	NoOverlap bool
	// Zero is the ZeRO stage (zero.go): 0 replicates everything, 1
	// shards the optimizer state across processes, 2 also the reduced
	// gradients. With one process it changes nothing.
	Zero int
	// SyncBatchNorm normalises training-mode BatchNormalization with the
	// statistics of the global batch (all processes), as
	// torch.nn.SyncBatchNorm; with one process it changes nothing.
	SyncBatchNorm bool
	// Recompute builds models with activation recomputation
	// (ProgramConfig.Recompute): less memory per step, a little more time.
	Recompute bool
	// PrimitivesOnly builds models with ProgramConfig.PrimitivesOnly.
	PrimitivesOnly bool
	// Tuning builds models with ProgramConfig.Tuning.
	Tuning backend.Tuning
	// NoPushDownGather builds models with ProgramConfig.NoPushDownGather.
	NoPushDownGather bool
	// FusedStep runs each optimizer step as one Run of one program: the
	// optimizer's update of every parameter inside the training step,
	// right after its gradient is final (program_step.go), with no
	// gradient sums kept between steps. The recipe is fixed up front: one
	// micro-batch per step (GradAccum 1), one process, no ZeRO (fp16's
	// loss scaling runs inside the step too: its found-inf flag gates the
	// updates and reaches StepWasSkipped); the clips are declared here (ClipGradNorm,
	// ClipGradValue), and the Accelerator's ClipGradNorm and ClipGradValue
	// then only report the norm and check that they ask for the same.
	// Without ClipGradNorm and fp16 each parameter is updated as soon as
	// its gradient is final, so gradients never all live at once; with
	// either every gradient lives until the unscale and clip nodes at the
	// end of backward, and the updates follow them. PrepareOptimizer binds the optimizer, which
	// must be one of train/optim's.
	FusedStep bool
	// ClipGradNorm and ClipGradValue are the clips FusedStep applies inside
	// the step (0: none).
	ClipGradNorm, ClipGradValue float64
	// Pipeline cuts models into stages (PreparePipeline,
	// pipeline_accelerator.go).
	Pipeline PipelineConfig
}

// Accelerator is Hugging Face accelerate's training loop in Go. Prepare the
// model, optimizer, schedule and data loader with it, then:
//
//	for batch, err := range loader.Epoch(ctx, epoch) {
//		err = acc.Accumulate(func() error {
//			out, err := model.Forward(ctx, batch) // loss, and gradients pending
//			if err != nil {
//				return err
//			}
//			acc.Backward(out) // adds them, scaled by 1/GradAccum
//			if acc.SyncGradients() {
//				acc.ClipGradNorm(model, 1.0)
//			}
//			opt.Step() // acts only at the end of an accumulation window
//			sched.Step()
//			opt.ZeroGrad()
//			return nil
//		})
//	}
//
// Unlike PyTorch, Forward runs forward and backward together (the program
// is one compiled graph); Backward adds the gradients it computed.
type Accelerator struct {
	cfg AcceleratorConfig
	log *logrus.Logger

	step      int // optimizer steps taken
	micro     int // micro-batches in the current window
	sync      bool
	endOfData bool
	// data position: batches of epoch consumed; checkpoint counter
	epoch, batchInEpoch int
	counter             int

	models []*Model
	opts   []*Optimizer
	scheds []*Scheduler
	loader []*DataLoader
	extra  map[string]Checkpointable
	amp    ampState   // amp.go: mixed precision, loss scaler
	comm   *groupComm // comm.go: the collective ops' communicator (more than one process)
}

// Checkpointable is state registered with RegisterForCheckpointing.
type Checkpointable interface {
	StateDict() ([]byte, error)
	LoadStateDict([]byte) error
}

// NewAccelerator checks the configuration.
func NewAccelerator(cfg AcceleratorConfig) (*Accelerator, error) {
	if cfg.GradAccum <= 0 {
		cfg.GradAccum = 1
	}
	if cfg.Backend == "" {
		cfg.Backend = "cpu"
	}
	amp, err := newAMP(cfg.MixedPrecision)
	if err != nil {
		return nil, err
	}
	if cfg.Zero < 0 || cfg.Zero > 2 {
		return nil, fmt.Errorf("accelerator: --zero must be 0, 1 or 2, got %d", cfg.Zero)
	}
	if cfg.FusedStep {
		if err := fusedStepConflict(cfg); err != nil {
			return nil, err
		}
	}
	log := cfg.Log
	if log == nil {
		log = logrus.New()
		log.Out = discard{}
	}
	return &Accelerator{cfg: cfg, log: log, extra: map[string]Checkpointable{}, amp: amp}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// GradAccum is the number of micro-batches per optimizer step.
func (a *Accelerator) GradAccum() int { return a.cfg.GradAccum }

// Step is the number of optimizer steps taken so far.
func (a *Accelerator) Step() int { return a.step }

// SyncGradients reports whether the current micro-batch ends an
// accumulation window (the optimizer will step).
func (a *Accelerator) SyncGradients() bool { return a.sync }

// IsMainProcess reports whether this process logs and saves (rank 0).
func (a *Accelerator) IsMainProcess() bool { return a.ProcessIndex() == 0 }

// ProcessIndex is this process's rank.
func (a *Accelerator) ProcessIndex() int {
	if a.cfg.Group == nil {
		return 0
	}
	return a.cfg.Group.Rank()
}

// NumProcesses is the number of processes training together.
func (a *Accelerator) NumProcesses() int {
	if a.cfg.Group == nil {
		return 1
	}
	return a.cfg.Group.WorldSize()
}

// WaitForEveryone is a barrier across processes.
func (a *Accelerator) WaitForEveryone(ctx context.Context) error {
	if a.NumProcesses() == 1 {
		return ctx.Err()
	}
	return a.cfg.Group.Barrier(ctx)
}

// ReduceMean averages scalars across processes (for logged metrics).
func (a *Accelerator) ReduceMean(ctx context.Context, v ...float64) ([]float64, error) {
	if a.NumProcesses() == 1 {
		return v, ctx.Err()
	}
	all, err := a.cfg.Group.AllGatherObject(ctx, encodeFloats(v))
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(v))
	for _, b := range all {
		f, err := decodeFloats(b, len(v))
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] += f[i]
		}
	}
	for i := range out {
		out[i] /= float64(len(all))
	}
	return out, nil
}

// ReduceSum adds scalars across processes (for counts).
func (a *Accelerator) ReduceSum(ctx context.Context, v ...float64) ([]float64, error) {
	m, err := a.ReduceMean(ctx, v...)
	if err != nil {
		return nil, err
	}
	for i := range m {
		m[i] *= float64(a.NumProcesses())
	}
	return m, nil
}

func encodeFloats(v []float64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

func decodeFloats(b []byte, n int) ([]float64, error) {
	if len(b) != 8*n {
		return nil, fmt.Errorf("accelerator: a process sent %d bytes for %d values", len(b), n)
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out, nil
}

// Print logs a message on the main process only.
func (a *Accelerator) Print(format string, args ...any) {
	if a.IsMainProcess() {
		a.log.Infof(format, args...)
	}
}

// Gather concatenates a tensor across processes along dim 0 (float32,
// float64 and int64 tensors).
func (a *Accelerator) Gather(ctx context.Context, t *graph.Tensor) (*graph.Tensor, error) {
	if a.NumProcesses() == 1 {
		return t, ctx.Err()
	}
	raw, err := tensorio.EncodeSafetensors(map[string]*graph.Tensor{"t": t}, nil)
	if err != nil {
		return nil, err
	}
	all, err := a.cfg.Group.AllGatherObject(ctx, raw)
	if err != nil {
		return nil, err
	}
	parts := make([]*graph.Tensor, len(all))
	for i, b := range all {
		m, _, err := tensorio.DecodeSafetensors(b)
		if err != nil {
			return nil, fmt.Errorf("accelerator: gather from rank %d: %w", i, err)
		}
		parts[i] = m["t"]
	}
	return concatRows(parts)
}

// concatRows joins tensors of equal trailing shape along dim 0.
func concatRows(parts []*graph.Tensor) (*graph.Tensor, error) {
	first := parts[0]
	if first.Rank() == 0 {
		return nil, fmt.Errorf("accelerator: cannot gather a scalar along dim 0")
	}
	shape := append([]int{0}, first.Shape[1:]...)
	for _, p := range parts {
		if p.DType != first.DType || p.Rank() != first.Rank() || !graph.SameShape(p.Shape[1:], first.Shape[1:]) {
			return nil, fmt.Errorf("accelerator: gather: shapes %v and %v differ", first.Shape, p.Shape)
		}
		shape[0] += p.Shape[0]
	}
	out, err := graph.NewTensor(first.DType, shape)
	if err != nil {
		return nil, err
	}
	off := 0
	for _, p := range parts {
		switch d := out.Data.(type) {
		case []float32:
			off += copy(d[off:], p.Float32s())
		case []float64:
			off += copy(d[off:], p.Float64s())
		case []int64:
			off += copy(d[off:], p.Int64s())
		default:
			return nil, fmt.Errorf("accelerator: gather: dtype %v not supported", first.DType)
		}
	}
	return out, nil
}

// GatherForMetrics gathers like Gather, then drops the samples that were
// padded onto the last uneven batch so that metrics count each example once.
func (a *Accelerator) GatherForMetrics(ctx context.Context, t *graph.Tensor, b *data.Batch) (*graph.Tensor, error) {
	g, err := a.Gather(ctx, t)
	if err != nil || b == nil || b.Padding == 0 {
		return g, err
	}
	return sliceRows(g, g.Shape[0]-b.Padding)
}

// Reduce sums (or averages, with mean) a float32 tensor across processes, in place.
func (a *Accelerator) Reduce(ctx context.Context, t *graph.Tensor, mean bool) (*graph.Tensor, error) {
	if a.NumProcesses() == 1 {
		return t, ctx.Err()
	}
	if t.DType != graph.Float32 {
		return nil, fmt.Errorf("accelerator: Reduce needs float32, got %v", t.DType)
	}
	op := distrib.Sum
	if mean {
		op = distrib.Mean
	}
	return t, a.cfg.Group.AllReduce(ctx, t.Float32s(), op)
}

// Broadcast sends the main process's float32 tensor to every process, in place.
func (a *Accelerator) Broadcast(ctx context.Context, t *graph.Tensor) (*graph.Tensor, error) {
	if a.NumProcesses() == 1 {
		return t, ctx.Err()
	}
	if t.DType != graph.Float32 {
		return nil, fmt.Errorf("accelerator: Broadcast needs float32, got %v", t.DType)
	}
	return t, a.cfg.Group.Broadcast(ctx, t.Float32s(), 0)
}

// sliceRows keeps the first n rows of t (dim 0).
func sliceRows(t *graph.Tensor, n int) (*graph.Tensor, error) {
	if t.Rank() == 0 || n < 0 || n > t.Shape[0] {
		return nil, fmt.Errorf("accelerator: cannot keep %d rows of shape %v", n, t.Shape)
	}
	c := t.Clone()
	per := 1
	for _, d := range t.Shape[1:] {
		per *= d
	}
	c.Shape[0] = n
	switch s := c.Data.(type) {
	case []float32:
		c.Data = s[:n*per]
	case []float64:
		c.Data = s[:n*per]
	case []int64:
		c.Data = s[:n*per]
	case []int32:
		c.Data = s[:n*per]
	case []bool:
		c.Data = s[:n*per]
	default:
		return nil, fmt.Errorf("accelerator: dtype %v not supported", t.DType)
	}
	return c, nil
}

// Model is a prepared model: a compiled training program with gradient
// buffers.
type Model struct {
	acc    *Accelerator
	Prog   *Program
	params []*optim.Param
	grads  []*graph.Tensor
	fresh  bool // the next Backward starts a window

	// overlap.go, program_dp.go: the program's bucket layout (data
	// parallel without ZeRO) and how its reductions overlapped backward.
	bucketLayout *gradBuckets
	gradNames    map[string]int
	overlapStats OverlapStats
	// zero.go: this process's shard under ZeRO (nil without ZeRO).
	zero *zeroShard
	// FusedStep (accelerator_fused.go): the latest step's gradient norm,
	// and why the optimizer could not be bound.
	fusedNorm float64
	bindErr   error
}

// ModelOptions tune PrepareModel.
type ModelOptions struct {
	// TrainOnly freezes every parameter whose name does not match.
	TrainOnly string
}

// PrepareModel builds the training program of an imported model.
func (a *Accelerator) PrepareModel(m *graph.Model, loss LossConfig, opts ModelOptions) (*Model, error) {
	re, err := TrainOnlyRegexp(opts.TrainOnly)
	if err != nil {
		return nil, err
	}
	// The program keeps the window's gradient sums in its state; with
	// more than one process it also averages them across processes
	// (program_dp.go), or under ZeRO reduce-scatters them
	// (program_zero.go; stage 2 reduces each micro-batch's gradients and
	// keeps no full sums).
	gradSums := a.zeroStage() != 2 && !a.cfg.FusedStep
	var dp *DataParallelConfig
	var zc *ZeroConfig
	if s := a.zeroStage(); s > 0 {
		world := a.NumProcesses()
		zc = &ZeroConfig{Stage: s, World: world, Rank: a.ProcessIndex(), BucketBytes: a.bucketLimit()}
		if a.cfg.CompressBF16 {
			zc.Compress = "bf16"
		}
	} else if a.NumProcesses() > 1 {
		dp = &DataParallelConfig{BucketBytes: a.bucketLimit(), NoOverlap: a.cfg.NoOverlap}
		if a.cfg.CompressBF16 {
			dp.Compress = "bf16"
		}
	}
	prog, err := Build(m, ProgramConfig{Loss: loss, TrainOnly: re, Backend: a.cfg.Backend, Seed: a.cfg.Seed,
		SyncBatchNorm: a.cfg.SyncBatchNorm && a.NumProcesses() > 1, MixedPrecision: a.cfg.MixedPrecision, Recompute: a.cfg.Recompute,
		GradSums: gradSums, DataParallel: dp, Zero: zc, PrimitivesOnly: a.cfg.PrimitivesOnly, Tuning: a.cfg.Tuning, FusedUpdate: a.cfg.FusedStep,
		NoPushDownGather: a.cfg.NoPushDownGather})
	if err != nil {
		return nil, err
	}
	pm := &Model{acc: a, Prog: prog, fresh: true}
	if prog.dp != nil {
		pm.bucketLayout = prog.dp.buckets
	}
	for _, p := range prog.Params {
		pm.params = append(pm.params, &optim.Param{Name: p.Name, Value: p.Value})
	}
	pm.grads = make([]*graph.Tensor, len(pm.params))
	if gradSums {
		if pm.grads, err = prog.GradSums(); err != nil {
			return nil, err
		}
	}
	if zc != nil {
		part, err := prog.ZeroPartition()
		if err != nil {
			return nil, err
		}
		pm.zero = newZeroShard(zc.Stage, zc.World, zc.Rank, pm.params, a.bucketLimit(), part.Float32s())
	}
	a.models = append(a.models, pm)
	return pm, nil
}

// Params are the trainable parameters, as optimizers take them.
func (m *Model) Params() []*optim.Param { return m.params }

// Output is what Forward computed for one micro-batch.
type Output struct {
	// Loss is the micro-batch's loss (unscaled).
	Loss  float64
	Size  int
	grads []*graph.Tensor
}

// Forward runs the forward and backward pass of one micro-batch. The
// gradients are those of loss/GradAccum; Backward adds them.
func (m *Model) Forward(ctx context.Context, b *data.Batch) (*Output, error) {
	if m.Prog.cfg.FusedUpdate {
		return m.fusedForward(ctx, b) // accelerator_fused.go
	}
	if m.fresh {
		m.Prog.StartWindow() // GradSums: this micro-batch's gradients replace the sums
	}
	// comm.go: the step's collectives (gradient buckets, synchronised
	// BatchNorm statistics) go through the communicator.
	ctx, comm := m.acc.withComm(ctx, m)
	// The gradients are reduced at the window's end, except under ZeRO-2,
	// which reduce-scatters every micro-batch's.
	sync := m.acc.sync || (m.zero != nil && m.zero.stage == 2)
	m.Prog.SetSyncGradients(sync)
	res, err := m.Prog.ForwardBackward(ctx, b.Inputs, b.Labels, float32(m.acc.LossScale()/float64(m.acc.cfg.GradAccum)))
	if comm != nil {
		if cerr := comm.end(err != nil); err == nil && cerr != nil {
			err = fmt.Errorf("accelerator: %w", cerr)
		}
	}
	if err != nil {
		return nil, err
	}
	if sync && m.Prog.dp != nil {
		m.overlapStats.Buckets += len(m.Prog.dp.buckets.members)
		m.overlapStats.Early += m.Prog.dp.early
	}
	return &Output{Loss: res.Loss, Size: b.Size, grads: res.Grads}, nil
}

// Evaluate runs the model in inference mode: loss and (for losses applied
// outside the graph) the model output.
func (m *Model) Evaluate(ctx context.Context, b *data.Batch) (float64, *graph.Tensor, error) {
	return m.Prog.Evaluate(ctx, b.Inputs, b.Labels)
}

// Backward adds the micro-batch's gradients to the model's gradient
// buffers. At the end of an accumulation window (and only then) the
// gradients are averaged across processes: by the step's collective ops
// (program_dp.go), or under ZeRO here (zero.go).
func (a *Accelerator) Backward(out *Output) error {
	if len(a.models) > 0 && a.models[0].zero != nil {
		return a.zeroBackward(out)
	}
	// Without ZeRO the step itself averaged the gradient sums across
	// processes (program_dp.go).
	return a.backward(out)
}

// withComm returns the context of a training step's Run with more than one
// process: it carries the communicator, started for the step.
func (a *Accelerator) withComm(ctx context.Context, m *Model) (context.Context, *groupComm) {
	if a.NumProcesses() == 1 {
		return ctx, nil
	}
	if a.comm == nil {
		a.comm = newGroupComm(a.cfg.Group)
	}
	if m.bucketLayout != nil {
		a.comm.nBuckets = len(m.bucketLayout.members)
	}
	a.comm.begin(int64(a.step + 1))
	return backend.WithCommunicator(ctx, a.comm), a.comm
}

func (a *Accelerator) backward(out *Output) error {
	if len(a.models) == 0 {
		return fmt.Errorf("accelerator: Backward before PrepareModel")
	}
	m := a.models[0]
	if m.Prog.cfg.FusedUpdate {
		m.fresh = false // the step updated the parameters already
		return nil
	}
	if m.Prog.cfg.GradSums {
		// The program added the gradients to its sums (Forward).
		m.fresh = false
		for i, p := range m.params {
			p.Grad = m.grads[i]
		}
		return nil
	}
	if len(out.grads) != len(m.grads) {
		return fmt.Errorf("accelerator: %d gradients for %d parameters", len(out.grads), len(m.grads))
	}
	accumulate(m.grads, out.grads, m.fresh)
	m.fresh = false
	for i, p := range m.params {
		p.Grad = m.grads[i]
	}
	return nil
}

// Accumulate runs fn for one micro-batch, tracking the accumulation window:
// inside fn, SyncGradients is true on the window's last micro-batch (or the
// last batch of an epoch), and the prepared optimizer and schedule act only
// then.
func (a *Accelerator) Accumulate(fn func() error) error {
	a.micro++
	a.sync = a.micro >= a.cfg.GradAccum || a.endOfData
	err := fn()
	if a.sync {
		a.micro = 0
	}
	return err
}

// ClipGradNorm clips the model's gradients to a total L2 norm of maxNorm
// (maxNorm <= 0 clips nothing) and returns the norm before clipping.
func (a *Accelerator) ClipGradNorm(m *Model, maxNorm float64) (float64, error) {
	if err := a.unscaleGrads(m); err != nil { // amp.go: fp16 gradients are clipped unscaled
		return 0, err
	}
	if maxNorm <= 0 {
		maxNorm = math.Inf(1)
	}
	if m.Prog.cfg.FusedUpdate {
		return a.fusedClipGradNorm(m, maxNorm) // accelerator_fused.go
	}
	if m.zero != nil {
		return a.zeroClipGradNorm(m, maxNorm)
	}
	if m.Prog.cfg.GradSums && !m.fresh {
		return m.Prog.ClipGradNorm(context.Background(), maxNorm) // in the program's state
	}
	return optim.ClipGradNorm(m.params, maxNorm)
}

// ClipGradValue clamps every gradient element to [-v, v].
func (a *Accelerator) ClipGradValue(m *Model, v float64) error {
	if err := a.unscaleGrads(m); err != nil { // amp.go
		return err
	}
	if m.Prog.cfg.FusedUpdate {
		return a.fusedClipGradValue(v) // accelerator_fused.go
	}
	if m.zero != nil {
		return a.zeroClipGradValue(m, v) // zero.go: an op over this rank's gradient views
	}
	if m.Prog.cfg.GradSums && !m.fresh {
		if v < 0 || math.IsNaN(v) {
			return fmt.Errorf("optim: ClipGradValue: invalid clip value %v", v)
		}
		return m.Prog.ClipGradValue(context.Background(), v) // in the program's state
	}
	return optim.ClipGradValue(m.stepParams(), v)
}

// Optimizer is a prepared optimizer: Step and ZeroGrad act only at the end
// of an accumulation window.
type Optimizer struct {
	acc   *Accelerator
	Inner optim.Optimizer
	model *Model
}

// PrepareOptimizer wraps an optimizer over the model's parameters.
func (a *Accelerator) PrepareOptimizer(opt optim.Optimizer, m *Model) *Optimizer {
	o := &Optimizer{acc: a, Inner: opt, model: m}
	if m.Prog.cfg.FusedUpdate {
		// The update becomes nodes of the training step; an error is
		// Forward's to report.
		m.bindErr = m.Prog.BindUpdate(opt, m.params, UpdateRecipe{ClipGradValue: a.cfg.ClipGradValue, ClipGradNorm: a.cfg.ClipGradNorm, LossScaled: a.amp.scaler != nil, ReportNorm: true})
	} else if b, ok := opt.(optim.Binder); ok && m.Prog.cfg.GradSums && m.zero == nil {
		// The step runs on the program's backend, over its state: the
		// parameters and the optimizer's slots live there.
		b.Bind(m.Prog.Backend(), m.Prog.Executable())
	}
	a.opts = append(a.opts, o)
	return o
}

// Step updates the parameters when the window is complete.
func (o *Optimizer) Step() error {
	if !o.acc.sync {
		return nil
	}
	// amp.go: with fp16, a step whose gradients overflowed is skipped (it
	// still counts, and the schedule still advances, as in a plain
	// PyTorch GradScaler loop).
	if skip, err := o.acc.ampStep(o.model); err != nil || skip {
		if err == nil {
			o.acc.step++
		}
		return err
	}
	if o.model.Prog.cfg.FusedUpdate {
		o.acc.step++ // the update ran inside the step (Forward)
		return nil
	}
	if o.model.zero != nil {
		if err := o.acc.zeroStep(o); err != nil {
			return err
		}
		o.acc.step++
		return nil
	}
	if err := o.Inner.Step(o.model.params); err != nil {
		return err
	}
	o.acc.step++
	return nil
}

// ZeroGrad starts a new window's gradients when the window is complete.
func (o *Optimizer) ZeroGrad() {
	if o.acc.sync {
		o.model.fresh = true
	}
}

// Scheduler is a prepared LR schedule: Step advances it after each
// optimizer step.
type Scheduler struct {
	acc   *Accelerator
	Inner optim.Schedule
	opt   *Optimizer
}

// PrepareScheduler sets the optimizer's LR for the first step.
func (a *Accelerator) PrepareScheduler(s optim.Schedule, o *Optimizer) *Scheduler {
	sc := &Scheduler{acc: a, Inner: s, opt: o}
	o.Inner.SetLR(s.LR(a.step))
	a.scheds = append(a.scheds, sc)
	return sc
}

// Step sets the LR for the next optimizer step (when one was just taken).
func (s *Scheduler) Step() {
	if s.acc.sync {
		s.opt.Inner.SetLR(s.Inner.LR(s.acc.step))
	}
}

// LR is the rate the next optimizer step uses.
func (s *Scheduler) LR() float64 { return s.opt.Inner.LR() }

// DataLoader is a prepared data loader: it tells the accelerator when an
// epoch's last batch comes, so the last partial window is applied.
type DataLoader struct {
	acc  *Accelerator
	L    *data.Loader
	skip int
}

// PrepareDataLoader makes a loader over ds.
func (a *Accelerator) PrepareDataLoader(ds data.Dataset, cfg data.LoaderConfig) (*DataLoader, error) {
	if cfg.Seed == 0 {
		cfg.Seed = uint64(a.cfg.Seed)
	}
	if n := a.NumProcesses(); n > 1 {
		cfg.NumShards, cfg.ShardIndex = n, a.ProcessIndex()
	}
	l, err := data.NewLoader(ds, cfg)
	if err != nil {
		return nil, err
	}
	d := &DataLoader{acc: a, L: l}
	a.loader = append(a.loader, d)
	return d, nil
}

// Len is the number of batches per epoch.
func (d *DataLoader) Len() int { return d.L.Len() }

// SkipFirstBatches makes the next epoch start after n batches (to resume
// mid-epoch).
func (a *Accelerator) SkipFirstBatches(d *DataLoader, n int) { d.skip = n }

// Epoch iterates over one epoch's batches.
func (d *DataLoader) Epoch(ctx context.Context, epoch int) iter.Seq2[*data.Batch, error] {
	skip := d.skip
	d.skip = 0
	return func(yield func(*data.Batch, error) bool) {
		for b, err := range d.L.Epoch(ctx, epoch, skip) {
			if err == nil {
				d.acc.endOfData = b.Index == d.L.Len()-1
				d.acc.epoch, d.acc.batchInEpoch = epoch, b.Index+1
			}
			if !yield(b, err) {
				break
			}
		}
		d.acc.endOfData = false
	}
}

// RegisterForCheckpointing adds state that SaveState and LoadState carry.
func (a *Accelerator) RegisterForCheckpointing(name string, c Checkpointable) {
	a.extra[name] = c
}

// SaveModel writes the first prepared model to dir as ONNX and safetensors.
func (a *Accelerator) SaveModel(dir string) ([]string, error) {
	if len(a.models) == 0 {
		return nil, fmt.Errorf("accelerator: SaveModel before PrepareModel")
	}
	if !a.IsMainProcess() {
		return nil, nil
	}
	return SaveModel(dir, a.models[0].Prog)
}
