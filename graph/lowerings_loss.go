package graph

// The classification losses in primitives. They need the scores' static
// shape; the target's values pick the terms, so the shapes stay static.

func init() {
	registerTyped("NegativeLogLikelihoodLoss", lowerNLLLoss)
	registerTyped("SoftmaxCrossEntropyLoss", lowerSCELoss)
}

// lossTargets returns the targets t as int64 class indices (ignored ones
// replaced by 0, so that they index safely) and the per-element weight: w
// at the target class, 0 where ignore_index matches; "" when every
// weight is 1.
func (l *lowering) lossTargets(t, w string, d DType) (ti, wt string) {
	ti = l.cast(t, Int64)
	var valid string
	if a := l.n.Attr("ignore_index"); a != nil {
		ign := l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{a.I}})
		valid = l.op("Equal", l.op("Equal", ti, ign), l.boolConst(false))
		ti = l.op("Where", valid, ti, l.scalarOf(Int64, 0))
	}
	if w != "" {
		wt = l.op("Gather", w, ti)
	}
	if valid != "" {
		if wt == "" {
			wt = l.op("Where", valid, l.scalarOf(d, 1), l.scalarOf(d, 0))
		} else {
			wt = l.op("Where", valid, wt, l.scalarOf(d, 0))
		}
	}
	return ti, wt
}

// nllLoss emits the NegativeLogLikelihoodLoss of log-probabilities lp
// (static shape [N, C, d...]) for target t, optional weight w, with the
// node's reduction and ignore_index, and returns the loss value.
func (l *lowering) nllLoss(lp, t, w string, xs []int64) (string, error) {
	if len(xs) < 2 {
		return "", l.unsupported("scores of rank %d (want N, C, ...)", len(xs))
	}
	d := l.dtypeOr(lp)
	ti, wt := l.lossTargets(t, w, d)
	// [N, 1, d...] indices for GatherElements along the class axis.
	view := append([]int64{xs[0], 1}, xs[2:]...)
	picked := l.opAttrs("GatherElements", []string{lp, l.reshape(ti, view...)}, IntAttr("axis", 1))
	tshape := append([]int64{xs[0]}, xs[2:]...)
	loss := l.mul(l.reshape(picked, tshape...), l.scalarOf(d, -1))
	if wt != "" {
		loss = l.mul(loss, wt)
	}
	switch red := l.n.AttrString("reduction", "mean"); red {
	case "none":
		return loss, nil
	case "sum":
		return l.reduce("ReduceSum", loss, reduceAxes{}, false)
	case "mean":
		s, err := l.reduce("ReduceSum", loss, reduceAxes{}, false)
		if err != nil {
			return "", err
		}
		if wt == "" {
			n := int64(1)
			for _, v := range tshape {
				n *= v
			}
			return l.div(s, l.scalarOf(d, float64(n))), nil
		}
		den, err := l.reduce("ReduceSum", wt, reduceAxes{}, false)
		if err != nil {
			return "", err
		}
		return l.div(s, den), nil
	default:
		return "", l.unsupported("reduction %q", red)
	}
}

func lowerNLLLoss(l *lowering) error {
	xs, ok := l.staticShape(l.in(0))
	if !ok {
		return l.unsupported("NegativeLogLikelihoodLoss needs the input's static shape")
	}
	loss, err := l.nllLoss(l.in(0), l.in(1), l.in(2), xs)
	if err != nil {
		return err
	}
	l.finish(0, loss)
	return nil
}

// lowerSCELoss is the NLL loss of LogSoftmax(scores) along the class axis;
// the optional second output is that log-probability.
func lowerSCELoss(l *lowering) error {
	x := l.in(0)
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 2 {
		return l.unsupported("SoftmaxCrossEntropyLoss needs the scores' static shape")
	}
	ax := reduceAxes{list: []int64{1}}
	m, err := l.reduce("ReduceMax", x, ax, true)
	if err != nil {
		return err
	}
	shifted := l.sub(x, m)
	s, err := l.reduce("ReduceSum", l.op("Exp", shifted), ax, true)
	if err != nil {
		return err
	}
	lp := l.sub(shifted, l.op("Log", s))
	loss, err := l.nllLoss(lp, l.in(1), l.in(2), xs)
	if err != nil {
		return err
	}
	l.finish(0, loss)
	l.finish(1, lp)
	return nil
}

func init() {
	domainLowerings[InternalDomain+":SoftmaxCrossEntropyLossGrad"] = lowerSCELossGrad
}

