package train

// ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", 2020), stages 1 and 2, for data parallel
// training (AcceleratorConfig.Zero, --zero).
//
// The trainable parameters, in order, are laid end to end in one flat space
// of Ψ elements. It is cut into WorldSize partitions of P = ⌈Ψ/N⌉ elements;
// rank r owns elements [rP, min((r+1)P, Ψ)). Its slice of every parameter
// that meets its partition is a state view of the program
// (backend.StateViewer; program_zero.go): ZeroParamView over the
// parameter's buffer and ZeroGradView over the reduced gradients'
// partition, which the optimizer's step program updates and reads in
// place (optim.LayoutBinder), keeping slots only for the owned elements;
// optimizers work element by element, so stepping the slices gives the
// same values as stepping the whole parameters. The optimizer sees the
// slices as optim.Param values with the parameter's name and a flat shape.
//
// The collectives are ops of the program (program_zero.go,
// graph.ReduceScatterOp and AllGatherOp). They run in rounds over chunks:
// round k takes elements [rP + kc, rP + (k+1)c) of every rank's partition
// r into block r of a message of N·c elements (at most BucketBytes, zeros
// past Ψ), and reduce-scatters (gradients) or all-gathers (parameters) it.
//
//   - Stage 1: the step sums the window's gradients in full gradient-sum
//     state (as without ZeRO); on the window's last micro-batch it
//     reduce-scatters them (the same bytes on the wire as the all-reduce:
//     the parameters' all-gather is its other half) into this rank's
//     partition, each rank steps its partition, and the updated parameters
//     are all-gathered.
//   - Stage 2: every micro-batch's gradients are reduce-scattered inside
//     the step and added into the partition (P elements), the window's
//     first micro-batch replacing it; the gradients themselves are
//     intermediates of the step. We reduce per micro-batch rather than
//     once at the window's end because the latter needs a full local
//     accumulation buffer (4Ψ bytes) for the whole window, which is the
//     very memory stage 2 exists to save; the price is one reduce-scatter
//     per micro-batch instead of per window (with --grad-accum 1 they are
//     the same). DeepSpeed's stage 2 makes the same choice.
//
// Memory per rank that persists across steps (fp32, Adam): parameters 4Ψ,
// gradient state 4Ψ + 4P (stage 1: sums and partition) or 4P (stage 2),
// optimizer state 8P (two slots), against 4Ψ + 4Ψ + 8Ψ without ZeRO; the
// collectives' messages (at most BucketBytes) live for their call only.
//
// Gradient clipping by norm adds the squares over every rank's slices per
// parameter (graph.ClipGradNormShardedOp: an all-gather of one float64
// per parameter), so the norm is that of the whole gradients; clipping by
// value clamps the slices (graph.ClipGradValueOp), and fp16's unscale
// sums the ranks' found-inf flags (graph.UnscaleGradsShardedOp), so that
// every rank skips the same steps. All are ops over the gradient views,
// in place. Checkpoints: every rank writes its slice of
// the optimizer state, with the element ranges it covers, into the
// checkpoint folder rank 0 is building (saveZeroState; the ranks must share
// a file system), and LoadState reassembles whole tensors from the shards,
// so a checkpoint loads on any number of processes, with or without ZeRO.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// zeroShard is one rank's part of the flat parameter space.
type zeroShard struct {
	stage       int
	world, rank int
	total, part int   // Ψ, and P = ⌈Ψ/N⌉
	lo, hi      int   // the owned elements [lo, hi) of the flat space
	offs        []int // flat offset of each parameter; offs[len] = Ψ
	chunk       int   // elements per rank and round of a collective

	views  []*optim.Param // the owned slices, as the optimizer sees them
	viewOf []int          // parameter index of each view
	viewLo []int          // first element of each view within its parameter
	byName map[string]int // parameter name -> view index

	grad []float32 // the reduced gradients of the partition (P elements): program state

	// declared is set once the views are the program's state
	// (declareViews); bound is the optimizer bound to them.
	declared bool
	bound    optim.Optimizer
	// clipValue is ClipGradValue's program over the gradient views, and
	// its feeds (zeroClipGradValue).
	clipValue      backend.Executable
	clipValueFeeds map[string]*graph.Tensor
	// clipNorm is ClipGradNorm's (a ClipGradNormSharded op), and its feeds.
	clipNorm      backend.Executable
	clipNormFeeds map[string]*graph.Tensor
	// unscale is fp16's unscale and inf check (UnscaleGradsSharded).
	unscale      backend.Executable
	unscaleFeeds map[string]*graph.Tensor
}

