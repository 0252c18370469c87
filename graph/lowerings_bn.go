package graph

// BatchNormalization in training mode and its gradient, in primitives.
// They need x's static shape (the per-channel element count); parameters
// must have x's dtype (mixed-precision graphs keep the kernels).

func init() {
	trainingBatchNorm = lowerBatchNormTraining
	domainLowerings[InternalDomain+":BatchNormalizationGrad"] = lowerBatchNormGrad
}

// bnShape checks x's static shape (rank >= 2) and that every parameter has
// x's dtype; it returns the shape, the reduction axes (all but 1) and the
// element count per channel.
func (l *lowering) bnShape(x string, params ...string) ([]int64, []int64, int64, error) {
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 2 {
		return nil, nil, 0, l.unsupported("BatchNormalization needs x's static shape, rank 2 or more")
	}
	for _, p := range params {
		if p != "" && l.dtype(p) != l.dtype(x) {
			return nil, nil, 0, l.unsupported("parameters of another dtype than x")
		}
	}
	axes := []int64{0}
	m := xs[0]
	for i := 2; i < len(xs); i++ {
		axes = append(axes, int64(i))
		m *= xs[i]
	}
	return xs, axes, m, nil
}

// perChannel reshapes a [C] parameter to [C, 1, ..., 1] for rank r.
func (l *lowering) perChannel(p string, r int) string {
	if r == 2 {
		return p
	}
	t := []int64{-1}
	for i := 2; i < r; i++ {
		t = append(t, 1)
	}
	return l.reshape(p, t...)
}

// lowerBatchNormTraining normalises with the batch statistics (population
// variance) and updates the running ones as the CPU kernel does:
// mean·momentum + batch·(1 - momentum), the batch variance scaled by
// m/(m-1) under the onnxtrain_unbiased_var attribute.
func lowerBatchNormTraining(l *lowering) error {
	if l.opset() > 0 && l.opset() < 14 {
		return l.unsupported("training-mode BatchNormalization before opset 14")
	}
	x, scale, bias, mean, variance := l.in(0), l.in(1), l.in(2), l.in(3), l.in(4)
	xs, axes, m, err := l.bnShape(x, scale, bias, mean, variance)
	if err != nil {
		return err
	}
	r := len(xs)
	eps := float64(l.n.AttrFloat("epsilon", 1e-5))
	momentum := float64(l.n.AttrFloat("momentum", 0.9))
	ax := reduceAxes{list: axes}
	bm, err := l.reduce("ReduceSum", x, ax, true)
	if err != nil {
		return err
	}
	bm = l.div(bm, l.scalar(x, float64(m)))
	centred := l.sub(x, bm)
	bv, err := l.reduce("ReduceSum", l.mul(centred, centred), ax, true)
	if err != nil {
		return err
	}
	bv = l.div(bv, l.scalar(x, float64(m)))
	inv := l.div(l.scalar(x, 1), l.op("Sqrt", l.add(bv, l.scalar(x, eps))))
	y := l.add(l.mul(l.mul(centred, inv), l.perChannel(scale, r)), l.perChannel(bias, r))
	l.finish(0, y)
	flat := func(v string) string { return l.reshape(v, xs[1]) }
	mom, rest := l.scalar(x, momentum), l.scalar(x, 1-momentum)
	l.finish(1, l.add(l.mul(mean, mom), l.mul(flat(bm), rest)))
	correction := 1.0
	if l.n.AttrInt(UnbiasedVarAttr, 0) == 1 && m > 1 {
		correction = float64(m) / float64(m-1)
	}
	bvr := flat(bv)
	if correction != 1 {
		bvr = l.mul(bvr, l.scalar(x, correction))
	}
	l.finish(2, l.add(l.mul(variance, mom), l.mul(bvr, rest)))
	return nil
}

// lowerBatchNormGrad: in training mode (batch statistics recomputed from
// x) dx = scale/σ · (dy - Σdy/m - x̂·Σ(dy·x̂)/m), dscale = Σ dy·x̂, dbias =
// Σ dy; in inference mode the affine map's exact gradients, mean and var
// included.
func lowerBatchNormGrad(l *lowering) error {
	dy, x, scale, mean, variance := l.in(0), l.in(1), l.in(2), l.in(3), l.in(4)
	xs, axes, m, err := l.bnShape(x, dy, scale, mean, variance)
	if err != nil {
		return err
	}
	if s, ok := l.staticShape(scale); !ok || len(s) != 1 {
		return l.unsupported("BatchNormalizationGrad with a scale that is not [C]")
	}
	r := len(xs)
	eps := l.scalar(x, float64(l.n.AttrFloat("epsilon", 1e-5)))
	ax := reduceAxes{list: axes}
	sum := func(v string) (string, error) { return l.reduce("ReduceSum", v, ax, false) }
	sc := l.perChannel(scale, r)
	if l.n.AttrInt("training_mode", 0) != 0 {
		bm, err := l.reduce("ReduceSum", x, ax, true)
		if err != nil {
			return err
		}
		bm = l.div(bm, l.scalar(x, float64(m)))
		centred := l.sub(x, bm)
		bv, err := l.reduce("ReduceSum", l.mul(centred, centred), ax, true)
		if err != nil {
			return err
		}
		bv = l.div(bv, l.scalar(x, float64(m)))
		inv := l.div(l.scalar(x, 1), l.op("Sqrt", l.add(bv, eps)))
		xhat := l.mul(centred, inv)
		dbias, err := l.reduce("ReduceSum", dy, ax, true)
		if err != nil {
			return err
		}
		dscale, err := l.reduce("ReduceSum", l.mul(dy, xhat), ax, true)
		if err != nil {
			return err
		}
		mm := l.scalar(x, float64(m))
		inner := l.sub(l.sub(dy, l.div(dbias, mm)), l.mul(xhat, l.div(dscale, mm)))
		l.finish(0, l.mul(l.mul(sc, inv), inner))
		l.finish(1, l.reshape(dscale, xs[1]))
		l.finish(2, l.reshape(dbias, xs[1]))
		return nil
	}
	inv := l.div(l.scalar(x, 1), l.op("Sqrt", l.add(variance, eps)))
	g := l.mul(l.perChannel(inv, r), sc) // scale/σ per channel
	l.finish(0, l.mul(dy, g))
	centred := l.sub(x, l.perChannel(mean, r))
	ds, err := sum(l.mul(dy, centred))
	if err != nil {
		return err
	}
	l.finish(1, l.mul(ds, inv))
	db, err := sum(dy)
	if err != nil {
		return err
	}
	if countNamed(l.n.Outputs) > 3 {
		gs := l.reshape(g, xs[1])
		// dmean = -Σdy·scale/σ; dvar = -1/2·Σ dy·(x-mean)·scale·σ⁻³.
		l.finish(3, l.mul(db, l.negLike(gs, x)))
		k := l.mul(l.mul(scale, l.mul(inv, l.mul(inv, inv))), l.scalar(x, -0.5))
		l.finish(4, l.mul(ds, k))
	}
	l.finish(2, l.op("Identity", db))
	return nil
}