// lowerSCELossGrad differentiates SoftmaxCrossEntropyLoss(x, t[, w]) from
// the gradients of its loss (dy) and log-probability (dlogp) outputs: the
// loss puts -w_t·dy' at each target class (dy' = dy, or dy/Σw for mean),
// and log-softmax's backward gives dx = g - softmax(x)·Σ_c g.
func lowerSCELossGrad(l *lowering) error {
	dy, x, t, w, dlogp := l.in(0), l.in(1), l.in(2), l.in(3), l.in(4)
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 2 {
		return l.unsupported("SoftmaxCrossEntropyLossGrad needs the scores' static shape")
	}
	d := l.dtypeOr(x)
	var g string
	if dy != "" {
		var err error
		if g, err = l.nllGrad(dy, t, w, xs, d); err != nil {
			return err
		}
	}
	switch {
	case g == "" && dlogp == "":
		return l.unsupported("SoftmaxCrossEntropyLossGrad without gradients")
	case g == "":
		g = dlogp
	case dlogp != "":
		g = l.add(g, dlogp)
	}
	ax := reduceAxes{list: []int64{1}}
	m, err := l.reduce("ReduceMax", x, ax, true)
	if err != nil {
		return err
	}
	e := l.op("Exp", l.sub(x, m))
	s, err := l.reduce("ReduceSum", e, ax, true)
	if err != nil {
		return err
	}
	gs, err := l.reduce("ReduceSum", g, ax, true)
	if err != nil {
		return err
	}
	l.finish(0, l.sub(g, l.mul(l.div(e, s), gs)))
	return nil
}

// nllGrad is the gradient of NegativeLogLikelihoodLoss(lp, t[, w]) with
// respect to lp, of shape xs (N, C, d...), from the loss's gradient dy:
// -w_t·dy' at each target class (dy' = dy, or dy/Σw for mean; ignored
// targets get nothing), zero elsewhere.
func (l *lowering) nllGrad(dy, t, w string, xs []int64, d DType) (string, error) {
	r := len(xs)
	view := append([]int64{xs[0], 1}, xs[2:]...)
	ti, wt := l.lossTargets(t, w, d)
	coef := dy
	if l.n.AttrString("reduction", "mean") == "mean" {
		var den string
		if wt == "" {
			n := int64(1)
			for i, v := range xs {
				if i != 1 {
					n *= v
				}
			}
			den = l.scalarOf(d, float64(n))
		} else {
			var err error
			if den, err = l.reduce("ReduceSum", wt, reduceAxes{}, false); err != nil {
				return "", err
			}
		}
		coef = l.div(coef, den)
	}
	coef = l.mul(coef, l.scalarOf(d, -1))
	if wt != "" {
		coef = l.mul(coef, wt)
	}
	// coef broadcasts to the target's shape [N, d...] (scalar for sum
	// and mean); viewed as [N, 1, d...] it lands on the target class.
	tshape := append([]int64{xs[0]}, xs[2:]...)
	coef = l.reshape(l.op("Expand", coef, l.int64s(tshape...)), view...)
	hit := l.op("Equal", l.reshape(ti, view...), l.iotaAlong(xs[1], 1, r))
	return l.op("Where", hit, coef, l.scalarOf(d, 0)), nil
}

func init() {
	domainLowerings[InternalDomain+":NegativeLogLikelihoodLossGrad"] = lowerNLLLossGrad
	domainLowerings[InternalDomain+":GlobalMaxPoolGrad"] = lowerGlobalMaxPoolGrad
}

// lowerNLLLossGrad: NegativeLogLikelihoodLossGrad(dy, Shape(input),
// target[, weight]).
func lowerNLLLossGrad(l *lowering) error {
	xs, ok := l.int64Values(l.in(1))
	if !ok {
		if xs, ok = l.staticShape(l.n.Outputs[0]); !ok {
			return l.unsupported("NegativeLogLikelihoodLossGrad needs the input's shape")
		}
	}
	if len(xs) < 2 {
		return l.unsupported("NegativeLogLikelihoodLossGrad of an input of shape %v", xs)
	}
	g, err := l.nllGrad(l.in(0), l.in(2), l.in(3), xs, l.dtypeOr(l.in(0)))
	if err != nil {
		return err
	}
	l.finish(0, g)
	return nil
}

// lowerGlobalMaxPoolGrad: GlobalMaxPoolGrad(dy, X) puts each plane's
// gradient on the plane's first maximum (PyTorch's max pool backward).
func lowerGlobalMaxPoolGrad(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 3 {
		return l.unsupported("GlobalMaxPoolGrad needs a static input shape")
	}
	size := int64(1)
	for _, v := range xs[2:] {
		size *= v
	}
	flat := l.reshape(x, xs[0], xs[1], size)
	at := l.opAttrs("ArgMax", []string{flat}, IntAttr("axis", 2), IntAttr("keepdims", 1))
	z := l.zerosOf(l.dtypeOr(dy), []int64{xs[0], xs[1], size})
	y := l.scatterAdd(z, at, l.reshape(dy, xs[0], xs[1], 1), 2)
	l.finish(0, l.reshape(y, xs...))
	return nil
}
