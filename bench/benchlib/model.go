package benchlib

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/optimizer"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// ModelOptions configures RunModel.
type ModelOptions struct {
	// Tuning is passed to every compile (backend.Tuning).
	Tuning backend.Tuning
	// NoPushDownGather builds the step without the pushdown-gather pass
	// (train.ProgramConfig.NoPushDownGather).
	NoPushDownGather bool
	// Model is the ONNX file (exported in training mode for training).
	Model string
	// BatchSize is the size given to the symbolic first dimension of the
	// inputs.
	BatchSize int
	// Steps are timed after Warmup untimed ones.
	Steps, Warmup int
	// Loss is a --loss value (cross_entropy, mse, l1, bce_with_logits,
	// output:NAME); default cross_entropy.
	Loss string
	// Optimizer (sgd, adam, adamw; default sgd), LR (default 0.01) and
	// Momentum (SGD only).
	Optimizer    string
	LR, Momentum float64
	// Dims sizes symbolic dimensions other than the batch.
	Dims map[string]int64
	// Inference times the forward pass of the evaluation graph instead of a
	// training step.
	Inference bool
	// Seed seeds the random data and the random ops.
	Seed int64
	// IntHigh bounds random integer inputs: [0, IntHigh); default 2.
	IntHigh int64
	// Backend name (default cpu).
	Backend string
	// Profile, when not nil, receives a CPU profile of the timed steps.
	Profile io.Writer
	// OpProfile times every kernel call of the timed steps and reports the
	// time per op type (ModelResult.OpProfile); OpProfileByNode per node
	// instead ("OpType node-name"); OpProfileByShape splits the product
	// ops (those with GFLOP) by the shapes of their operands and the
	// attributes that choose the product ("OpType in=[..]x[..] out=[..]
	// attrs"), the others staying per op type.
	OpProfile, OpProfileByNode, OpProfileByShape bool
	// OpProfileRefs, with an op profile, measures the 2048³ GEMM and the
	// triad before the warm-up steps and after the last timed step
	// (ProfileRefs; about 0.3 s each time) and gives each row its rate as
	// a fraction of them (OpTime.OfGemm, OfTriad).
	OpProfileRefs bool
	// PeakLive reports what the training step's memory plan holds at its
	// fullest step (ModelResult.PeakLive), on backends that say.
	PeakLive bool
	// Recompute builds the training step with activation recomputation
	// (train.ProgramConfig.Recompute).
	Recompute bool
	// SeparateUpdate runs the optimizer's update as a Run of its own over
	// gradient sums kept as state (the Accelerator's general path) instead
	// of inside the step's program (train.Program.BindUpdate), which is the
	// default except under fp16 loss scaling.
	SeparateUpdate bool
	// MixedPrecision is no (or ""), bf16 or fp16: the training step runs
	// under autocast (train.ProgramConfig.MixedPrecision). Training only.
	MixedPrecision string
	// CheckModel, when set, vets the loaded model before anything else is
	// allocated (the command refuses a batch too large for memory with
	// it). The model is loaded once: a second load would keep a second
	// copy of the weights the importer reads outside the heap.
	CheckModel func(m *graph.Model) error
}