// declareViews makes the slices views of the program's state
// (Program.declareZeroViews): the parameter slices and their gradients
// are then the buffers the optimizer step's program updates and reads.
func (z *zeroShard) declareViews(p *Program) error {
	if z.declared {
		return nil
	}
	slices := make([]zeroSlice, len(z.views))
	for j, v := range z.views {
		slices[j] = zeroSlice{Param: v.Name, Start: z.viewLo[j], Len: v.Value.Size(), PartStart: z.offs[z.viewOf[j]] + z.viewLo[j] - z.lo}
	}
	if err := p.declareZeroViews(slices); err != nil {
		return err
	}
	for j, sl := range slices {
		// On a backend whose state is host memory the views are the
		// program's buffers (the same memory the slices covered).
		if sl.value != nil {
			z.views[j].Value = sl.value
		}
		if sl.gradient != nil {
			z.views[j].Grad = sl.gradient
		}
	}
	z.declared = true
	return nil
}

// bind makes o's step a program over the views of the program's state
// (optim.LayoutBinder with zeroLayout), once; an optimizer of another
// package steps the views as host tensors.
func (z *zeroShard) bind(p *Program, o optim.Optimizer) error {
	if err := z.declareViews(p); err != nil {
		return err
	}
	if z.bound == o {
		return nil
	}
	if b, ok := o.(optim.LayoutBinder); ok {
		b.BindLayout(p.Backend(), p.Executable(), zeroLayout{})
	}
	z.bound = o
	return nil
}

// zeroStage is the ZeRO stage in effect: 0 with one process.
func (a *Accelerator) zeroStage() int {
	if a.cfg.Zero <= 0 || a.NumProcesses() == 1 {
		return 0
	}
	return a.cfg.Zero
}

// newZeroShard lays out the partition of rank of world over params, with
// collectives of at most limit bytes; grad is the program's partition of
// the reduced gradients (Program.ZeroPartition), which the views' Grad
// slice.
func newZeroShard(stage, world, rank int, params []*optim.Param, limit int, grad []float32) *zeroShard {
	z := &zeroShard{stage: stage, world: world, rank: rank, offs: make([]int, len(params)+1), byName: map[string]int{}}
	for i, p := range params {
		z.offs[i+1] = z.offs[i] + p.Value.Size()
	}
	z.total = z.offs[len(params)]
	z.part = (z.total + world - 1) / world
	z.lo, z.hi = min(rank*z.part, z.total), min((rank+1)*z.part, z.total)
	z.chunk = max(1, min(limit/(4*world), z.part))
	z.grad = grad
	for i, p := range params {
		s, e := max(z.lo, z.offs[i]), min(z.hi, z.offs[i+1])
		if s >= e {
			continue
		}
		lo := s - z.offs[i]
		v := &optim.Param{Name: p.Name, Group: p.Group, Value: flatView(p.Value.Float32s()[lo : lo+e-s]), Grad: flatView(z.grad[s-z.lo : e-z.lo])}
		z.byName[p.Name] = len(z.views)
		z.views = append(z.views, v)
		z.viewOf = append(z.viewOf, i)
		z.viewLo = append(z.viewLo, lo)
	}
	return z
}

// flatView is a rank-1 float32 tensor over x (sharing its memory).
func flatView(x []float32) *graph.Tensor {
	return &graph.Tensor{DType: graph.Float32, Shape: []int{len(x)}, Data: x}
}

// zeroBackward is Backward under ZeRO: the step has reduce-scattered the
// gradients into this rank's partition (program_zero.go; stage 1 at the
// window's end, stage 2 every micro-batch), which the views' Grad slice.
func (a *Accelerator) zeroBackward(out *Output) error {
	if len(a.models) == 0 {
		return fmt.Errorf("accelerator: Backward before PrepareModel")
	}
	a.models[0].fresh = false
	return nil
}

// stepParams are the parameters the optimizer steps: this rank's slices
// under ZeRO, the whole parameters otherwise. Code that changes gradients
// before the step (clipping, unscaling) must act on these.
func (m *Model) stepParams() []*optim.Param {
	if m.zero != nil {
		return m.zero.views
	}
	return m.params
}

