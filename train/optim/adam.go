package optim

import (
	"context"
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/backend"

	"github.com/onnxtrain/onnxtrain/graph"
)

// AdamConfig configures NewAdam and NewAdamW. Every field is taken as
// given (a zero Beta2 means β2 = 0): start from DefaultAdamConfig or
// DefaultAdamWConfig for PyTorch's defaults.
type AdamConfig struct {
	LR    float64
	Beta1 float64
	Beta2 float64
	Eps   float64
	// WeightDecay is added to the gradient as an L2 penalty by Adam and
	// applied as p *= 1 - lr*wd by AdamW (group 0 by default).
	WeightDecay float64
	AMSGrad     bool
	Maximize    bool
	// Groups overrides the default groups: {WeightDecay}, {no decay}.
	Groups []Group
}

// DefaultAdamConfig returns torch.optim.Adam's defaults with the given LR
// (betas 0.9, 0.999, eps 1e-8, no weight decay).
func DefaultAdamConfig(lr float64) AdamConfig {
	return AdamConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// DefaultAdamWConfig returns torch.optim.AdamW's defaults with the given
// LR (as Adam, with weight decay 0.01).
func DefaultAdamWConfig(lr float64) AdamConfig {
	c := DefaultAdamConfig(lr)
	c.WeightDecay = 0.01
	return c
}

// Adam is Adam (L2 weight decay) or, with decoupled set, AdamW.
type Adam struct {
	cfg       AdamConfig
	decoupled bool
	lr        float64
	groups    []Group
	steps     int64
	state     map[string]*adamState
	seen      map[string]bool // checkParams's names, reused

	// The compiled step (program.go), what each Step hands it (reused),
	// and the bias corrections of the latest step count (powInt is costly).
	prog     stepProgram
	names    []string
	values   []*graph.Tensor
	grads    []*graph.Tensor
	slotBufs [3][]*graph.Tensor
	slots    [][]*graph.Tensor
	hyper    []float32
	attrs    []*graph.Attr
	corrStep int64
	corr     adamCorr
	pow      powWork
	// fused.go: FusedSlots's result and hyperRow's, reused.
	fusedSlot [3]*graph.Tensor
	row       [5]float32
}

// hyperRow is parameter p's row of the update's hyper input at its step
// count s.step: (-lr/bc1, sqrt(bc2), wd, 1-lr*wd, l2), the scalars PyTorch
// computes in Python floats, rounded to float32. The slice is reused.
func (o *Adam) hyperRow(p *Param, s *adamState) []float32 {
	if o.corrStep != s.step || o.corrStep == 0 {
		// Python floats: bias_correction = 1 - beta**step. Params
		// usually share their step count: the latest is kept.
		o.corr = adamCorr{bc1: 1 - o.pow.pow(o.cfg.Beta1, s.step), bc2sqrt: math.Sqrt(1 - o.pow.pow(o.cfg.Beta2, s.step))}
		o.corrStep = s.step
	}
	c := o.corr
	grp := o.groups[p.Group]
	l2 := float32(0)
	if !o.decoupled && grp.WeightDecay != 0 {
		l2 = 1
	}
	o.row = [5]float32{float32(-(grp.LR / c.bc1)), float32(c.bc2sqrt), float32(grp.WeightDecay), float32(1 - grp.LR*grp.WeightDecay), l2}
	return o.row[:]
}

// adamCorr are the bias corrections of one step count.
type adamCorr struct{ bc1, bc2sqrt float64 }

type adamState struct {
	step                    int64
	expAvg, expAvgSq, maxSq *graph.Tensor
}

// NewAdam returns Adam with the L2 penalty added to the gradient
// (torch 1.13 _single_tensor_adam).
func NewAdam(cfg AdamConfig) (Optimizer, error) { return newAdam(cfg, false) }

// NewAdamW returns AdamW: decoupled weight decay, p *= 1 - lr*wd, before
// the Adam update (torch 1.13 _single_tensor_adamw).
func NewAdamW(cfg AdamConfig) (Optimizer, error) { return newAdam(cfg, true) }

func newAdam(cfg AdamConfig, decoupled bool) (*Adam, error) {
	name := "Adam"
	if decoupled {
		name = "AdamW"
	}
	switch {
	case cfg.LR < 0 || math.IsNaN(cfg.LR):
		return nil, fmt.Errorf("optim: %s: invalid learning rate %v", name, cfg.LR)
	case cfg.Eps < 0 || math.IsNaN(cfg.Eps):
		return nil, fmt.Errorf("optim: %s: invalid epsilon %v", name, cfg.Eps)
	case !(cfg.Beta1 >= 0 && cfg.Beta1 < 1):
		return nil, fmt.Errorf("optim: %s: invalid beta1 %v (want 0 <= beta1 < 1)", name, cfg.Beta1)
	case !(cfg.Beta2 >= 0 && cfg.Beta2 < 1):
		return nil, fmt.Errorf("optim: %s: invalid beta2 %v (want 0 <= beta2 < 1)", name, cfg.Beta2)
	case cfg.WeightDecay < 0 || math.IsNaN(cfg.WeightDecay):
		return nil, fmt.Errorf("optim: %s: invalid weight decay %v", name, cfg.WeightDecay)
	}
	groups, err := makeGroups(cfg.LR, cfg.WeightDecay, cfg.Groups)
	if err != nil {
		return nil, err
	}
	return &Adam{cfg: cfg, decoupled: decoupled, lr: cfg.LR, groups: groups, state: map[string]*adamState{}}, nil
}

// Groups returns a copy of the parameter groups.
func (o *Adam) Groups() []Group { return append([]Group(nil), o.groups...) }

// SetLR sets the learning rate of every group (times its LRScale).
func (o *Adam) SetLR(lr float64) { o.lr = lr; setGroupLR(o.groups, lr) }

// LR is the optimizer-wide learning rate.
func (o *Adam) LR() float64 { return o.lr }

// Step applies one Adam or AdamW update.
func (o *Adam) Step(params []*Param) error { return o.StepContext(context.Background(), params) }

// Bind implements Binder.
func (o *Adam) Bind(be backend.Backend, share backend.Executable) {
	o.prog = stepProgram{be: be, share: share}
}

// StepContext implements ContextStepper.
func (o *Adam) StepContext(ctx context.Context, params []*Param) error {
	if o.seen == nil {
		o.seen = make(map[string]bool, len(params))
	}
	if err := checkParams(params, len(o.groups), o.seen); err != nil {
		return err
	}
	for _, p := range params {
		if s := o.state[p.Name]; s != nil && p.Grad != nil {
			if err := checkSlot(p.Name, "exp_avg", s.expAvg, p.Value.Shape); err != nil {
				return err
			}
			if err := checkSlot(p.Name, "exp_avg_sq", s.expAvgSq, p.Value.Shape); err != nil {
				return err
			}
			if err := checkSlot(p.Name, "max_exp_avg_sq", s.maxSq, p.Value.Shape); err != nil {
				return err
			}
		}
	}
	b1, b2 := o.cfg.Beta1, o.cfg.Beta2
	o.names, o.values, o.grads, o.hyper = o.names[:0], o.values[:0], o.grads[:0], o.hyper[:0]
	for k := range o.slotBufs {
		o.slotBufs[k] = o.slotBufs[k][:0]
	}
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		s := o.state[p.Name]
		if s == nil {
			s = &adamState{
				expAvg:   graph.Zeros(graph.Float32, p.Value.Shape...),
				expAvgSq: graph.Zeros(graph.Float32, p.Value.Shape...),
			}
			if o.cfg.AMSGrad {
				s.maxSq = graph.Zeros(graph.Float32, p.Value.Shape...)
			}
			o.state[p.Name] = s
		}
		s.step++
		row := o.hyperRow(p, s)
		o.names = append(o.names, p.Name)
		o.values = append(o.values, p.Value)
		o.grads = append(o.grads, p.Grad)
		o.slotBufs[0] = append(o.slotBufs[0], s.expAvg)
		o.slotBufs[1] = append(o.slotBufs[1], s.expAvgSq)
		if o.cfg.AMSGrad {
			o.slotBufs[2] = append(o.slotBufs[2], s.maxSq)
		}
		o.hyper = append(o.hyper, row...)
	}
	o.slots = append(o.slots[:0], o.slotBufs[0], o.slotBufs[1])
	if o.cfg.AMSGrad {
		o.slots = append(o.slots, o.slotBufs[2])
	}
	if o.attrs == nil {
		o.attrs = []*graph.Attr{graph.IntAttr("amsgrad", b2i(o.cfg.AMSGrad)), graph.IntAttr("maximize", b2i(o.cfg.Maximize)), graph.IntAttr("decoupled", b2i(o.decoupled))}
	}
	consts := [5]float32{float32(b1), float32(b2), float32(1 - b1), float32(1 - b2), float32(o.cfg.Eps)}
	err := o.prog.run(ctx, graph.AdamUpdateOp, o.attrs, [3]bool{o.cfg.AMSGrad}, o.names, o.values, o.grads, o.slots, consts[:], o.hyper)
	if o.prog.rebound {
		for i, name := range o.names {
			s := o.state[name]
			s.expAvg, s.expAvgSq = o.slotBufs[0][i], o.slotBufs[1][i]
			if o.cfg.AMSGrad {
				s.maxSq = o.slotBufs[2][i]
			}
		}
	}
	clear(o.values)
	clear(o.grads)
	for k := range o.slotBufs {
		clear(o.slotBufs[k])
	}
	clear(o.slots)
	if err != nil {
		return err
	}
	o.steps++
	return nil
}

