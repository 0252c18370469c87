package graph

// Lowerings of the gradient ops autodiff emits (domain onnxtrain) into the
// primitive set. Most need static shapes: on a graph with symbolic dims
// they refuse, and a backend either keeps its kernel for the general plan
// or lowers them again once Specialize has made every shape known.

// domainLowerings holds the lowerings of ops outside ai.onnx, by
// "domain:op".
var domainLowerings = map[string]loweringFunc{}

func init() {
	domainLowerings[InternalDomain+":SumToShape"] = lowerSumToShape
	domainLowerings[InternalDomain+":UnreduceTo"] = lowerUnreduceTo
	domainLowerings[InternalDomain+":MatMulGradA"] = lowerMatMulGrad(0)
	domainLowerings[InternalDomain+":MatMulGradB"] = lowerMatMulGrad(1)
	domainLowerings[InternalDomain+":SoftmaxGrad"] = lowerSoftmaxGrad(false)
	domainLowerings[InternalDomain+":LogSoftmaxGrad"] = lowerSoftmaxGrad(true)
}

// HasDomainLowering reports whether op of a domain other than ai.onnx has
// a lowering to primitives.
func HasDomainLowering(domain, op string) bool {
	_, ok := domainLowerings[domain+":"+op]
	return ok
}

// lowerSumToShape sums g over the axes broadcasting expanded to reach the
// shape of like, then reshapes to it.
func lowerSumToShape(l *lowering) error {
	g, like := l.in(0), l.in(1)
	gs, ok1 := l.staticShape(g)
	ts, ok2 := l.staticShape(like)
	if !ok1 || !ok2 {
		return l.unsupported("SumToShape needs static shapes")
	}
	if len(ts) > len(gs) {
		return l.unsupported("cannot sum %v down to %v", gs, ts)
	}
	off := len(gs) - len(ts)
	var axes []int64
	for i := range gs {
		if i < off {
			axes = append(axes, int64(i))
			continue
		}
		switch t := ts[i-off]; {
		case t == gs[i]:
		case t == 1:
			axes = append(axes, int64(i))
		default:
			return l.unsupported("cannot sum %v down to %v", gs, ts)
		}
	}
	if len(axes) == 0 {
		l.finish(0, l.op("Identity", g))
		return nil
	}
	y, err := l.reduce("ReduceSum", g, reduceAxes{list: axes}, true)
	if err != nil {
		return err
	}
	l.finish(0, l.reshape(y, append([]int64{}, ts...)...))
	return nil
}

// lowerUnreduceTo reinserts the reduced axes (keepdims=0) and broadcasts v
// to x's shape.
func lowerUnreduceTo(l *lowering) error {
	v, x := l.in(0), l.in(1)
	var axes []int64
	if a := l.in(2); a != "" {
		t := l.constant(a)
		if t == nil {
			return l.unsupported("axes computed at run time")
		}
		for i := 0; i < t.Size(); i++ {
			axes = append(axes, t.Int(i))
		}
	} else {
		axes = l.n.AttrInts("axes", nil)
	}
	if len(axes) == 0 && l.n.AttrInt("noop_with_empty_axes", 0) == 1 {
		l.finish(0, l.op("Identity", v))
		return nil
	}
	if l.n.AttrInt("keepdims", 1) == 0 {
		xs, ok := l.staticShape(x)
		if !ok {
			return l.unsupported("UnreduceTo with keepdims=0 needs x's static shape")
		}
		reduced := make([]bool, len(xs))
		for _, a := range axes {
			if a < 0 {
				a += int64(len(xs))
			}
			if a < 0 || a >= int64(len(xs)) {
				return l.unsupported("axis out of range")
			}
			reduced[a] = true
		}
		target := make([]int64, len(xs))
		for i := range xs {
			target[i] = xs[i]
			if len(axes) == 0 || reduced[i] {
				target[i] = 1
			}
		}
		v = l.reshape(v, target...)
	}
	l.finish(0, l.op("Expand", v, l.op("Shape", x)))
	return nil
}

// swapLast transposes the last two axes of a value of static rank r >= 2.
func (l *lowering) swapLast(v string, r int) string {
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(i)
	}
	perm[r-1], perm[r-2] = perm[r-2], perm[r-1]
	return l.opAttrs("Transpose", []string{v}, IntsAttr("perm", perm...))
}

// lowerMatMulGrad is dY·Bᵀ (which=0) or Aᵀ·dY (which=1), summed to the
// operand's shape; operands of rank 2 or more.
func lowerMatMulGrad(which int) loweringFunc {
	return func(l *lowering) error {
		dy, a, b := l.in(0), l.in(1), l.in(2)
		ra, rb := l.rank(a), l.rank(b)
		if ra < 2 || rb < 2 {
			return l.unsupported("MatMul gradient of a 1-D or unknown-rank operand")
		}
		var g, like string
		if which == 0 {
			g, like = l.op("MatMul", dy, l.swapLast(b, rb)), a
		} else {
			g, like = l.op("MatMul", l.swapLast(a, ra), dy), b
		}
		l.b.OpTo("SumToShape", []string{g, like}, []string{l.n.Outputs[0]})
		l.b.Nodes[len(l.b.Nodes)-1].Domain = InternalDomain
		return nil
	}
}

// lowerSoftmaxGrad: softmax y*(dy - sum(dy*y)); log-softmax dy -
// exp(y)*sum(dy), the sums along axis (coerce: the 2-D view of opset < 13,
// lowered only where axis is the last one).
func lowerSoftmaxGrad(logOf bool) loweringFunc {
	return func(l *lowering) error {
		dy, y := l.in(0), l.in(1)
		axis := l.n.AttrInt("axis", -1)
		if l.n.AttrInt("coerce", 0) != 0 {
			r := l.rank(y)
			if r < 0 {
				return l.unsupported("coerced softmax gradient of unknown rank")
			}
			if axis < 0 {
				axis += int64(r)
			}
			if axis != int64(r-1) {
				return l.unsupported("coerced softmax gradient over several axes")
			}
		}
		ax := reduceAxes{list: []int64{axis}}
		if logOf {
			s, err := l.reduce("ReduceSum", dy, ax, true)
			if err != nil {
				return err
			}
			l.finish(0, l.sub(dy, l.mul(l.op("Exp", y), s)))
			return nil
		}
		s, err := l.reduce("ReduceSum", l.mul(dy, y), ax, true)
		if err != nil {
			return err
		}
		l.finish(0, l.mul(y, l.sub(dy, s)))
		return nil
	}
}
