package train

// The optimizer's update inside the training step (ProgramConfig.FusedUpdate,
// BindUpdate, Step).
//
// For a fixed recipe (an optimizer of train/optim, optionally clipping by
// value, one micro-batch per optimizer step, no fp16 loss scaling, one
// process) the whole optimizer step is one Run of one compiled program:
// forward, loss, backward, and for every parameter its update node
// (graph.SGDUpdateOp/AdamUpdateOp, tensors=1), placed right after the node
// that finishes its gradient and after the last node that reads the
// parameter (or a view of it: tied weights wait for every use). Its
// gradient is then an ordinary value of the step, which the memory plan
// frees once the update has read it: gradients never all live at once and
// the program keeps no gradient sums (PyTorch's "optimizer in backward").
//
// The parameters and the optimizer's slots are state the update nodes
// replace in place (the CPU backend allows that because every other reader
// of the parameter runs before the update: backend/cpu/state_order.go).
// Per step the host computes each parameter's row of scalars (learning
// rate, bias corrections) with the optimizer's own code (optim.Fuser) and
// feeds them; only the loss and, with ReportNorm, the per-tensor gradient
// norms come out.

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// Names of the fused update's inputs and constants.
const (
	stepConsts   = "onnxtrain/step/consts"
	stepHyper    = "onnxtrain/step/hyper/"
	stepMaxNorm  = "onnxtrain/step/max_norm"
	stepClipVal  = "onnxtrain/step/clip_value"
	stepNormOut  = "onnxtrain/step/norm/"
	stepTotal    = "onnxtrain/step/total_norm"
	stepInvScale = "onnxtrain/step/inv_scale"
	stepFoundInf = "onnxtrain/step/found_inf"
	stepUpdateOf = "onnxtrain/step/update/"
)

// UpdateRecipe is what BindUpdate folds into the step besides the
// optimizer's update.
type UpdateRecipe struct {
	// ClipGradValue > 0 clamps each gradient to [-v, v] before its update
	// (torch.nn.utils.clip_grad_value_; element-wise, so it needs no other
	// gradient).
	ClipGradValue float64
	// ClipGradNorm > 0 clips the gradients together to this total L2 norm
	// (torch.nn.utils.clip_grad_norm_) before any update: every gradient
	// then lives until the end of backward (as the gradient sums of the
	// separate path do), and the updates follow one ClipGradNorm node at
	// the end of the step; Step reports the norm before clipping.
	ClipGradNorm float64
	// LossScaled is fp16's dynamic loss scaling (GradScaler): Step's loss
	// scale seeds backward, one UnscaleGrads node at the end of backward
	// multiplies every gradient by its inverse and reports whether any
	// was inf or NaN, and that flag gates every update inside the program
	// (a skipped step changes no parameter nor slot, and the optimizer's
	// step count is taken back). Like ClipGradNorm it needs every gradient
	// before the first update.
	LossScaled bool
	// ReportNorm makes Step return the gradients' total L2 norm as
	// torch.nn.utils.clip_grad_norm_ computes it (each gradient's norm is
	// an output of the step; the total is summed on the host in parameter
	// order, as ClipGradNorm does).
	ReportNorm bool
}

// StepOutput is what one fused training step reports.
type StepOutput struct {
	Loss float64
	// GradNorm is the total gradient norm before clipping (ReportNorm or
	// ClipGradNorm; 0 otherwise).
	GradNorm float64
	// FoundInf (LossScaled) is true when a gradient held an inf or NaN:
	// the step skipped every update.
	FoundInf bool
}