func init() {
	domainLowerings[InternalDomain+":LayerNormalizationGrad"] = lowerLayerNormGrad
	internalInferRules["LayerNormalizationGrad"] = func(c *inferCall) error {
		dt := c.dtype(0)
		if dt == Undefined {
			dt = c.dtype(1)
		}
		s, ok := c.shape(1)
		if dt == Undefined {
			return nil
		}
		c.setShapeOrUnranked(0, dt, s, ok)
		if !ok {
			c.setUnranked(1, dt)
			c.setUnranked(2, dt)
			return nil
		}
		axis := int(c.n.AttrInt("axis", -1))
		if axis < 0 {
			axis += len(s)
		}
		if axis < 0 || axis > len(s) {
			return nil
		}
		c.setOut(1, dt, append([]Dim{}, s[axis:]...))
		c.setOut(2, dt, append([]Dim{}, s[axis:]...))
		return nil
	}
}

// lowerLayerNormGrad, over the normalised axes (from axis on) with x̂ =
// (x - μ)/σ and g = dy·scale: dx = (g - mean(g) - x̂·mean(g·x̂))/σ; dscale
// and dbias sum dy·x̂ and dy over the leading axes (shape x[axis:]).
func lowerLayerNormGrad(l *lowering) error {
	dy, x, scale := l.in(0), l.in(1), l.in(2)
	xs, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("LayerNormalizationGrad needs x's static shape")
	}
	if l.dtype(scale) != l.dtype(x) || l.dtype(dy) != l.dtype(x) {
		return l.unsupported("inputs of different dtypes")
	}
	r := int64(len(xs))
	axis := l.n.AttrInt("axis", -1)
	if axis < 0 {
		axis += r
	}
	if axis < 0 || axis >= r {
		return l.unsupported("axis out of range")
	}
	var norm, lead []int64
	n := int64(1)
	for i := int64(0); i < r; i++ {
		if i >= axis {
			norm = append(norm, i)
			n *= xs[i]
		} else {
			lead = append(lead, i)
		}
	}
	eps := l.scalar(x, float64(l.n.AttrFloat("epsilon", 1e-5)))
	cnt := l.scalar(x, float64(n))
	mean := func(v string) (string, error) { return l.meanOver(v, norm, cnt) }
	mu, err := mean(x)
	if err != nil {
		return err
	}
	centred := l.sub(x, mu)
	v, err := mean(l.mul(centred, centred))
	if err != nil {
		return err
	}
	inv := l.div(l.scalar(x, 1), l.op("Sqrt", l.add(v, eps)))
	xhat := l.mul(centred, inv)
	dx, err := l.normBackward(l.mul(dy, scale), xhat, inv, mean)
	if err != nil {
		return err
	}
	sumLead := func(v string) (string, error) {
		if len(lead) == 0 {
			return l.op("Identity", v), nil
		}
		return l.reduce("ReduceSum", v, reduceAxes{list: lead}, false)
	}
	ds, err := sumLead(l.mul(dy, xhat))
	if err != nil {
		return err
	}
	db, err := sumLead(dy)
	if err != nil {
		return err
	}
	l.finish(0, dx)
	l.finish(1, ds)
	l.finish(2, db)
	return nil
}

// meanOver is the sum of v over axes (kept) divided by count, the order in
// which the normalisations' kernels compute their means.
func (l *lowering) meanOver(v string, axes []int64, count string) (string, error) {
	s, err := l.reduce("ReduceSum", v, reduceAxes{list: axes}, true)
	if err != nil {
		return "", err
	}
	return l.div(s, count), nil
}

// normBackward is a normalisation's input gradient from g = dy·scale, the
// normalised input x̂ and 1/σ: (g - mean(g) - x̂·mean(g·x̂))/σ, with mean
// over the normalised axes.
func (l *lowering) normBackward(g, xhat, inv string, mean func(string) (string, error)) (string, error) {
	mg, err := mean(g)
	if err != nil {
		return "", err
	}
	mgx, err := mean(l.mul(g, xhat))
	if err != nil {
		return "", err
	}
	return l.mul(l.sub(l.sub(g, mg), l.mul(xhat, mgx)), inv), nil
}