// ModelResult is what RunModel measured (the JSON object of `onnxtrain
// bench --log-format json`).
type ModelResult struct {
	Model     string `json:"model"`
	Mode      string `json:"mode"` // train or inference
	Backend   string `json:"backend"`
	BatchSize int    `json:"batch_size"`
	Steps     int    `json:"steps"`
	Warmup    int    `json:"warmup"`
	Loss      string `json:"loss,omitempty"`
	Optimizer string `json:"optimizer,omitempty"`
	// Parameters counts trainable elements (training only).
	Parameters int `json:"parameters,omitempty"`
	// Recompute is true when the step recomputes activations.
	Recompute bool `json:"recompute,omitempty"`
	// MixedPrecision is the --mixed-precision of the step (bf16, fp16;
	// absent for float32).
	MixedPrecision string `json:"mixed_precision,omitempty"`
	// FusedUpdate is true when the optimizer's update ran inside the
	// training step's program (one Run per step, no gradient sums).
	FusedUpdate bool `json:"fused_update,omitempty"`
	// StateCopyBytes is what the training program copied into its state
	// buffers after its Runs instead of updating them in place
	// (backend.StateTraffic.UpdateCopyBytes; BatchNorm's running
	// statistics take that path).
	StateCopyBytes int64 `json:"state_copy_bytes,omitempty"`
	// PlannedPeakBytes is the backend memory plan's peak of one training
	// step (activations, gradients, workspace), where the backend plans.
	PlannedPeakBytes int64 `json:"planned_peak_bytes,omitempty"`

	MedianStepMS float64 `json:"median_step_ms"`
	MeanStepMS   float64 `json:"mean_step_ms"`
	P90StepMS    float64 `json:"p90_step_ms"`
	MinStepMS    float64 `json:"min_step_ms"`
	MaxStepMS    float64 `json:"max_step_ms"`
	// SamplesPerS is BatchSize divided by the mean step time.
	SamplesPerS float64 `json:"samples_per_s"`
	// MedianForwardBackwardMS and MedianOptimizerMS split a training step
	// into the compiled forward+backward pass and the optimizer update.
	MedianForwardBackwardMS float64 `json:"median_forward_backward_ms,omitempty"`
	MedianOptimizerMS       float64 `json:"median_optimizer_ms,omitempty"`
	// P90OptimizerMS is the nearest-rank 90th percentile of the optimizer
	// update's time, as MedianOptimizerMS measures it; MedianUpdateMS and
	// P90UpdateMS are those of the update nodes' own kernel time (what
	// OptimizerGBps divides by), so that the spread from step to step
	// shows.
	P90OptimizerMS float64 `json:"p90_optimizer_ms,omitempty"`
	MedianUpdateMS float64 `json:"median_update_ms,omitempty"`
	P90UpdateMS    float64 `json:"p90_update_ms,omitempty"`
	// OptimizerGBps is the optimizer update's bandwidth: the bytes of
	// parameters, gradients and optimizer state it reads and writes
	// (optim.StepBytes) over the time of the update's nodes inside the
	// step (the kernels of graph.SGDUpdateOp/AdamUpdateOp), the median over
	// the timed steps; Min and Max show how stable it is from step to step.
	OptimizerGBps    float64 `json:"optimizer_gbps,omitempty"`
	OptimizerGBpsMin float64 `json:"optimizer_gbps_min,omitempty"`
	OptimizerGBpsMax float64 `json:"optimizer_gbps_max,omitempty"`
	// OptimizerBytes is the byte count behind OptimizerGBps: every
	// parameter's, gradient's and optimizer slot's reads and writes, less
	// the gradients the step's gathered updates do not read (an
	// embedding table's, updated from the rows of dY: SGDUpdateGathered,
	// AdamUpdateGathered; the rows they read instead are not counted).
	OptimizerBytes int64 `json:"optimizer_bytes,omitempty"`
	// FirstLoss and LastLoss are the losses of the first warm-up (or timed)
	// step and of the last timed step, on the same random batch: with a
	// sensible learning rate the second is lower.
	FirstLoss float64 `json:"first_loss,omitempty"`
	LastLoss  float64 `json:"last_loss,omitempty"`
	// SetupMS is the time to import the model and compile it.
	SetupMS float64 `json:"setup_ms"`
	// PeakRSSBytes is the process's peak resident set size (VmHWM) at the
	// end of the run, compilation and warm-up included.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	GOMAXPROCS   int   `json:"gomaxprocs"`
	// OpProfile (with ModelOptions.OpProfile) is the kernel time of a
	// timed step by op type, largest first.
	OpProfile []OpTime `json:"op_profile,omitempty"`
	// OpProfileShapes is OpProfile by op type and shape when OpProfile is
	// by op type or node (else nil): the rows the bars are judged on, since
	// a type's row averages shapes that run at different rates (a
	// Winograd convolution counted at direct flops beside a 1×1 one).
	OpProfileShapes []OpTime `json:"-"`
	// OpProfileRefs (with ModelOptions.OpProfileRefs) are the references
	// measured before the warm-up steps and after the last timed step.
	OpProfileRefs *ProfileRefs `json:"op_profile_refs,omitempty"`
	// PeakLive (with ModelOptions.PeakLive) is the training step's memory
	// plan at its fullest step: the values alive there, largest first.
	PeakLive *cpu.PeakLive `json:"peak_live,omitempty"`
}

