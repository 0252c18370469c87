package optimizer

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// sgdConsts are SGDUpdate's step-wide constants.
type sgdConsts struct {
	m32, damp32                  float32
	maximize, nesterov, momentum bool
}

// sgdUpdate is graph.SGDUpdateOp (torch 1.13 _single_tensor_sgd).
func sgdUpdate(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	return runUpdate(ctx, n, in, (*nodeState).sgdSetup, sgdRun)
}

// runUpdate is an update kernel: the operands prepared, every output its
// input when the step is skipped, else setup's constants read and run
// called on the tensors' chunks.
func runUpdate(ctx *kern.Context, n *graph.Node, in []*graph.Tensor,
	setup func(*nodeState, *graph.Node, []*graph.Tensor) error, run func(st *nodeState, i, lo, hi int)) ([]*graph.Tensor, error) {
	st := kern.State[nodeState](n)
	defer st.dropOperands()
	if err := prepare(ctx, n, in, st); err != nil {
		return nil, err
	}
	if skip, err := skipped(n, in); err != nil || skip {
		if err != nil {
			return nil, err
		}
		return kern.Results(n, st.outs...), nil // every output its input (copied if not in place)
	}
	if err := setup(st, n, in); err != nil {
		return nil, err
	}
	if st.fn == nil {
		st.fn = func(i, lo, hi int) { run(st, i, lo, hi) } // made once: a step allocates nothing
	}
	st.runner.forChunks(st.sizes[:st.n], st.fn)
	st.hyper = nil
	return kern.Results(n, st.outs...), nil
}

// sgdSetup reads an SGD update's consts and hyper rows (inputs 0 and 1)
// and attributes into st.
func (st *nodeState) sgdSetup(n *graph.Node, in []*graph.Tensor) error {
	c := in[0]
	if c == nil || c.DType != graph.Float32 || len(c.Float32s()) != 2 {
		return n.Errorf("input 0 (consts) must be float32 [2]: momentum, 1-dampening")
	}
	h, err := hyperRows(n, in[1], st.n, 3)
	if err != nil {
		return err
	}
	st.hyper = h
	st.sgd = sgdConsts{
		m32: c.Float32s()[0], damp32: c.Float32s()[1],
		maximize: n.AttrInt("maximize", 0) == 1, nesterov: n.AttrInt("nesterov", 0) == 1,
		momentum: n.AttrInt("momentum", 0) == 1,
	}
	return nil
}

// sgdRun updates elements [lo, hi) of tensor i.
func sgdRun(st *nodeState, i, lo, hi int) {
	nt := st.n
	var bv []float32
	if st.sgd.momentum {
		bv = st.ops[2*nt+i][lo:hi]
	}
	sgdSlices(st, i, st.ops[i][lo:hi], st.ops[nt+i][lo:hi], bv)
}