// fusedStep is a program's bound update.
type fusedStep struct {
	opt    optim.Fuser
	recipe UpdateRecipe
	spec   optim.Fused
	params []*optim.Param
	// slots[i][k] is the state name of parameter i's slot k.
	slots [][]string
	// written is the tensor last written into each slot's buffer on a
	// backend whose state is not host memory.
	written  [][]*graph.Tensor
	consts   *graph.Tensor
	invScale *graph.Tensor
	hyper    []float32
	rows     []*graph.Tensor // views of hyper, one per parameter
	rowName  []string        // the rows' input names
	feeds    map[string]*graph.Tensor
	norms    []string
	// deferred is what Build kept to compile the step in BindUpdate.
	model   *graph.Model
	graph   *graph.Graph
	outName string
}

// fusedUpdateConflict says why a configuration cannot fuse the update.
func fusedUpdateConflict(cfg ProgramConfig) error {
	switch {
	case cfg.GradSums:
		return fmt.Errorf("keeps gradient sums across micro-batches (GradSums): the update would need them all")
	case cfg.DataParallel != nil:
		return fmt.Errorf("averages gradients across processes (data parallel)")
	case cfg.Zero != nil:
		return fmt.Errorf("shards the optimizer (ZeRO)")
	}
	return nil
}

// BindUpdate compiles the training step of a program built with
// FusedUpdate: forward, loss, backward and opt's update of every
// parameter (params: the optimizer's view of Params, same order, with
// their groups) in one program. The optimizer's slots become the
// program's state "<param>/<slot>"; later Steps advance opt as its own
// Step would, bit for bit.
func (p *Program) BindUpdate(opt optim.Optimizer, params []*optim.Param, r UpdateRecipe) error {
	f := p.fused
	if f == nil || f.graph == nil {
		if f != nil {
			return fmt.Errorf("train: BindUpdate: the program's update is bound already")
		}
		return fmt.Errorf("train: BindUpdate needs a program built with FusedUpdate")
	}
	fz, ok := opt.(optim.Fuser)
	if !ok {
		return fmt.Errorf("train: BindUpdate: the optimizer %T cannot run inside the step (want SGD, Adam or AdamW of train/optim)", opt)
	}
	if r.ClipGradValue < 0 || math.IsNaN(r.ClipGradValue) {
		return fmt.Errorf("train: BindUpdate: invalid clip value %v", r.ClipGradValue)
	}
	if p.cfg.MixedPrecision == "fp16" && !r.LossScaled {
		return fmt.Errorf("train: BindUpdate: an fp16 program needs UpdateRecipe.LossScaled (its gradients are scaled)")
	}
	if r.ClipGradNorm < 0 || math.IsNaN(r.ClipGradNorm) {
		return fmt.Errorf("train: BindUpdate: invalid max norm %v", r.ClipGradNorm)
	}
	if len(params) != len(p.Params) {
		return fmt.Errorf("train: BindUpdate: %d optimizer params for %d parameters", len(params), len(p.Params))
	}
	for i, prm := range params {
		if prm == nil || prm.Name != p.Params[i].Name || prm.Value != p.Params[i].Value {
			return fmt.Errorf("train: BindUpdate: optimizer param %d is not the program's parameter %q", i, p.Params[i].Name)
		}
	}
	f.opt, f.recipe, f.spec, f.params = fz, r, fz.FusedUpdate(), params
	g, m, outName := f.graph, f.model, f.outName
	f.graph, f.model = nil, nil
	if err := p.compileTraining(m, g, outName); err != nil {
		p.fused = nil
		return err
	}
	// Host-side per-step inputs: the consts and one hyper row per
	// parameter (views of one table, filled by the optimizer each step).
	f.consts = graph.FromFloat32(append([]float32(nil), f.spec.Consts...), len(f.spec.Consts))
	f.invScale = graph.Scalar(graph.Float32, 1)
	f.hyper = make([]float32, f.spec.Cols*len(params))
	f.rows = make([]*graph.Tensor, len(params))
	f.rowName = make([]string, len(params))
	for i := range params {
		f.rowName[i] = stepHyper + strconv.Itoa(i)
		f.rows[i] = &graph.Tensor{DType: graph.Float32, Shape: []int{1, f.spec.Cols}, Data: f.hyper[i*f.spec.Cols : (i+1)*f.spec.Cols]}
	}
	f.feeds = make(map[string]*graph.Tensor, len(p.DataInputs)+len(params)+4)
	return nil
}