// zeroStep steps this rank's slices (the optimizer's step program over the
// views of the program's state, bind) and all-gathers the parameters (an
// AllGather op over the program's parameter state).
func (a *Accelerator) zeroStep(o *Optimizer) error {
	m := o.model
	z := m.zero
	for j, v := range z.views {
		v.Group = m.params[z.viewOf[j]].Group
	}
	if err := z.bind(m.Prog, o.Inner); err != nil {
		return fmt.Errorf("accelerator: %w", err)
	}
	if err := o.Inner.Step(z.views); err != nil {
		return err
	}
	ctx, comm := a.withComm(context.Background(), m)
	err := m.Prog.AllGatherParams(ctx)
	if cerr := comm.end(err != nil); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("accelerator: %w", err)
	}
	return nil
}

// zeroClipGradValue is ClipGradValue under ZeRO: a ClipGradValue op over
// this rank's gradient views, in place in the program's partition (the
// elements are independent, so clamping the slices is clamping the whole
// gradients).
func (a *Accelerator) zeroClipGradValue(m *Model, v float64) error {
	if v < 0 || math.IsNaN(v) {
		return fmt.Errorf("optim: ClipGradValue: invalid clip value %v", v)
	}
	z := m.zero
	if err := z.declareViews(m.Prog); err != nil {
		return fmt.Errorf("accelerator: %w", err)
	}
	if len(z.views) == 0 {
		return nil
	}
	if z.clipValue == nil {
		names, sizes := make([]string, len(z.views)), make([]int, len(z.views))
		for j, w := range z.views {
			names[j], sizes[j] = w.Name, w.Value.Size()
		}
		exe, err := m.Prog.compileZeroGradOp(graph.ClipGradValueOp, names, sizes, false)
		if err != nil {
			return fmt.Errorf("accelerator: %w", err)
		}
		z.clipValue = exe
		z.clipValueFeeds = map[string]*graph.Tensor{"onnxtrain/scalar": graph.FromFloat32([]float32{0})}
	}
	z.clipValueFeeds["onnxtrain/scalar"].Float32s()[0] = float32(v)
	if _, err := z.clipValue.Run(context.Background(), z.clipValueFeeds); err != nil {
		return fmt.Errorf("accelerator: ZeRO gradient clipping at step %d: %w", a.step+1, err)
	}
	return nil
}

// zeroClipGradNorm is ClipGradNorm under ZeRO: a ClipGradNormSharded op
// over this rank's gradient views (graph/zero_ops.go) adds the
// per-parameter sums of squares across ranks, and the norm and the scale
// are those of optim.ClipGradNorm on the whole gradients, applied in place
// in the partition. (A world with an empty partition, fewer elements than
// ranks, clips on the host: the op needs a slice on every rank.)
func (a *Accelerator) zeroClipGradNorm(m *Model, maxNorm float64) (float64, error) {
	z := m.zero
	if (z.world-1)*z.part < z.total {
		return a.zeroClipGradNormOp(m, maxNorm)
	}
	sums := make([]float64, len(m.params))
	for j, v := range z.views {
		if v.Grad == nil {
			continue
		}
		var s float64
		for _, x := range v.Grad.Float32s() {
			s += float64(x) * float64(x)
		}
		sums[z.viewOf[j]] += s
	}
	ctx := distrib.WithStep(context.Background(), int64(a.step+1))
	all, err := a.cfg.Group.AllGatherObject(ctx, encodeFloats(sums))
	if err != nil {
		return 0, fmt.Errorf("accelerator: ZeRO gradient norm at step %d: %w", a.step+1, err)
	}
	clear(sums)
	for r, b := range all {
		part, err := decodeFloats(b, len(sums))
		if err != nil {
			return 0, fmt.Errorf("accelerator: ZeRO gradient norm at step %d, from rank %d: %w", a.step+1, r, err)
		}
		for i, s := range part {
			sums[i] += s
		}
	}
	var sum float64
	for _, s := range sums {
		n := float64(float32(math.Sqrt(s))) // each parameter's norm, rounded to float32 as torch's is
		sum += n * n
	}
	total := float32(math.Sqrt(sum))
	coef := (1 / (total + float32(1e-6))) * float32(maxNorm)
	if coef < 1 {
		for _, v := range z.views {
			if v.Grad == nil {
				continue
			}
			g := v.Grad.Float32s()
			for i := range g {
				g[i] *= coef
			}
		}
	}
	return float64(total), nil
}

