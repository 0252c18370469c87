package optim

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Fused describes an optimizer's update for a training program that runs it
// as nodes of its own step (train.Program.BindUpdate): one graph.SGDUpdateOp
// or graph.AdamUpdateOp node per parameter, placed where the parameter's
// gradient is final, so that the gradient is a transient value of the
// step and never needs a buffer of its own between steps.
type Fused struct {
	// Op is graph.SGDUpdateOp or graph.AdamUpdateOp.
	Op string
	// Attrs are the node's attributes, "tensors" left out.
	Attrs []*graph.Attr
	// Consts is the node's consts input.
	Consts []float32
	// Cols is the width of a parameter's row of the hyper input.
	Cols int
	// Slots names the slot groups ("momentum_buffer"; "exp_avg",
	// "exp_avg_sq", "max_exp_avg_sq"), in the node's operand order.
	Slots []string
}

// Fuser is implemented by the optimizers of this package (SGD, Adam,
// AdamW): what a training program needs to run their update inside its
// step, bit for bit as Step computes it.
type Fuser interface {
	// FusedUpdate describes the update node.
	FusedUpdate() Fused
	// FusedSlots returns p's slot tensors in Fused.Slots order, creating
	// zeros for a parameter that has none yet (as its first Step would).
	FusedSlots(p *Param) ([]*graph.Tensor, error)
	// SetFusedSlot makes t (a program's state buffer holding the same
	// values) slot k of parameter name.
	SetFusedSlot(name string, k int, t *graph.Tensor)
	// FusedHyper writes each parameter's row of the next step's hyper
	// input into hyper (len(params)*Cols values) and counts the step, as
	// Step does before it runs the update.
	FusedHyper(params []*Param, hyper []float32) error
	// UndoFusedHyper takes back the step count of the latest FusedHyper
	// over the same params: the program skipped that update (fp16's
	// found-inf), and a skipped step does not count, as PyTorch's
	// GradScaler does not call the optimizer's step.
	UndoFusedHyper(params []*Param)
}

var (
	_ Fuser = (*SGD)(nil)
	_ Fuser = (*Adam)(nil)
)

// FusedUpdate implements Fuser.
func (o *SGD) FusedUpdate() Fused {
	momentum := o.cfg.Momentum != 0
	f := Fused{Op: graph.SGDUpdateOp, Cols: 3,
		Attrs:  []*graph.Attr{graph.IntAttr("momentum", b2i(momentum)), graph.IntAttr("nesterov", b2i(o.cfg.Nesterov)), graph.IntAttr("maximize", b2i(o.cfg.Maximize))},
		Consts: []float32{float32(o.cfg.Momentum), float32(1 - o.cfg.Dampening)}}
	if momentum {
		f.Slots = []string{"momentum_buffer"}
	}
	return f
}

// FusedSlots implements Fuser. A momentum buffer it creates is marked
// fresh: the first update replaces it (b = d) as the first Step does.
func (o *SGD) FusedSlots(p *Param) ([]*graph.Tensor, error) {
	if o.cfg.Momentum == 0 {
		return nil, nil
	}
	b := o.buf[p.Name]
	if b == nil {
		b = graph.Zeros(graph.Float32, p.Value.Shape...)
		o.buf[p.Name] = b
		if o.fresh == nil {
			o.fresh = map[string]bool{}
		}
		o.fresh[p.Name] = true
	} else if err := checkSlot(p.Name, "momentum_buffer", b, p.Value.Shape); err != nil {
		return nil, err
	}
	o.fusedSlot[0] = b
	return o.fusedSlot[:], nil
}

// SetFusedSlot implements Fuser.
func (o *SGD) SetFusedSlot(name string, k int, t *graph.Tensor) {
	if k == 0 && o.buf[name] != nil {
		o.buf[name] = t
	}
}

// FusedHyper implements Fuser: per parameter (-lr, weight_decay, first).
func (o *SGD) FusedHyper(params []*Param, hyper []float32) error {
	if len(hyper) != 3*len(params) {
		return fmt.Errorf("optim: SGD: hyper holds %d values for %d params", len(hyper), len(params))
	}
	for i, p := range params {
		if p.Group < 0 || p.Group >= len(o.groups) {
			return fmt.Errorf("optim: param %q: group %d out of range (have %d)", p.Name, p.Group, len(o.groups))
		}
		grp := o.groups[p.Group]
		first := float32(0)
		if o.fresh[p.Name] {
			first = 1
		}
		hyper[3*i], hyper[3*i+1], hyper[3*i+2] = float32(-grp.LR), float32(grp.WeightDecay), first
	}
	// The buffers are no longer fresh once the update ran (UndoFusedHyper
	// makes them fresh again).
	if o.undo == nil {
		o.undo = map[string]bool{}
	}
	clear(o.undo)
	for _, p := range params {
		if o.fresh[p.Name] {
			o.undo[p.Name] = true
			delete(o.fresh, p.Name)
		}
	}
	o.steps++
	return nil
}