// addFusedUpdates makes each parameter's update nodes (norm, clip, update)
// and places them after after[j], j the later of the node that finishes
// the gradient and the last node that reads the parameter or a view of
// it; it returns the slots' state.
func (p *Program) addFusedUpdates(g *graph.Graph, grads []string, producer map[string]int, after map[int][]*graph.Node, late *[]*graph.Node) ([]backend.StateSpec, error) {
	f := p.fused
	spec := f.spec
	lastRead := lastReaders(g, p.Params)
	f32 := func(shape ...int) *graph.Type {
		t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}
		for _, d := range shape {
			t.Shape = append(t.Shape, graph.Dim{Value: int64(d), Known: true})
		}
		return t
	}
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: stepConsts, Type: f32(len(spec.Consts))})
	global := f.recipe.ClipGradNorm > 0 || f.recipe.LossScaled
	var unscale, clip *graph.Node
	tensors := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", int64(len(p.Params)))}
	if f.recipe.LossScaled {
		// One node over every gradient, at the end of backward.
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: stepInvScale, Type: f32()})
		unscale = &graph.Node{Name: stepUpdateOf + "unscale_grads", OpType: graph.UnscaleGradsOp, Domain: graph.InternalDomain,
			Inputs: []string{stepInvScale}, Outputs: []string{stepFoundInf}, Attrs: tensors}
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: stepFoundInf})
		*late = append(*late, unscale)
	}
	if global && (f.recipe.ClipGradNorm > 0 || f.recipe.ReportNorm) {
		// One node over every gradient, after the unscale; each
		// parameter's nodes follow it.
		maxNorm := f.recipe.ClipGradNorm
		if maxNorm <= 0 {
			maxNorm = math.Inf(1)
		}
		g.Initializers[stepMaxNorm] = graph.Scalar(graph.Float32, maxNorm)
		clip = &graph.Node{Name: stepUpdateOf + "clip_grad_norm", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain,
			Inputs: []string{stepMaxNorm}, Outputs: []string{stepTotal}, Attrs: tensors}
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: stepTotal})
		*late = append(*late, clip)
	} else if f.recipe.ReportNorm {
		g.Initializers[stepMaxNorm] = graph.Scalar(graph.Float32, math.Inf(1))
	}
	if f.recipe.ClipGradValue > 0 {
		g.Initializers[stepClipVal] = graph.Scalar(graph.Float32, f.recipe.ClipGradValue)
	}
	var state []backend.StateSpec
	f.slots = make([][]string, len(p.Params))
	f.written = make([][]*graph.Tensor, len(p.Params))
	f.norms = f.norms[:0]
	for i, prm := range p.Params {
		hyper := stepHyper + strconv.Itoa(i)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: hyper, Type: f32(1, spec.Cols)})
		grad := p.scratch.gradNames[i]
		var nodes []*graph.Node
		if unscale != nil {
			unscale.Inputs = append(unscale.Inputs, grad)
			unscale.Outputs = append(unscale.Outputs, grad+"/unscaled")
			grad += "/unscaled"
		}
		if clip != nil {
			clip.Inputs = append(clip.Inputs, grad)
			clip.Outputs = append(clip.Outputs, grad+"/normed")
			grad += "/normed"
		} else if f.recipe.ReportNorm && !global {
			norm := stepNormOut + prm.Name
			nodes = append(nodes, &graph.Node{Name: stepUpdateOf + prm.Name + "/norm", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain,
				Inputs: []string{stepMaxNorm, grad}, Outputs: []string{norm, grad + "/normed"},
				Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}})
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: norm})
			f.norms = append(f.norms, norm)
			grad += "/normed"
		}
		if f.recipe.ClipGradValue > 0 {
			nodes = append(nodes, &graph.Node{Name: stepUpdateOf + prm.Name + "/clip", OpType: graph.ClipGradValueOp, Domain: graph.InternalDomain,
				Inputs: []string{stepClipVal, grad}, Outputs: []string{grad + "/clipped"},
				Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}})
			grad += "/clipped"
		}
		upd := &graph.Node{Name: stepUpdateOf + prm.Name, OpType: spec.Op, Domain: graph.InternalDomain,
			Inputs: []string{stepConsts, hyper, prm.Name, grad}, Outputs: []string{prm.Name + "/new"},
			Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
		for _, a := range spec.Attrs {
			upd.Attrs[a.Name] = a
		}
		if unscale != nil {
			// fp16: the found-inf flag gates the update (skip input 2).
			upd.Attrs["gated"] = graph.IntAttr("gated", 1)
			upd.Inputs = append(upd.Inputs[:2:2], stepFoundInf, prm.Name, grad)
		}
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: prm.Name + "/new"})
		slots, err := f.opt.FusedSlots(f.params[i])
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		if len(slots) != len(spec.Slots) {
			return nil, fmt.Errorf("train: the optimizer gave %d slots for %q, its update has %d", len(slots), prm.Name, len(spec.Slots))
		}
		f.written[i] = make([]*graph.Tensor, len(slots))
		for k, t := range slots {
			name := prm.Name + "/" + spec.Slots[k]
			f.slots[i] = append(f.slots[i], name)
			f.written[i][k] = t
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: typeOf(t)})
			upd.Inputs = append(upd.Inputs, name)
			upd.Outputs = append(upd.Outputs, name+"/new")
			g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name + "/new"})
			state = append(state, backend.StateSpec{Name: name, Init: t, UpdatedBy: name + "/new"})
		}
		nodes = append(nodes, upd)
		j, ok := producer[grads[i]]
		if !ok || global {
			*late = append(*late, nodes...)
			continue
		}
		after[max(j, lastRead[i])] = append(after[max(j, lastRead[i])], nodes...)
	}
	return state, nil
}

