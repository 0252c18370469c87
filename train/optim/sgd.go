package optim

import (
	"context"
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/backend"

	"github.com/onnxtrain/onnxtrain/graph"
)

// SGDConfig configures NewSGD; the fields mean what torch.optim.SGD's
// arguments of the same names mean.
type SGDConfig struct {
	LR          float64
	Momentum    float64
	Dampening   float64
	WeightDecay float64 // L2 penalty added to the gradient (group 0 by default)
	Nesterov    bool
	Maximize    bool
	// Groups overrides the default groups: {WeightDecay}, {no decay}.
	Groups []Group
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay.
type SGD struct {
	cfg    SGDConfig
	lr     float64
	groups []Group
	steps  int64
	buf    map[string]*graph.Tensor // momentum buffers, created on first use
	seen   map[string]bool          // checkParams's names, reused

	// The compiled step (program.go) and what each Step hands it, reused.
	prog   stepProgram
	names  []string
	values []*graph.Tensor
	grads  []*graph.Tensor
	bufs   []*graph.Tensor
	slots  [][]*graph.Tensor
	hyper  []float32
	attrs  []*graph.Attr
	// fused.go: momentum buffers FusedSlots created that no update has
	// used yet (their first update replaces them), and its result.
	fresh     map[string]bool
	undo      map[string]bool // the fresh buffers the latest FusedHyper used
	fusedSlot [1]*graph.Tensor
}

// NewSGD validates cfg as torch.optim.SGD does and returns the optimizer.
func NewSGD(cfg SGDConfig) (Optimizer, error) {
	switch {
	case cfg.LR < 0 || math.IsNaN(cfg.LR):
		return nil, fmt.Errorf("optim: SGD: invalid learning rate %v", cfg.LR)
	case cfg.Momentum < 0 || math.IsNaN(cfg.Momentum):
		return nil, fmt.Errorf("optim: SGD: invalid momentum %v", cfg.Momentum)
	case cfg.WeightDecay < 0 || math.IsNaN(cfg.WeightDecay):
		return nil, fmt.Errorf("optim: SGD: invalid weight decay %v", cfg.WeightDecay)
	case cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0):
		return nil, fmt.Errorf("optim: SGD: Nesterov momentum requires a momentum and zero dampening (momentum %v, dampening %v)", cfg.Momentum, cfg.Dampening)
	}
	groups, err := makeGroups(cfg.LR, cfg.WeightDecay, cfg.Groups)
	if err != nil {
		return nil, err
	}
	return &SGD{cfg: cfg, lr: cfg.LR, groups: groups, buf: map[string]*graph.Tensor{}}, nil
}

// Groups returns a copy of the parameter groups.
func (o *SGD) Groups() []Group { return append([]Group(nil), o.groups...) }

// SetLR sets the learning rate of every group (times its LRScale).
func (o *SGD) SetLR(lr float64) { o.lr = lr; setGroupLR(o.groups, lr) }

// LR is the optimizer-wide learning rate.
func (o *SGD) LR() float64 { return o.lr }

// Step applies one SGD update (torch 1.13 _single_tensor_sgd).
func (o *SGD) Step(params []*Param) error { return o.StepContext(context.Background(), params) }

// Bind implements Binder.
func (o *SGD) Bind(be backend.Backend, share backend.Executable) {
	o.prog = stepProgram{be: be, share: share}
}

// StepContext implements ContextStepper.
func (o *SGD) StepContext(ctx context.Context, params []*Param) error {
	if o.seen == nil {
		o.seen = make(map[string]bool, len(params))
	}
	if err := checkParams(params, len(o.groups), o.seen); err != nil {
		return err
	}
	for _, p := range params {
		if p.Grad != nil {
			if err := checkSlot(p.Name, "momentum_buffer", o.buf[p.Name], p.Value.Shape); err != nil {
				return err
			}
		}
	}
	momentum := o.cfg.Momentum != 0
	o.names, o.values, o.grads, o.bufs, o.hyper = o.names[:0], o.values[:0], o.grads[:0], o.bufs[:0], o.hyper[:0]
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		grp := o.groups[p.Group]
		first := float32(0)
		if momentum {
			b := o.buf[p.Name]
			if b == nil {
				b = graph.Zeros(graph.Float32, p.Value.Shape...)
				o.buf[p.Name] = b
				first = 1
			}
			o.bufs = append(o.bufs, b)
		}
		o.names = append(o.names, p.Name)
		o.values = append(o.values, p.Value)
		o.grads = append(o.grads, p.Grad)
		o.hyper = append(o.hyper, float32(-grp.LR), float32(grp.WeightDecay), first)
	}
	o.slots = o.slots[:0]
	if momentum {
		o.slots = append(o.slots, o.bufs)
	}
	if o.attrs == nil {
		o.attrs = []*graph.Attr{graph.IntAttr("momentum", b2i(momentum)), graph.IntAttr("nesterov", b2i(o.cfg.Nesterov)), graph.IntAttr("maximize", b2i(o.cfg.Maximize))}
	}
	consts := [2]float32{float32(o.cfg.Momentum), float32(1 - o.cfg.Dampening)}
	err := o.prog.run(ctx, graph.SGDUpdateOp, o.attrs, [3]bool{momentum}, o.names, o.values, o.grads, o.slots, consts[:], o.hyper)
	if o.prog.rebound {
		for i, name := range o.names {
			o.buf[name] = o.bufs[i]
		}
	}
	clear(o.values)
	clear(o.grads)
	clear(o.bufs)
	if err != nil {
		return err
	}
	o.steps++
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// State returns "step", "lr" and "<param>/momentum_buffer" for every
// param that has one.
func (o *SGD) State() map[string]*graph.Tensor {
	st := map[string]*graph.Tensor{"step": int64Scalar(o.steps), "lr": float64Scalar(o.lr)}
	for name, b := range o.buf {
		st[name+"/momentum_buffer"] = b.Clone()
	}
	return st
}

// LoadState restores what State returned.
func (o *SGD) LoadState(st map[string]*graph.Tensor) error {
	steps, lr, err := loadCommon(st)
	if err != nil {
		return err
	}
	buf := map[string]*graph.Tensor{}
	for _, k := range sortedKeys(st) {
		if k == "step" || k == "lr" {
			continue
		}
		name, slot, ok := splitKey(k)
		if !ok || slot != "momentum_buffer" {
			return fmt.Errorf("optim: SGD: %w: unexpected entry %q", ErrState, k)
		}
		if o.cfg.Momentum == 0 {
			return fmt.Errorf("optim: SGD: %w: %q given but momentum is 0", ErrState, k)
		}
		t, err := float32State(k, st[k])
		if err != nil {
			return err
		}
		buf[name] = t
	}
	o.steps, o.buf, o.fresh = steps, buf, nil
	o.SetLR(lr)
	return nil
}

// loadCommon reads the "step" and "lr" entries every optimizer state has.
func loadCommon(st map[string]*graph.Tensor) (int64, float64, error) {
	for _, k := range []string{"step", "lr"} {
		if _, ok := st[k]; !ok {
			return 0, 0, fmt.Errorf("optim: %w: %q is missing", ErrState, k)
		}
	}
	steps, err := scalarState("step", st["step"], true)
	if err != nil {
		return 0, 0, err
	}
	lr, err := scalarState("lr", st["lr"], false)
	if err != nil {
		return 0, 0, err
	}
	return int64(steps), lr, nil
}