// zeroUnscaleGrads is fp16's unscale under ZeRO: an UnscaleGradsSharded
// op over this rank's gradient views, in place in the partition, whose
// found-inf flag is every rank's (so that every rank skips the same
// steps).
func (a *Accelerator) zeroUnscaleGrads(m *Model, inv float32) (bool, error) {
	z := m.zero
	if z.unscale == nil {
		if (z.world-1)*z.part >= z.total {
			return false, fmt.Errorf("accelerator: ZeRO with fp16 needs more parameter elements (%d) than a partition of every rank holds: use fewer processes", z.total)
		}
		if err := z.declareViews(m.Prog); err != nil {
			return false, fmt.Errorf("accelerator: %w", err)
		}
		names, sizes := make([]string, len(z.views)), make([]int, len(z.views))
		for j, w := range z.views {
			names[j], sizes[j] = w.Name, w.Value.Size()
		}
		exe, err := m.Prog.compileZeroGradOp(graph.UnscaleGradsShardedOp, names, sizes, true)
		if err != nil {
			return false, fmt.Errorf("accelerator: %w", err)
		}
		z.unscale = exe
		z.unscaleFeeds = map[string]*graph.Tensor{"onnxtrain/scalar": graph.FromFloat32([]float32{0})}
	}
	z.unscaleFeeds["onnxtrain/scalar"].Float32s()[0] = inv
	ctx, comm := a.withComm(context.Background(), m)
	out, err := z.unscale.Run(ctx, z.unscaleFeeds)
	if comm != nil {
		if cerr := comm.end(err != nil); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return false, fmt.Errorf("accelerator: ZeRO gradient unscale at step %d: %w", a.step+1, err)
	}
	return out["onnxtrain/result"].Data.([]bool)[0], nil
}

// zeroClipGradNormOp runs zeroClipGradNorm's ClipGradNormSharded program
// (compiled on first use) with the communicator.
func (a *Accelerator) zeroClipGradNormOp(m *Model, maxNorm float64) (float64, error) {
	z := m.zero
	if err := z.declareViews(m.Prog); err != nil {
		return 0, fmt.Errorf("accelerator: %w", err)
	}
	if z.clipNorm == nil {
		names, sizes := make([]string, len(z.views)), make([]int, len(z.views))
		of := make([]int64, len(z.views))
		for j, w := range z.views {
			names[j], sizes[j], of[j] = w.Name, w.Value.Size(), int64(z.viewOf[j])
		}
		exe, err := m.Prog.compileZeroGradOp(graph.ClipGradNormShardedOp, names, sizes, true,
			graph.IntAttr("whole", int64(len(m.params))), graph.IntsAttr("slice_of", of...))
		if err != nil {
			return 0, fmt.Errorf("accelerator: %w", err)
		}
		z.clipNorm = exe
		z.clipNormFeeds = map[string]*graph.Tensor{"onnxtrain/scalar": graph.FromFloat32([]float32{0})}
	}
	z.clipNormFeeds["onnxtrain/scalar"].Float32s()[0] = float32(maxNorm)
	ctx, comm := a.withComm(context.Background(), m)
	out, err := z.clipNorm.Run(ctx, z.clipNormFeeds)
	if comm != nil {
		if cerr := comm.end(err != nil); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return 0, fmt.Errorf("accelerator: ZeRO gradient norm at step %d: %w", a.step+1, err)
	}
	return out["onnxtrain/result"].Float(0), nil
}

// ZeroMemory is the memory one rank keeps across steps for training state.
type ZeroMemory struct {
	// Params, Grads and Optimizer are the bytes of the parameters, of the
	// gradient buffers the accelerator keeps (not the executor's outputs)
	// and of the optimizer's state tensors on this rank.
	Params, Grads, Optimizer int64
	// Staging is the collectives' staging buffer.
	Staging int64
}