// viewOpTypes return a view of their first input on the backends (the
// CPU's kern.View): a read of such a view is a read of the parameter.
var viewOpTypes = map[string]bool{"Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Identity": true}

// lastReaders returns, per parameter, the index of the last node of g
// that reads it or a view of it (-1 if none).
func lastReaders(g *graph.Graph, params []*Parameter) []int {
	of := map[string]int{} // value -> parameter whose storage it shares
	for i, prm := range params {
		of[prm.Name] = i
	}
	last := make([]int, len(params))
	for i := range last {
		last[i] = -1
	}
	for j, n := range g.Nodes {
		read := func(name string) {
			if i, ok := of[name]; ok {
				last[i] = j
			}
		}
		for _, in := range n.Inputs {
			read(in)
		}
		for _, sg := range n.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				read(name)
			}
		}
		if viewOpTypes[n.OpType] && len(n.Inputs) > 0 && len(n.Outputs) > 0 {
			if i, ok := of[n.Inputs[0]]; ok && n.Outputs[0] != "" {
				of[n.Outputs[0]] = i
			}
		}
	}
	return last
}

// syncSlots makes the program's slot buffers hold the optimizer's slots
// (after the optimizer loaded a checkpoint, its tensors are new): each
// differing slot is written into its buffer, and the optimizer keeps the
// buffer where it is host memory.
func (p *Program) syncSlots(st backend.Stateful) error {
	f := p.fused
	for i, prm := range f.params {
		if len(f.slots[i]) == 0 {
			continue
		}
		slots, err := f.opt.FusedSlots(prm)
		if err != nil {
			return fmt.Errorf("train: %w", err)
		}
		for k, t := range slots {
			name := f.slots[i][k]
			h := st.HostState(name)
			if h == t || (h == nil && f.written[i][k] == t) {
				continue
			}
			if err := st.WriteState(name, t); err != nil {
				return fmt.Errorf("train: %w", err)
			}
			f.written[i][k] = t
			if h != nil {
				f.opt.SetFusedSlot(prm.Name, k, h)
			}
		}
	}
	return nil
}