// UndoFusedHyper implements Fuser.
func (o *SGD) UndoFusedHyper(params []*Param) {
	for name := range o.undo {
		o.fresh[name] = true
	}
	clear(o.undo)
	o.steps--
}

// UndoFusedHyper implements Fuser.
func (o *Adam) UndoFusedHyper(params []*Param) {
	for _, p := range params {
		if s := o.state[p.Name]; s != nil {
			s.step--
		}
	}
	o.steps--
}

// FusedUpdate implements Fuser.
func (o *Adam) FusedUpdate() Fused {
	f := Fused{Op: graph.AdamUpdateOp, Cols: 5,
		Attrs:  []*graph.Attr{graph.IntAttr("amsgrad", b2i(o.cfg.AMSGrad)), graph.IntAttr("maximize", b2i(o.cfg.Maximize)), graph.IntAttr("decoupled", b2i(o.decoupled))},
		Consts: []float32{float32(o.cfg.Beta1), float32(o.cfg.Beta2), float32(1 - o.cfg.Beta1), float32(1 - o.cfg.Beta2), float32(o.cfg.Eps)},
		Slots:  []string{"exp_avg", "exp_avg_sq"}}
	if o.cfg.AMSGrad {
		f.Slots = append(f.Slots, "max_exp_avg_sq")
	}
	return f
}

// FusedSlots implements Fuser.
func (o *Adam) FusedSlots(p *Param) ([]*graph.Tensor, error) {
	s := o.state[p.Name]
	if s == nil {
		s = &adamState{expAvg: graph.Zeros(graph.Float32, p.Value.Shape...), expAvgSq: graph.Zeros(graph.Float32, p.Value.Shape...)}
		if o.cfg.AMSGrad {
			s.maxSq = graph.Zeros(graph.Float32, p.Value.Shape...)
		}
		o.state[p.Name] = s
	}
	out := o.fusedSlot[:0]
	for _, c := range []struct {
		slot string
		t    *graph.Tensor
	}{{"exp_avg", s.expAvg}, {"exp_avg_sq", s.expAvgSq}, {"max_exp_avg_sq", s.maxSq}} {
		if c.slot == "max_exp_avg_sq" && !o.cfg.AMSGrad {
			break
		}
		if c.t == nil {
			return nil, fmt.Errorf("optim: Adam: %w: %q is missing", ErrState, p.Name+"/"+c.slot)
		}
		if err := checkSlot(p.Name, c.slot, c.t, p.Value.Shape); err != nil {
			return nil, err
		}
		out = append(out, c.t)
	}
	return out, nil
}

// SetFusedSlot implements Fuser.
func (o *Adam) SetFusedSlot(name string, k int, t *graph.Tensor) {
	s := o.state[name]
	if s == nil {
		return
	}
	switch k {
	case 0:
		s.expAvg = t
	case 1:
		s.expAvgSq = t
	case 2:
		s.maxSq = t
	}
}

// FusedHyper implements Fuser: per parameter (-lr/bc1, sqrt(bc2), wd,
// 1-lr*wd, l2), with each parameter's step count advanced.
func (o *Adam) FusedHyper(params []*Param, hyper []float32) error {
	if len(hyper) != 5*len(params) {
		return fmt.Errorf("optim: Adam: hyper holds %d values for %d params", len(hyper), len(params))
	}
	for _, p := range params {
		if p.Group < 0 || p.Group >= len(o.groups) {
			return fmt.Errorf("optim: param %q: group %d out of range (have %d)", p.Name, p.Group, len(o.groups))
		}
		if o.state[p.Name] == nil {
			return fmt.Errorf("optim: Adam: param %q has no state (FusedSlots first)", p.Name)
		}
	}
	for i, p := range params {
		s := o.state[p.Name]
		s.step++
		copy(hyper[5*i:5*i+5], o.hyperRow(p, s))
	}
	o.steps++
	return nil
}