// sgdSlices updates the elements of pv (and of the momentum buffer bv
// with momentum) of tensor i from the gradient gv (at least as long).
func sgdSlices(st *nodeState, i int, pv, gv, bv []float32) {
	c := &st.sgd
	gv = gv[:len(pv)]
	row := st.hyper[3*i : 3*i+3]
	negLR, wd32, first := row[0], row[1], row[2] != 0
	wd := wd32 != 0
	if !c.momentum && !wd && !c.maximize {
		fmaAxpy32(negLR, gv, pv) // plain SGD: param.add_(grad, alpha=-lr)
		return
	}
	if c.momentum {
		bv = bv[:len(pv)]
		if !noVector {
			// Eight lanes at a time where the CPU can (fma_amd64.go),
			// with the same roundings; the Go loop does the tail.
			vec := sgdVec{m: c.m32, damp: c.damp32, negLR: negLR, wd: wd32}
			mode := 0
			if c.maximize {
				mode |= 1
			}
			if wd {
				mode |= 2
			}
			if first {
				mode |= 4
			}
			if c.nesterov {
				mode |= 8
			}
			done := sgdVector(pv, gv, bv, &vec, mode)
			pv, gv, bv = pv[done:], gv[done:], bv[done:]
		}
	}
	for i := range pv {
		d := gv[i]
		if c.maximize {
			d = -d
		}
		if wd {
			d = fma32(wd32, pv[i], d) // d_p.add(param, alpha=wd)
		}
		if bv != nil {
			if first {
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

// adamConsts are AdamUpdate's step-wide constants.
type adamConsts struct {
	b1f, b2f, omb1, omb2, eps    float32
	maximize, decoupled, amsgrad bool
}

// noVector turns the vector kernels off (tests compare them with the Go
// loops).
var noVector bool

// adamUpdate is graph.AdamUpdateOp (torch 1.13 _single_tensor_adam and
// _single_tensor_adamw).
func adamUpdate(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	return runUpdate(ctx, n, in, (*nodeState).adamSetup, adamRun)
}

// adamSetup reads an Adam update's consts and hyper rows (inputs 0 and 1)
// and attributes into st.
func (st *nodeState) adamSetup(n *graph.Node, in []*graph.Tensor) error {
	c := in[0]
	if c == nil || c.DType != graph.Float32 || len(c.Float32s()) != 5 {
		return n.Errorf("input 0 (consts) must be float32 [5]: beta1, beta2, 1-beta1, 1-beta2, eps")
	}
	h, err := hyperRows(n, in[1], st.n, 5)
	if err != nil {
		return err
	}
	st.hyper = h
	cv := c.Float32s()
	st.adam = adamConsts{
		b1f: cv[0], b2f: cv[1], omb1: cv[2], omb2: cv[3], eps: cv[4],
		maximize: n.AttrInt("maximize", 0) == 1, decoupled: n.AttrInt("decoupled", 0) == 1,
		amsgrad: n.AttrInt("amsgrad", 0) == 1,
	}
	return nil
}

// adamRun updates elements [lo, hi) of tensor i.
func adamRun(st *nodeState, i, lo, hi int) {
	nt := st.n
	var mx []float32
	if st.adam.amsgrad {
		mx = st.ops[4*nt+i][lo:hi]
	}
	adamSlices(st, i, st.ops[i][lo:hi], st.ops[nt+i][lo:hi], st.ops[2*nt+i][lo:hi], st.ops[3*nt+i][lo:hi], mx)
}

// adamSlices updates the elements of pv and of the moments m, v (and the
// running maximum mx with amsgrad) of tensor i from the gradient gv (each
// at least as long as pv).
func adamSlices(st *nodeState, i int, pv, gv, m, v, mx []float32) {
	c := &st.adam
	gv, m, v = gv[:len(pv)], m[:len(pv)], v[:len(pv)]
	if mx != nil {
		mx = mx[:len(pv)]
	}
	row := st.hyper[5*i : 5*i+5]
	negStep, bc2, wd, decay, l2 := row[0], row[1], row[2], row[3], row[4] != 0
	if mx == nil && !noVector {
		// Eight lanes at a time where the CPU can (fma_amd64.go), with
		// the same roundings; the Go loop does the tail.
		vec := adamVec{b1: c.b1f, b2: c.b2f, omb1: c.omb1, omb2: c.omb2, eps: c.eps, negStep: negStep, bc2: bc2, decay: decay, wd: wd}
		mode := 0
		if c.maximize {
			mode |= 1
		}
		if c.decoupled {
			mode |= 2
		} else if l2 {
			mode |= 4
		}
		done := adamVector(pv, gv, m, v, &vec, mode)
		pv, gv, m, v = pv[done:], gv[done:], m[done:], v[done:]
	}
	for i := range pv {
		g := gv[i]
		if c.maximize {
			g = -g
		}
		if c.decoupled {
			pv[i] *= decay // param.mul_(1 - lr*wd)
		} else if l2 {
			g = fma32(wd, pv[i], g) // grad.add(param, alpha=wd)
		}
		m[i] = fma32(c.omb1, g, m[i]*c.b1f)   // exp_avg.mul_(b1).add_(grad, alpha=1-b1)
		v[i] = fma32(c.omb2*g, g, v[i]*c.b2f) // exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2)
		vv := v[i]
		if mx != nil {
			// torch.maximum, which propagates NaN.
			if vv > mx[i] || vv != vv {
				mx[i] = vv
			}
			vv = mx[i]
		}
		denom := sqrt32(vv)/bc2 + c.eps // (v.sqrt() / bc2_sqrt).add_(eps)
		pv[i] += negStep * m[i] / denom // param.addcdiv_(exp_avg, denom, value=-step_size)
	}
}

// skipped reads a gated update's skip input (input 2): true leaves every
// tensor as it is (graph.SGDUpdateOp's "gated" attribute).
func skipped(n *graph.Node, in []*graph.Tensor) (bool, error) {
	if n.AttrInt("gated", 0) != 1 {
		return false, nil
	}
	if len(in) < 3 || in[2] == nil || in[2].DType != graph.Bool || in[2].Size() != 1 {
		return false, n.Errorf("input 2 (skip) of a gated update must be a bool scalar")
	}
	return in[2].Data.([]bool)[0], nil
}