// ZeroMemory reports this rank's persistent training-state memory (after
// at least one step, once the buffers exist).
func (a *Accelerator) ZeroMemory() (ZeroMemory, error) {
	if len(a.models) == 0 || len(a.opts) == 0 {
		return ZeroMemory{}, fmt.Errorf("accelerator: ZeroMemory needs a prepared model and optimizer")
	}
	m := a.models[0]
	var r ZeroMemory
	for _, p := range m.params {
		r.Params += 4 * int64(p.Value.Size())
	}
	if m.zero == nil || m.zero.stage == 1 {
		for _, g := range m.grads {
			if g != nil {
				r.Grads += 4 * int64(g.Size())
			}
		}
	}
	if m.zero != nil {
		r.Grads += 4 * int64(len(m.zero.grad)) // the partition
	}
	for _, t := range a.opts[0].Inner.State() {
		r.Optimizer += int64(t.Size() * t.DType.Size())
	}
	if m.zero == nil && a.comm != nil {
		// (Under ZeRO the ReduceScatter and AllGather kernels stage each
		// collective in a buffer of their call: none is kept.)
		r.Staging = 4 * int64(cap(a.comm.staging))
	}
	return r, nil
}

// Checkpoints under ZeRO.

// ckptZeroShardsMetaKey is the optimizer.safetensors metadata entry that
// holds the number of optimizer-state shard files (absent: unsharded).
const ckptZeroShardsMetaKey = "onnxtrain.zero_shards"

// ckptZeroRangesMetaKey is a shard file's metadata entry: a JSON object
// giving, per parameter, the element range the shard holds and the
// parameter's shape.
const ckptZeroRangesMetaKey = "onnxtrain.zero_ranges"

// zeroRange is the element range [Start, End) of a parameter of Shape.
type zeroRange struct {
	Start int   `json:"start"`
	End   int   `json:"end"`
	Shape []int `json:"shape"`
}

// ZeroShardFile is the name of rank's optimizer-state shard in a
// checkpoint saved by world processes under ZeRO.
func ZeroShardFile(rank, world int) string {
	return fmt.Sprintf("optimizer-shard-%05d-of-%05d.safetensors", rank, world)
}

var zeroShardFileRE = regexp.MustCompile(`^optimizer-shard-\d{5,}-of-\d{5,}\.safetensors$`)

// isZeroShardFile reports whether name is a ZeroShardFile name.
func isZeroShardFile(name string) bool { return zeroShardFileRE.MatchString(name) }

// zeroShardBytes encodes this rank's optimizer state (its per-parameter
// entries) with the element ranges of its slices.
func (a *Accelerator) zeroShardBytes() ([]byte, error) {
	m := a.models[0]
	z := m.zero
	tensors := map[string]*graph.Tensor{}
	for k, t := range a.opts[0].Inner.State() {
		if strings.Contains(k, "/") {
			tensors[k] = t
		}
	}
	ranges := map[string]zeroRange{}
	for j, v := range z.views {
		ranges[v.Name] = zeroRange{Start: z.viewLo[j], End: z.viewLo[j] + v.Value.Size(), Shape: m.params[z.viewOf[j]].Value.Shape}
	}
	return encodeZeroShard(tensors, ranges, z.rank, z.world)
}

// encodeZeroShard is the shard file of rank of world: the per-parameter
// entries tensors, with each parameter's element range in the metadata.
func encodeZeroShard(tensors map[string]*graph.Tensor, ranges map[string]zeroRange, rank, world int) ([]byte, error) {
	rb, err := json.Marshal(ranges)
	if err != nil {
		return nil, err
	}
	return tensorio.EncodeSafetensors(tensors, map[string]string{"format": "pt", ckptZeroRangesMetaKey: string(rb),
		"onnxtrain.zero_rank": strconv.Itoa(rank), "onnxtrain.zero_world_size": strconv.Itoa(world)})
}

// zeroShardEntry is what a rank reports to rank 0 about the shard file it
// wrote.
type zeroShardEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Err    string `json:"err,omitempty"`
}