// State returns "step", "lr", and per param "<param>/step" (int64),
// "<param>/exp_avg", "<param>/exp_avg_sq" and, with AMSGrad,
// "<param>/max_exp_avg_sq".
func (o *Adam) State() map[string]*graph.Tensor {
	st := map[string]*graph.Tensor{"step": int64Scalar(o.steps), "lr": float64Scalar(o.lr)}
	for name, s := range o.state {
		st[name+"/step"] = int64Scalar(s.step)
		st[name+"/exp_avg"] = s.expAvg.Clone()
		st[name+"/exp_avg_sq"] = s.expAvgSq.Clone()
		if s.maxSq != nil {
			st[name+"/max_exp_avg_sq"] = s.maxSq.Clone()
		}
	}
	return st
}

// LoadState restores what State returned.
func (o *Adam) LoadState(st map[string]*graph.Tensor) error {
	steps, lr, err := loadCommon(st)
	if err != nil {
		return err
	}
	state := map[string]*adamState{}
	get := func(name string) *adamState {
		s := state[name]
		if s == nil {
			s = &adamState{step: -1}
			state[name] = s
		}
		return s
	}
	for _, k := range sortedKeys(st) {
		if k == "step" || k == "lr" {
			continue
		}
		name, slot, ok := splitKey(k)
		if !ok {
			return fmt.Errorf("optim: Adam: %w: unexpected entry %q", ErrState, k)
		}
		var t *graph.Tensor
		if slot != "step" {
			if t, err = float32State(k, st[k]); err != nil {
				return err
			}
		}
		s := get(name)
		switch slot {
		case "step":
			n, err := scalarState(k, st[k], true)
			if err != nil {
				return err
			}
			s.step = int64(n)
		case "exp_avg":
			s.expAvg = t
		case "exp_avg_sq":
			s.expAvgSq = t
		case "max_exp_avg_sq":
			if !o.cfg.AMSGrad {
				return fmt.Errorf("optim: Adam: %w: %q given but AMSGrad is off", ErrState, k)
			}
			s.maxSq = t
		default:
			return fmt.Errorf("optim: Adam: %w: unexpected entry %q", ErrState, k)
		}
	}
	for _, name := range sortedKeys(state) {
		s := state[name]
		switch {
		case s.step < 0:
			return fmt.Errorf("optim: Adam: %w: %q is missing", ErrState, name+"/step")
		case s.expAvg == nil:
			return fmt.Errorf("optim: Adam: %w: %q is missing", ErrState, name+"/exp_avg")
		case s.expAvgSq == nil:
			return fmt.Errorf("optim: Adam: %w: %q is missing", ErrState, name+"/exp_avg_sq")
		case o.cfg.AMSGrad && s.maxSq == nil:
			return fmt.Errorf("optim: Adam: %w: %q is missing", ErrState, name+"/max_exp_avg_sq")
		case !graph.SameShape(s.expAvg.Shape, s.expAvgSq.Shape):
			return fmt.Errorf("optim: Adam: %w: %s/exp_avg has shape %v but %s/exp_avg_sq has %v", ErrState, name, s.expAvg.Shape, name, s.expAvgSq.Shape)
		case s.maxSq != nil && !graph.SameShape(s.expAvg.Shape, s.maxSq.Shape):
			return fmt.Errorf("optim: Adam: %w: %s/exp_avg has shape %v but %s/max_exp_avg_sq has %v", ErrState, name, s.expAvg.Shape, name, s.maxSq.Shape)
		}
	}
	o.steps, o.state = steps, state
	o.SetLR(lr)
	return nil
}