func (o *ModelOptions) defaults() error {
	if o.Model == "" {
		return fmt.Errorf("benchlib: no model given (--model)")
	}
	if o.BatchSize <= 0 {
		return fmt.Errorf("benchlib: --batch-size must be positive, got %d", o.BatchSize)
	}
	if o.Steps <= 0 {
		return fmt.Errorf("benchlib: --steps must be positive, got %d", o.Steps)
	}
	if o.Warmup < 0 {
		return fmt.Errorf("benchlib: --warmup must not be negative, got %d", o.Warmup)
	}
	if o.Loss == "" {
		o.Loss = "cross_entropy"
	}
	if o.Optimizer == "" {
		o.Optimizer = "sgd"
	}
	if o.LR == 0 {
		o.LR = 0.01
	}
	if o.IntHigh == 0 {
		o.IntHigh = 2
	}
	if o.Backend == "" {
		o.Backend = "cpu"
	}
	if o.MixedPrecision == "" {
		o.MixedPrecision = "no"
	}
	if _, err := train.ParseMixedPrecision(o.MixedPrecision); err != nil {
		return err
	}
	if o.Inference && o.MixedPrecision != "no" {
		return fmt.Errorf("--mixed-precision %s times training steps; it does not apply with --inference", o.MixedPrecision)
	}
	return nil
}