// Step runs one optimizer step of a program whose update is bound
// (BindUpdate): forward, loss, backward and every parameter's update, in
// one Run. The optimizer's step count and per-step scalars advance as its
// Step would; the loss is the batch's before the update.
func (p *Program) Step(ctx context.Context, inputs map[string]*graph.Tensor, labels *graph.Tensor, lossScale float32) (StepOutput, error) {
	f := p.fused
	if f == nil || f.opt == nil {
		return StepOutput{}, fmt.Errorf("train: Step needs an update bound with BindUpdate")
	}
	st, err := p.stateful()
	if err != nil {
		return StepOutput{}, err
	}
	if err := p.syncSlots(st); err != nil {
		return StepOutput{}, err
	}
	feeds := f.feeds
	clear(feeds)
	if err := p.feeds(feeds, inputs, labels); err != nil {
		return StepOutput{}, err
	}
	sc := &p.scratch
	if sc.scale == nil {
		sc.scale = make([]float32, 1)
		sc.scaleData = sc.scale
	}
	sc.scale[0] = lossScale
	sc.scaleT = graph.Tensor{DType: graph.Float32, Data: sc.scaleData}
	feeds[lossScaleInput] = &sc.scaleT
	if err := f.opt.FusedHyper(f.params, f.hyper); err != nil {
		return StepOutput{}, fmt.Errorf("train: %w", err)
	}
	feeds[stepConsts] = f.consts
	if f.recipe.LossScaled {
		// PyTorch: inv_scale = scale.double().reciprocal().float().
		f.invScale.Float32s()[0] = float32(1 / float64(lossScale))
		feeds[stepInvScale] = f.invScale
	}
	for i, r := range f.rows {
		feeds[f.rowName[i]] = r
	}
	out, err := p.trainExe.Run(ctx, feeds)
	clear(feeds)
	if err != nil {
		return StepOutput{}, fmt.Errorf("train: %w", err)
	}
	lt := out[lossValue]
	if lt == nil || lt.Size() != 1 {
		return StepOutput{}, fmt.Errorf("train: %w: the loss is not a scalar", ErrData)
	}
	res := StepOutput{Loss: lt.Float(0)}
	if f.recipe.LossScaled {
		t := out[stepFoundInf]
		if t == nil || t.DType != graph.Bool {
			return StepOutput{}, fmt.Errorf("train: the step did not report its found-inf flag")
		}
		if res.FoundInf = t.Data.([]bool)[0]; res.FoundInf {
			f.opt.UndoFusedHyper(f.params) // the update did not happen
		}
	}
	if clipNode := f.recipe.ClipGradNorm > 0 || (f.recipe.LossScaled && f.recipe.ReportNorm); clipNode {
		t := out[stepTotal]
		if t == nil {
			return StepOutput{}, fmt.Errorf("train: the step did not report its gradient norm")
		}
		res.GradNorm = t.Float(0)
	} else if f.recipe.ReportNorm {
		// As clip_grad_norm_: the norm of the per-tensor float32 norms.
		var sum float64
		for _, name := range f.norms {
			t := out[name]
			if t == nil {
				return StepOutput{}, fmt.Errorf("train: the step did not report %q", name)
			}
			n := t.Float(0)
			sum += n * n
		}
		res.GradNorm = float64(float32(math.Sqrt(sum)))
	}
	return res, nil
}

// UpdateBound reports whether the program's training step holds the
// optimizer's update (BindUpdate).
func (p *Program) UpdateBound() bool { return p.fused != nil && p.fused.opt != nil }