// saveZeroState is SaveState under ZeRO; every rank calls it. Rank 0
// writes the checkpoint as SaveState does and, once its data files are in
// the temporary folder, broadcasts the folder's name; every rank writes its
// shard there and reports the file's size and SHA-256 to rank 0, which
// lists them in the manifest and commits the folder. Rank 0 then
// broadcasts the outcome, so every rank returns the same error.
func (a *Accelerator) saveZeroState(dir string) error {
	ctx := context.Background()
	g := a.cfg.Group
	z := a.models[0].zero
	raw, encErr := a.zeroShardBytes()
	write := func(tmp string) zeroShardEntry {
		e := zeroShardEntry{Name: ZeroShardFile(z.rank, z.world)}
		switch {
		case encErr != nil:
			e.Err = encErr.Error()
		case tmp == "":
			e.Err = "rank 0 did not start the checkpoint"
		default:
			if err := ckptWriteSynced(filepath.Join(tmp, e.Name), raw); err != nil {
				e.Err = fmt.Sprintf("writing %s (do the ranks share the file system?): %v", e.Name, err)
				break
			}
			sum := sha256.Sum256(raw)
			e.Size, e.SHA256 = int64(len(raw)), hex.EncodeToString(sum[:])
		}
		return e
	}
	encode := func(e zeroShardEntry) []byte {
		b, _ := json.Marshal(e)
		return b
	}
	if z.rank != 0 {
		tmp, err := g.BroadcastObject(ctx, nil, 0)
		if err != nil {
			return fmt.Errorf("accelerator: checkpoint %s: %w", dir, err)
		}
		if _, err := g.GatherObject(ctx, encode(write(string(tmp))), 0); err != nil {
			return fmt.Errorf("accelerator: checkpoint %s: %w", dir, err)
		}
		res, err := g.BroadcastObject(ctx, nil, 0)
		if err != nil {
			return fmt.Errorf("accelerator: checkpoint %s: %w", dir, err)
		}
		if len(res) > 0 {
			return fmt.Errorf("accelerator: checkpoint %s failed on rank 0: %s", dir, res)
		}
		return nil
	}
	exchanged := false
	exchange := func(tmp string) (map[string]ManifestFile, error) {
		exchanged = true
		if _, err := g.BroadcastObject(ctx, []byte(tmp), 0); err != nil {
			return nil, err
		}
		all, err := g.GatherObject(ctx, encode(write(tmp)), 0)
		if err != nil {
			return nil, err
		}
		files := map[string]ManifestFile{}
		var problems []error
		for r, b := range all {
			var e zeroShardEntry
			if err := json.Unmarshal(b, &e); err != nil {
				problems = append(problems, fmt.Errorf("rank %d sent a malformed report: %v", r, err))
			} else if e.Err != "" {
				problems = append(problems, fmt.Errorf("rank %d: %s", r, e.Err))
			} else if e.Name != ZeroShardFile(r, z.world) {
				problems = append(problems, fmt.Errorf("rank %d wrote %q, want %q", r, e.Name, ZeroShardFile(r, z.world)))
			} else {
				files[e.Name] = ManifestFile{Size: e.Size, SHA256: e.SHA256}
			}
		}
		return files, errors.Join(problems...)
	}
	st, err := a.stateToSave()
	if err == nil {
		for k := range st.Optimizer {
			if strings.Contains(k, "/") {
				delete(st.Optimizer, k) // in the shards
			}
		}
		st.OptimizerShards = z.world
		err = saveStateWith(dir, st, exchange)
	}
	if !exchanged {
		// The other ranks wait for the folder's name, and then report.
		if _, berr := g.BroadcastObject(ctx, []byte{}, 0); berr == nil {
			g.GatherObject(ctx, encode(write("")), 0)
		}
	}
	msg := []byte{}
	if err != nil {
		msg = []byte(err.Error())
	}
	if _, berr := g.BroadcastObject(ctx, msg, 0); berr != nil && err == nil {
		err = fmt.Errorf("accelerator: checkpoint %s: saved, but telling the other ranks failed: %w", dir, berr)
	}
	return err
}