// RunModel imports the model, prepares random data for it and times
// training steps (ForwardBackward plus an optimizer step, as `onnxtrain
// train` runs them) or, with Inference, forward passes.
func RunModel(ctx context.Context, o ModelOptions) (*ModelResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	m, err := importer.Load(o.Model)
	if err != nil {
		return nil, err
	}
	if o.CheckModel != nil {
		if err := o.CheckModel(m); err != nil {
			return nil, err
		}
	}
	// A fixed-batch export runs at --batch-size when nothing depends on
	// its exported size (train/fixedbatch.go).
	if _, err := train.RelaxFixedBatch(m, o.BatchSize); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Model, err)
	}
	shapes, syms, err := ResolveInputShapes(m.Graph, o.BatchSize, o.Dims)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Model, err)
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6f6e6e7874726e))
	inputs, err := RandomInputs(rng, m.Graph, shapes, o.IntHigh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Model, err)
	}
	res := &ModelResult{
		Model: filepath.Base(o.Model), Backend: o.Backend, BatchSize: o.BatchSize,
		Steps: o.Steps, Warmup: o.Warmup, GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	var prof *opProfiler
	if o.OpProfile || o.OpProfileByNode || o.OpProfileByShape {
		prof = &opProfiler{byOp: map[string]*OpTime{}, byNode: o.OpProfileByNode, byShape: o.OpProfileByShape}
		ctx = backend.WithNodeCallTimer(ctx, prof.record)
		defer linalg.SetAttentionProductTimer(prof.part)()
	}
	var step func() (loss float64, fb, opt time.Duration, err error)
	var update time.Duration // the latest training step's update-node time
	// A product update (graph.SGDUpdateProductOp) makes its weight's
	// gradient inside the node: that product is the backward's work, not
	// the optimizer's, and a product in the op profile.
	defer optimizer.SetProductTimer(func(label string, flops float64, d time.Duration) {
		update -= d
		if prof != nil {
			prof.part(label, flops, d)
		}
	})()
	if o.Inference {
		res.Mode = "inference"
		step, err = inferenceStep(ctx, m, o, inputs)
	} else {
		res.Mode, res.Loss, res.Optimizer = "train", o.Loss, o.Optimizer
		step, err = trainingStep(ctx, m, o, rng, inputs, shapes, syms, res, &update)
	}
	if err != nil {
		return nil, err
	}
	res.SetupMS = ms(time.Since(start))

	// The references are sampled before the warm-up steps and after the
	// last timed step, never between timed steps: a 2048³ GEMM and three
	// 128 MiB arrays evict every cache and park the pool, which no
	// training run does to its next step (its first ops read their inputs
	// from memory and its first product waits for the workers). With no
	// warm-up step, the first timed step follows the first sample.
	var refs *refSampler
	if prof != nil && o.OpProfileRefs {
		refs = newRefSampler(runtime.GOMAXPROCS(0))
		refs.sample()
	}
	first := true
	for i := 0; i < o.Warmup; i++ {
		loss, _, _, err := step()
		if err != nil {
			return nil, fmt.Errorf("warm-up step %d: %w", i+1, err)
		}
		if first {
			res.FirstLoss, first = loss, false
		}
	}
	if o.Profile != nil {
		if err := pprof.StartCPUProfile(o.Profile); err != nil {
			return nil, fmt.Errorf("benchlib: --cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if prof != nil {
		prof.on = true
	}
	total := make([]time.Duration, o.Steps)
	fbs := make([]time.Duration, o.Steps)
	opts := make([]time.Duration, o.Steps)
	gbps := make([]float64, 0, o.Steps)
	updates := make([]time.Duration, 0, o.Steps)
	for i := range total {
		t0 := time.Now()
		loss, fb, opt, err := step()
		total[i] = time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		fbs[i], opts[i] = fb, opt
		if update > 0 && res.OptimizerBytes > 0 {
			gbps = append(gbps, float64(res.OptimizerBytes)/update.Seconds()/1e9)
			updates = append(updates, update)
		}
		if first {
			res.FirstLoss, first = loss, false
		}
		res.LastLoss = loss
	}
	if o.Profile != nil {
		pprof.StopCPUProfile()
	}
	if prof != nil {
		prof.on = false
		res.OpProfile = prof.table(o.Steps)
		res.OpProfileShapes = prof.shapeTable(o.Steps)
	}
	st, err := Summarize(total)
	if err != nil {
		return nil, err
	}
	res.MedianStepMS, res.MeanStepMS, res.P90StepMS, res.MinStepMS, res.MaxStepMS = st.MedianMS, st.MeanMS, st.P90MS, st.MinMS, st.MaxMS
	res.SamplesPerS = float64(o.BatchSize) / (st.MeanMS / 1000)
	if !o.Inference {
		fb, _ := Summarize(fbs)
		op, _ := Summarize(opts)
		res.MedianForwardBackwardMS, res.MedianOptimizerMS, res.P90OptimizerMS = fb.MedianMS, op.MedianMS, op.P90MS
		if up, err := Summarize(updates); err == nil {
			res.MedianUpdateMS, res.P90UpdateMS = up.MedianMS, up.P90MS
		}
		if len(gbps) > 0 {
			sort.Float64s(gbps)
			res.OptimizerGBps, res.OptimizerGBpsMin, res.OptimizerGBpsMax = gbps[len(gbps)/2], gbps[0], gbps[len(gbps)-1]
		}
	}
	if refs != nil {
		// The second sample, after the profile's last step; then the peak
		// without the references' buffers, where it can be kept apart.
		refs.sample()
		res.OpProfileRefs, res.PeakRSSBytes, err = refs.finish()
		if res.OpProfileRefs != nil {
			applyRefs(res.OpProfile, res.OpProfileRefs)
			applyRefs(res.OpProfileShapes, res.OpProfileRefs)
		}
	} else {
		res.PeakRSSBytes, err = PeakRSS()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// OpTime is the kernel time of one op type in a step.
type OpTime struct {
	Op string `json:"op"`
	// Calls is the number of kernel calls per step.
	Calls float64 `json:"calls_per_step"`
	// MS is the kernel wall time per step, in milliseconds.
	MS float64 `json:"ms_per_step"`
	// Share is MS over the sum of all op types' MS.
	Share float64 `json:"share"`
	// GFLOP is the floating-point work of a product op per step (matrix
	// products, convolutions and their gradients; opWork) and GFLOPS what
	// its kernels achieved: GFLOP over their time. Zero for other ops.
	GFLOP  float64 `json:"gflop_per_step,omitempty"`
	GFLOPS float64 `json:"gflop_per_s,omitempty"`
	// GB is the bytes of the calls' inputs and outputs per step, each
	// counted once, and GBPS the bandwidth that makes: for memory-bound ops,
	// the figure to hold against the machine's (a lower bound of the
	// traffic; ops that only relabel a tensor report none).
	GB   float64 `json:"gb_per_step,omitempty"`
	GBPS float64 `json:"gb_per_s,omitempty"`
	// Within names the op a row is part of: the products inside a fused
	// attention op ("AttentionSoftmaxGrad/dq"), timed by the kernel (each
	// head's product, divided by the cores when the heads share them).
	// Such rows are left out of the shares' sum (Share is still of the
	// step's kernel time).
	Within string `json:"within,omitempty"`
	// OfGemm (products) and OfTriad (the others) are GFLOPS and GBPS as
	// fractions of the references measured before and after the steps
	// (ModelResult.OpProfileRefs), when there are any.
	OfGemm  float64 `json:"of_gemm,omitempty"`
	OfTriad float64 `json:"of_triad,omitempty"`
	// Roofline is, for a product with references, the most of the GEMM's
	// rate its bytes allow: its GFLOP at the GEMM's rate over the longer
	// of that and its GB at the triad's, at most 1. Under 1 the product is
	// memory-bound by its shape (a few rows against a whole weight): its
	// OfTriad is set too, and that is the rate to hold it to. GB counts
	// each input and output once, a lower bound of the traffic when they
	// are distinct tensors, so the roofline is then an upper bound of what
	// any kernel could reach (attention's fused ops take the one QKV buffer
	// three times; their rooflines, 1, are not affected).
	Roofline float64 `json:"roofline_of_gemm,omitempty"`
	total    time.Duration
	n        int
	flops    float64
	bytes    float64
}

// opProfiler sums kernel times by op type while on (and, unless the
// table is by shape already, by node with each node's shape, for the
// bars: shapeTable).
type opProfiler struct {
	on, byNode, byShape bool
	byOp                map[string]*OpTime
	nodes               map[*graph.Node]*nodeTime
	mu                  sync.Mutex // part: the kernels' workers report at once
}

// nodeTime is one node's calls, with its op type and shape as
// --op-profile-by-shape keys them (of its first call).
type nodeTime struct {
	key string
	t   OpTime
}

// part records a product timed inside a fused op's kernel
// (linalg.SetAttentionProductTimer).
func (p *opProfiler) part(label string, flops float64, d time.Duration) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	op, _, _ := strings.Cut(label, "/")
	p.add(label, op, flops, 0, d)
}

// add counts one call of d under key (within: the op a part is of).
func (p *opProfiler) add(key, within string, flops, bytes float64, d time.Duration) {
	t := p.byOp[key]
	if t == nil {
		t = &OpTime{Op: key, Within: within}
		p.byOp[key] = t
	}
	t.count(d, 1, flops, bytes)
}

// count adds n calls that took d, did flops and moved bytes.
func (t *OpTime) count(d time.Duration, n int, flops, bytes float64) {
	t.total += d
	t.n += n
	t.flops += flops
	t.bytes += bytes
}

func (p *opProfiler) record(n *graph.Node, in, out []*graph.Tensor, d time.Duration) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	flops, bytes := opWork(n, in, out)
	key := n.OpType
	if p.byNode {
		key += " " + n.Name
	}
	if p.byShape {
		key += " " + shapeKey(n, in, out)
	} else {
		nt := p.nodes[n]
		if nt == nil {
			if p.nodes == nil {
				p.nodes = map[*graph.Node]*nodeTime{}
			}
			nt = &nodeTime{key: n.OpType + " " + shapeKey(n, in, out)} // once per node
			p.nodes[n] = nt
		}
		nt.t.count(d, 1, flops, bytes)
	}
	p.add(key, "", flops, bytes, d)
}

func (p *opProfiler) table(steps int) []OpTime {
	return opTable(p.byOp, steps)
}

// shapeTable is the profile by op type and shape, from the nodes' sums
// and the products timed inside fused ops, or nil when the table is by
// shape already.
func (p *opProfiler) shapeTable(steps int) []OpTime {
	if p.byShape {
		return nil
	}
	rows := map[string]*OpTime{}
	for _, nt := range p.nodes {
		t := rows[nt.key]
		if t == nil {
			t = &OpTime{Op: nt.key}
			rows[nt.key] = t
		}
		t.count(nt.t.total, nt.t.n, nt.t.flops, nt.t.bytes)
	}
	for k, t := range p.byOp {
		if t.Within != "" {
			c := *t
			rows[k] = &c
		}
	}
	return opTable(rows, steps)
}

// opTable turns sums by key into rows per step, largest first.
func opTable(byOp map[string]*OpTime, steps int) []OpTime {
	var sum time.Duration
	out := make([]OpTime, 0, len(byOp))
	for _, t := range byOp {
		if t.Within == "" {
			sum += t.total
		}
		out = append(out, *t)
	}
	for i := range out {
		out[i].MS = ms(out[i].total) / float64(steps)
		out[i].Calls = float64(out[i].n) / float64(steps)
		if sum > 0 {
			out[i].Share = float64(out[i].total) / float64(sum)
		}
		secs := out[i].total.Seconds()
		out[i].GFLOP = out[i].flops / 1e9 / float64(steps)
		out[i].GB = out[i].bytes / 1e9 / float64(steps)
		if secs > 0 {
			if out[i].flops > 0 {
				out[i].GFLOPS = out[i].flops / 1e9 / secs
			} else if out[i].bytes > 0 {
				out[i].GBPS = out[i].bytes / 1e9 / secs
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].total > out[j].total })
	return out
}

// shapeKey describes one kernel call for --op-profile-by-shape: the
// operands' shapes, the result's, and the attributes that choose the work
// (a product's transposes, which gradient, the views of PermutedMatMul's
// operands, convolution geometry; a Transpose's perm, a reduction's or
// a Softmax's axis), in a stable order.
func shapeKey(n *graph.Node, in, out []*graph.Tensor) string {
	var b strings.Builder
	b.WriteString("in=")
	for i, t := range in {
		if i > 0 {
			b.WriteByte('x')
		}
		if t == nil {
			b.WriteString("-")
			continue
		}
		fmt.Fprint(&b, t.Shape)
	}
	if len(out) > 0 && out[0] != nil {
		fmt.Fprintf(&b, " out=%v", out[0].Shape)
	}
	names := make([]string, 0, len(n.Attrs))
	for name := range n.Attrs {
		switch name {
		case "transA", "transB", "grad", "alpha", "permY", "axes0", "axes1", "axes2", "fixed0", "fixed1", "fixed2",
			"strides", "pads", "dilations", "group", "kernel_shape", "perm", "axis":
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		a := n.Attrs[name]
		switch {
		case len(a.Ints) > 0:
			fmt.Fprintf(&b, " %s=%v", name, a.Ints)
		case a.Type == graph.AttrFloat:
			fmt.Fprintf(&b, " %s=%g", name, a.F)
		default:
			fmt.Fprintf(&b, " %s=%d", name, a.I)
		}
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// trainingStep builds the training program and returns a function that runs
// one step on the fixed random batch.
func trainingStep(ctx context.Context, m *graph.Model, o ModelOptions, rng *rand.Rand, inputs map[string]*graph.Tensor,
	shapes Shapes, syms map[string]int64, res *ModelResult, update *time.Duration) (func() (float64, time.Duration, time.Duration, error), error) {
	loss, err := train.ParseLoss(o.Loss)
	if err != nil {
		return nil, err
	}
	opt, err := newOptimizer(o)
	if err != nil {
		return nil, err
	}
	// As one process of `onnxtrain train`: the optimizer's update runs
	// inside the step (each parameter's right after its gradient is final,
	// no gradient sums), or with SeparateUpdate and under fp16 the
	// gradients are summed in the program's state and the optimizer steps
	// over that state in a Run of its own.
	_, fusable := opt.(optim.Fuser)
	fused := fusable && !o.SeparateUpdate && o.MixedPrecision != "fp16"
	prog, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: o.Backend, Seed: o.Seed, Recompute: o.Recompute, MixedPrecision: o.MixedPrecision,
		GradSums: !fused, FusedUpdate: fused, Tuning: o.Tuning, NoPushDownGather: o.NoPushDownGather})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Model, err)
	}
	if b, ok := opt.(optim.Binder); ok && !fused {
		b.Bind(prog.Backend(), prog.Executable())
	}
	// The update's own time: its nodes' kernels, timed inside the step.
	prevTimer := backend.NodeTimerFrom(ctx)
	optCtx := backend.WithNodeTimer(ctx, func(n *graph.Node, d time.Duration) {
		if graph.IsParamUpdate(n) {
			*update += d
		}
		if prevTimer != nil {
			prevTimer(n, d)
		}
	})
	stepper, _ := opt.(optim.ContextStepper)
	if o.MixedPrecision != "no" {
		res.MixedPrecision = o.MixedPrecision
	}
	res.Recompute = o.Recompute
	var labels *graph.Tensor
	if prog.NeedsLabels {
		out := loss.Output
		if out == "" {
			out = m.Graph.Outputs[0].Name
		}
		outShape, err := OutputShape(m, out, shapes, syms)
		if err != nil {
			return nil, fmt.Errorf("%s: labels for the loss: %w", o.Model, err)
		}
		if labels, err = RandomLabels(rng, loss.Kind, outShape); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Model, err)
		}
	}
	params := make([]*optim.Param, len(prog.Params))
	for i, p := range prog.Params {
		params[i] = &optim.Param{Name: p.Name, Value: p.Value}
	}
	opt.SetLR(o.LR)
	for _, p := range prog.Params {
		res.Parameters += p.Value.Size()
	}
	res.OptimizerBytes = optim.StepBytes(opt, int64(res.Parameters))
	if fused {
		res.FusedUpdate = true
		if err := prog.BindUpdate(opt, params, train.UpdateRecipe{}); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Model, err)
		}
		all, counted := res.OptimizerBytes, false
		return func() (float64, time.Duration, time.Duration, error) {
			t0 := time.Now()
			*update = 0
			out, err := prog.Step(optCtx, inputs, labels, 1)
			if err != nil {
				return 0, 0, 0, err
			}
			total := time.Since(t0)
			if !counted { // the step's plan exists from its first run on
				res.OptimizerBytes, counted = all-4*gatheredTableElems(prog), true
			}
			res.PlannedPeakBytes = prog.PlannedBytes()
			res.StateCopyBytes = prog.StateTraffic().UpdateCopyBytes
			res.PeakLive = peakLive(o, prog)
			// The update's nodes ran inside the step: their own time is
			// the optimizer's share.
			return out.Loss, total - *update, *update, nil
		}, nil
	}
	// fp16 steps scale the loss and unscale the gradients as training does
	// (train.GradScaler); a step whose gradients overflow is skipped.
	var scaler *train.GradScaler
	if o.MixedPrecision == "fp16" {
		if scaler, err = train.NewGradScaler(train.DefaultGradScalerConfig()); err != nil {
			return nil, err
		}
	}
	return func() (float64, time.Duration, time.Duration, error) {
		t0 := time.Now()
		seed := float32(1)
		if scaler != nil {
			seed = float32(scaler.Scale())
		}
		prog.StartWindow()
		r, err := prog.ForwardBackward(ctx, inputs, labels, seed)
		if err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		for i, p := range params {
			p.Grad = r.Grads[i]
		}
		skip := false
		if scaler != nil {
			if _, err := scaler.Unscale(r.Grads); err != nil {
				return 0, 0, 0, err
			}
			skip = scaler.Update()
		}
		*update = 0
		if !skip {
			if stepper != nil {
				err = stepper.StepContext(optCtx, params)
			} else {
				err = opt.Step(params)
			}
			if err != nil {
				return 0, 0, 0, err
			}
		}
		res.PlannedPeakBytes = prog.PlannedBytes()
		res.StateCopyBytes = prog.StateTraffic().UpdateCopyBytes
		res.PeakLive = peakLive(o, prog)
		return r.Loss, t1.Sub(t0), time.Since(t1), nil
	}, nil
}

