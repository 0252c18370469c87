package optim

import (
	"fmt"
	"math"

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

	// Reused by every Step: the updates, their sizes, the step's
	// constants and the callback that runs them.
	tasks  []sgdTask
	sizes  []int
	consts sgdConsts
	runFn  func(i, lo, hi int)
	runner chunkRunner
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
func (o *SGD) Step(params []*Param) error {
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
	tasks, sizes := o.tasks[:0], o.sizes[:0]
	for _, p := range params {
		if p.Grad == nil {
			continue
		}
		grp := o.groups[p.Group]
		t := sgdTask{
			pv: p.Value.Float32s(), gv: p.Grad.Float32s(),
			wd: grp.WeightDecay != 0, wd32: float32(grp.WeightDecay), negLR: float32(-grp.LR),
		}
		if o.cfg.Momentum != 0 {
			b := o.buf[p.Name]
			if b == nil {
				b = graph.Zeros(graph.Float32, p.Value.Shape...)
				o.buf[p.Name] = b
				t.first = true
			}
			t.bv = b.Float32s()
		}
		tasks = append(tasks, t)
		sizes = append(sizes, len(t.pv))
	}
	o.tasks, o.sizes = tasks, sizes
	o.consts = sgdConsts{
		m32: float32(o.cfg.Momentum), damp32: float32(1 - o.cfg.Dampening),
		maximize: o.cfg.Maximize, nesterov: o.cfg.Nesterov,
	}
	if o.runFn == nil {
		o.runFn = func(i, lo, hi int) { o.tasks[i].run(&o.consts, lo, hi) }
	}
	o.runner.forChunks(sizes, o.runFn)
	clear(o.tasks) // drop the slices of parameters and gradients
	o.steps++
	return nil
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
	o.steps, o.buf = steps, buf
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

// sgdTask is one parameter's update: its value, gradient and momentum
// buffer (nil without momentum; first on the step that creates it).
type sgdTask struct {
	pv, gv, bv []float32
	first, wd  bool
	wd32       float32
	negLR      float32
}

// sgdConsts are the optimizer-wide constants of a step.
type sgdConsts struct {
	m32, damp32        float32
	maximize, nesterov bool
}

// run updates elements [lo, hi) of the parameter.
func (t *sgdTask) run(c *sgdConsts, lo, hi int) {
	pv, gv := t.pv[lo:hi], t.gv[lo:hi]
	gv = gv[:len(pv)]
	negLR := t.negLR
	if t.bv == nil && !t.wd && !c.maximize {
		fmaAxpy32(negLR, gv, pv) // plain SGD: param.add_(grad, alpha=-lr)
		return
	}
	var bv []float32
	if t.bv != nil {
		bv = t.bv[lo:hi]
		bv = bv[:len(pv)]
	}
	for i := range pv {
		d := gv[i]
		if c.maximize {
			d = -d
		}
		if t.wd {
			d = fma32(t.wd32, pv[i], d) // d_p.add(param, alpha=wd)
		}
		if bv != nil {
			if t.first {
				bv[i] = d
			} else {
				bv[i] = fma32(c.damp32, d, bv[i]*c.m32) // buf.mul_(m).add_(d_p, alpha=1-dampening)
			}
			if c.nesterov {
				d = fma32(c.m32, bv[i], d) // d_p.add(buf, alpha=m)
			} else {
				d = bv[i]
			}
		}
		pv[i] = fma32(negLR, d, pv[i]) // param.add_(d_p, alpha=-lr)
	}
}
