package graph

// Lowerings of GroupNormalization (opset 18) and of GroupNormalizationGrad,
// the gradient op of GroupNormalization and of InstanceNormalization (one
// group per channel; PyTorch exports nn.GroupNorm as InstanceNormalization
// over a reshaped input). Each row — one group of one sample, perGroup
// channels by the spatial size — is normalised by its own mean and
// variance; scale and bias are per channel, or per group (opset 18's
// num_groups-sized parameters).

func init() {
	registerTyped("GroupNormalization", lowerGroupNorm)
	domainLowerings[InternalDomain+":GroupNormalizationGrad"] = lowerGroupNormGrad
}

// groupNormGeometry reads x's static shape and the groups: num_groups (0
// or absent: one per channel) must divide C; the parameters have C or
// num_groups elements.
func (l *lowering) groupNormGeometry(x, scale string) (xs []int64, groups, per, params int64, err error) {
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 2 {
		return nil, 0, 0, 0, l.unsupported("group normalisation needs x's static shape")
	}
	ss, ok := l.staticShape(scale)
	if !ok {
		return nil, 0, 0, 0, l.unsupported("group normalisation needs scale's static shape")
	}
	c := xs[1]
	groups = l.n.AttrInt("num_groups", 0)
	if groups == 0 {
		groups = c
	}
	if groups <= 0 || c%groups != 0 {
		return nil, 0, 0, 0, l.unsupported("num_groups %d for %d channels", groups, c)
	}
	params = 1
	for _, d := range ss {
		params *= d
	}
	if params != c && params != groups {
		return nil, 0, 0, 0, l.unsupported("scale of %d elements for %d channels in %d groups", params, c, groups)
	}
	per = c / groups
	for _, d := range xs[2:] {
		per *= d
	}
	return xs, groups, per, params, nil
}

// groupStats returns x viewed as rows [N, G, per], its normalised value
// and 1/σ per row.
func (l *lowering) groupStats(x string, xs []int64, groups, per int64) (rows, xhat, inv string, err error) {
	rows = l.reshape(x, xs[0], groups, per)
	cnt := l.scalar(x, float64(per))
	mean := func(v string) (string, error) { return l.meanOver(v, []int64{2}, cnt) }
	mu, err := mean(rows)
	if err != nil {
		return "", "", "", err
	}
	centred := l.sub(rows, mu)
	v, err := mean(l.mul(centred, centred))
	if err != nil {
		return "", "", "", err
	}
	inv = l.div(l.scalar(x, 1), l.op("Sqrt", l.add(v, l.scalar(x, float64(l.n.AttrFloat("epsilon", 1e-5))))))
	return rows, l.mul(centred, inv), inv, nil
}

// perParam multiplies (or adds) v, rows [N, G, per], by a parameter of C
// or G elements.
func (l *lowering) perParam(op, v, p string, xs []int64, groups, per, params int64) string {
	if params == groups && params != xs[1] {
		return l.op(op, v, l.reshape(p, groups, 1))
	}
	spatial := per / (xs[1] / groups)
	out := l.op(op, l.reshape(v, xs[0], xs[1], spatial), l.reshape(p, xs[1], 1))
	return l.reshape(out, xs[0], groups, per)
}

func lowerGroupNorm(l *lowering) error {
	x, scale, bias := l.in(0), l.in(1), l.in(2)
	xs, groups, per, params, err := l.groupNormGeometry(x, scale)
	if err != nil {
		return err
	}
	_, xhat, _, err := l.groupStats(x, xs, groups, per)
	if err != nil {
		return err
	}
	y := l.perParam("Add", l.perParam("Mul", xhat, scale, xs, groups, per, params), bias, xs, groups, per, params)
	l.finish(0, l.reshape(y, xs...))
	return nil
}

// lowerGroupNormGrad: GroupNormalizationGrad(dy, x, scale) → dx, dscale,
// dbias. With g = dy·scale, per row dx = (g - mean(g) - x̂·mean(g·x̂))/σ;
// dscale and dbias sum dy·x̂ and dy per parameter.
func lowerGroupNormGrad(l *lowering) error {
	dy, x, scale := l.in(0), l.in(1), l.in(2)
	if l.dtype(scale) != l.dtype(x) || l.dtype(dy) != l.dtype(x) {
		return l.unsupported("inputs of different dtypes")
	}
	xs, groups, per, params, err := l.groupNormGeometry(x, scale)
	if err != nil {
		return err
	}
	_, xhat, inv, err := l.groupStats(x, xs, groups, per)
	if err != nil {
		return err
	}
	dyr := l.reshape(dy, xs[0], groups, per)
	cnt := l.scalar(x, float64(per))
	mean := func(v string) (string, error) { return l.meanOver(v, []int64{2}, cnt) }
	dx, err := l.normBackward(l.perParam("Mul", dyr, scale, xs, groups, per, params), xhat, inv, mean)
	if err != nil {
		return err
	}
	l.finish(0, l.reshape(dx, xs...))
	// Sums per parameter: over N and the spatial size for per-channel
	// parameters, over N and the row for per-group ones.
	sum := func(v string) (string, error) {
		if params == groups && params != xs[1] {
			return l.reduce("ReduceSum", v, reduceAxes{list: []int64{0, 2}}, false)
		}
		spatial := per / (xs[1] / groups)
		return l.reduce("ReduceSum", l.reshape(v, xs[0], xs[1], spatial), reduceAxes{list: []int64{0, 2}}, false)
	}
	ss, _ := l.staticShape(scale)
	if len(l.n.Outputs) > 1 && l.n.Outputs[1] != "" {
		ds, err := sum(l.mul(dyr, xhat))
		if err != nil {
			return err
		}
		l.finish(1, l.reshape(ds, ss...))
	}
	if len(l.n.Outputs) > 2 && l.n.Outputs[2] != "" {
		db, err := sum(dyr)
		if err != nil {
			return err
		}
		l.finish(2, l.reshape(db, ss...))
	}
	return nil
}