// newOptimizer builds the optimizer o names, with PyTorch's defaults for
// everything but the learning rate (and SGD's momentum).
func newOptimizer(o ModelOptions) (optim.Optimizer, error) {
	switch o.Optimizer {
	case "sgd":
		return optim.NewSGD(optim.SGDConfig{LR: o.LR, Momentum: o.Momentum})
	case "adam", "adamw":
		if o.Momentum != 0 {
			return nil, fmt.Errorf("benchlib: --momentum applies to sgd, not %s", o.Optimizer)
		}
		ac := optim.AdamConfig{LR: o.LR, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
		if o.Optimizer == "adam" {
			return optim.NewAdam(ac)
		}
		ac.WeightDecay = 0.01
		return optim.NewAdamW(ac)
	}
	return nil, fmt.Errorf("benchlib: unknown optimizer %q (want sgd, adam or adamw)", o.Optimizer)
}

// inferenceStep compiles the model's evaluation form (BatchNormalization on
// running statistics, Dropout off) and returns a function that runs it once.
func inferenceStep(ctx context.Context, m *graph.Model, o ModelOptions, inputs map[string]*graph.Tensor) (func() (float64, time.Duration, time.Duration, error), error) {
	be, err := backend.Open(o.Backend)
	if err != nil {
		return nil, err
	}
	em := &graph.Model{IRVersion: m.IRVersion, Opsets: m.Opsets, Graph: evalGraph(m.Graph), Functions: m.Functions}
	exe, err := be.Compile(em, backend.CompileOptions{Seed: o.Seed, Tuning: o.Tuning})
	if err != nil {
		return nil, fmt.Errorf("%s: compiling the evaluation graph: %w", o.Model, err)
	}
	return func() (float64, time.Duration, time.Duration, error) {
		t0 := time.Now()
		if _, err := exe.Run(ctx, inputs); err != nil {
			return 0, 0, 0, err
		}
		return 0, time.Since(t0), 0, nil
	}, nil
}

// evalGraph copies g with training-mode BatchNormalization switched to
// running statistics and Dropout's training flag dropped (as train.Build
// does for its evaluation graph); g is left alone.
func evalGraph(g *graph.Graph) *graph.Graph {
	c := *g
	c.Nodes = make([]*graph.Node, len(g.Nodes))
	for i, n := range g.Nodes {
		cn := *n
		cn.Inputs = append([]string{}, n.Inputs...)
		cn.Outputs = append([]string{}, n.Outputs...)
		cn.Attrs = make(map[string]*graph.Attr, len(n.Attrs))
		for k, v := range n.Attrs {
			cn.Attrs[k] = v
		}
		switch cn.OpType {
		case "BatchNormalization":
			if cn.AttrInt("training_mode", 0) == 1 {
				cn.SetAttr(graph.IntAttr("training_mode", 0))
				cn.Outputs = cn.Outputs[:1]
			}
		case "Dropout":
			if len(cn.Inputs) > 2 {
				cn.Inputs = cn.Inputs[:2]
			}
		}
		c.Nodes[i] = &cn
	}
	return &c
}

// peakLive returns the live set at the fullest step of prog's training
// step when o asks for it and the backend reports it (nil otherwise).
func peakLive(o ModelOptions, prog *train.Program) *cpu.PeakLive {
	if !o.PeakLive {
		return nil
	}
	e, ok := prog.Executable().(interface{ PeakLive() cpu.PeakLive })
	if !ok {
		return nil
	}
	pl := e.PeakLive()
	return &pl
}

// gatheredTableElems is the number of elements of the parameters that
// the program's last run updated from gathered gradient rows
// (graph.SGDUpdateGatheredOp, AdamUpdateGatheredOp) or from their
// gradient's product a block of rows at a time (SGDUpdateProductOp,
// AdamUpdateProductOp): their parameter-sized gradients were never read
// from memory.
func gatheredTableElems(prog *train.Program) int64 {
	pi, ok := prog.Executable().(backend.PlanInspector)
	if !ok {
		return 0
	}
	size := map[string]int{}
	for _, p := range prog.Params {
		size[p.Name] = p.Value.Size()
	}
	var elems int64
	for _, n := range pi.LastRunNodes() {
		if !graph.IsGatheredUpdate(n) && !graph.IsProductUpdate(n) {
			continue
		}
		for _, in := range graph.UpdatedInput(n) {
			if in >= 0 { // the first updated input is the table
				elems += int64(size[n.Inputs[in]])
				break
			}
		}
	}
	return elems
}