// mergeZeroShards adds to opt the whole per-parameter tensors reassembled
// from the world shard files of a checkpoint (data holds its verified
// files by name).
func mergeZeroShards(dir string, opt map[string]*graph.Tensor, data map[string][]byte, world int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("train: checkpoint %s: %w: %s", dir, ErrCheckpointCorrupt, fmt.Sprintf(format, args...))
	}
	// Each key's element ranges: they must not overlap, and together
	// they must cover the tensor.
	written := map[string][][2]int{}
	// First every shard must be there (a corrupt shard count fails at the
	// first missing file, not after counting up to it), and their bytes
	// are counted: every element of a sharded tensor comes from one
	// shard's data, four bytes each, so a range naming a tensor larger
	// than that fails before the tensor is allocated.
	shards := make([][]byte, 0, min(world, len(data)))
	shardBytes := 0
	for r := 0; r < world; r++ {
		name := ZeroShardFile(r, world)
		b, ok := data[name]
		if !ok {
			return fmt.Errorf("train: checkpoint %s: %w: the optimizer state was saved in %d shards, and the manifest does not list %s", dir, ErrCheckpointIncomplete, world, name)
		}
		shards = append(shards, b)
		shardBytes += len(b)
	}
	for r, b := range shards {
		name := ZeroShardFile(r, world)
		ts, meta, err := tensorio.DecodeSafetensors(b)
		if err != nil {
			return bad("%s: %v", name, err)
		}
		var ranges map[string]zeroRange
		if err := json.Unmarshal([]byte(meta[ckptZeroRangesMetaKey]), &ranges); err != nil {
			return bad("%s: metadata %q: %v", name, ckptZeroRangesMetaKey, err)
		}
		for _, key := range ckptKeys(ts) {
			t := ts[key]
			i := strings.LastIndexByte(key, '/')
			if i <= 0 {
				return bad("%s: unexpected entry %q (per-parameter entries only)", name, key)
			}
			rg, ok := ranges[key[:i]]
			if !ok {
				return bad("%s: entry %q has no element range", name, key)
			}
			if !t.DType.IsFloat() {
				// Replicated per-parameter scalars (Adam's step).
				if prev, ok := opt[key]; ok && !sameTensor(prev, t) {
					return bad("%s: entry %q differs from another shard's", name, key)
				}
				opt[key] = t
				continue
			}
			size, err := graph.NumElements(rg.Shape)
			if err != nil || rg.Start < 0 || rg.Start >= rg.End || rg.End > size || t.DType != graph.Float32 || t.Size() != rg.End-rg.Start {
				return bad("%s: entry %q (%v %v) does not fit its range [%d, %d) of a parameter of shape %v", name, key, t.DType, t.Shape, rg.Start, rg.End, rg.Shape)
			}
			full, ok := opt[key]
			switch {
			case !ok && size > shardBytes/4:
				return bad("%s: entry %q: a parameter of shape %v (%d elements) is more than the shards' %d bytes could hold", name, key, rg.Shape, size, shardBytes)
			case !ok:
				full = graph.Zeros(graph.Float32, rg.Shape...)
				opt[key] = full
			case full.DType != graph.Float32 || !graph.SameShape(full.Shape, rg.Shape):
				return bad("%s: entry %q: float32 of shape %v, another shard or the optimizer file says %v of shape %v", name, key, rg.Shape, full.DType, full.Shape)
			}
			for _, w := range written[key] {
				if rg.Start < w[1] && w[0] < rg.End {
					return bad("%s: entry %q: range [%d, %d) overlaps [%d, %d) of another shard", name, key, rg.Start, rg.End, w[0], w[1])
				}
			}
			written[key] = append(written[key], [2]int{rg.Start, rg.End})
			copy(full.Float32s()[rg.Start:rg.End], t.Float32s())
		}
	}
	for _, key := range ckptKeys(written) {
		covered := 0
		for _, w := range written[key] {
			covered += w[1] - w[0]
		}
		if n := opt[key].Size(); covered != n {
			return bad("the shards cover %d of the %d elements of %q", covered, n, key)
		}
	}
	return nil
}

func sameTensor(a, b *graph.Tensor) bool {
	if a.DType != b.DType || !graph.SameShape(a.Shape, b.Shape) {
		return false
	}
	x, _ := tensorio.EncodeSafetensors(map[string]*graph.Tensor{"t": a}, nil)
	y, _ := tensorio.EncodeSafetensors(map[string]*graph.Tensor{"t": b}, nil)
	return string(x) == string(y)
}

// slice cuts whole per-parameter optimizer tensors (as a checkpoint
// holds them) down to this rank's slices.
func (z *zeroShard) slice(st map[string]*graph.Tensor) map[string]*graph.Tensor {
	out := map[string]*graph.Tensor{}
	for key, t := range st {
		i := strings.LastIndexByte(key, '/')
		if i <= 0 {
			out[key] = t
			continue
		}
		j, ok := z.byName[key[:i]]
		if !ok {
			continue // another rank's
		}
		if !t.DType.IsFloat() || t.DType != graph.Float32 {
			out[key] = t
			continue
		}
		lo, n := z.viewLo[j], z.views[j].Value.Size()
		out[key] = flatView(append([]float32(nil), t.Float32s()[lo:lo+n]...))
	}
	return out
}
