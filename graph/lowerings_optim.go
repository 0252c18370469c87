package graph

// Lowerings of the ai.onnx.preview.training optimizers Adagrad, Adam and
// Momentum into elementwise primitives, with the CPU kernels' arithmetic
// (backend/cpu/ops/training): the scalars that depend on the learning rate
// R and the update count T (Adagrad's decayed rate, Adam's bias-corrected
// rate, Momentum's first-step beta) are computed at run time in float64
// and rounded once to the tensor's dtype; the per-element updates keep the
// kernels' order of operations.

const previewTraining = "ai.onnx.preview.training"

func init() {
	domainLowerings[previewTraining+":Adagrad"] = lowerAdagrad
	domainLowerings[previewTraining+":Adam"] = lowerAdam
	domainLowerings[previewTraining+":Momentum"] = lowerMomentum
}

// optimizerGroups checks the input count (R, T, then 2+states groups of k
// tensors) and returns k.
func (l *lowering) optimizerGroups(states int) (int, error) {
	per := 2 + states
	rest := len(l.n.Inputs) - 2
	if rest <= 0 || rest%per != 0 {
		return 0, l.unsupported("%d inputs do not form R, T and groups of %d", len(l.n.Inputs), per)
	}
	k := rest / per
	if len(l.n.Outputs) > (1+states)*k {
		return 0, l.unsupported("%d outputs for %d optimized tensors", len(l.n.Outputs), k)
	}
	for i := 0; i < len(l.n.Inputs); i++ {
		if l.in(i) == "" {
			return 0, l.unsupported("input %d is missing", i)
		}
	}
	return k, nil
}

// optimizerScalars are R and T as float64 values, and T > 0 as a bool.
func (l *lowering) optimizerScalars() (r, t, started string, err error) {
	rt, tt := l.dtype(l.in(0)), l.dtype(l.in(1))
	if !rt.IsFloat() || !tt.IsInt() {
		return "", "", "", l.unsupported("R must be a float and T an integer scalar (have %v, %v)", rt, tt)
	}
	r, t = l.cast(l.in(0), Float64), l.cast(l.in(1), Float64)
	started = l.op("Less", l.scalarOf(Float64, 0), t)
	return r, t, started, nil
}

// optimizerDType is optimized tensor i's dtype, which must be a float.
func (l *lowering) optimizerDType(i int) (DType, error) {
	dt := l.dtype(l.in(2 + i))
	if dt != Float32 && dt != Float64 {
		return Undefined, l.unsupported("optimized tensor %d has dtype %v", i, dt)
	}
	return dt, nil
}

// regularized is norm*x + g (g itself when norm is 0).
func (l *lowering) regularized(x, g string, norm float64, dt DType) string {
	if norm == 0 {
		return g
	}
	return l.add(l.mul(l.scalarOf(dt, norm), x), g)
}

// optimizerOut writes output j of optimized tensor i (of k) when named.
func (l *lowering) optimizerOut(block, k, i int, v string) {
	if j := block*k + i; j < len(l.n.Outputs) && l.n.Outputs[j] != "" {
		l.finish(j, v)
	}
}

func lowerAdagrad(l *lowering) error {
	k, err := l.optimizerGroups(1)
	if err != nil {
		return err
	}
	rate, count, _, err := l.optimizerScalars()
	if err != nil {
		return err
	}
	decay := float64(l.n.AttrFloat("decay_factor", 0))
	norm := float64(l.n.AttrFloat("norm_coefficient", 0))
	eps := float64(l.n.AttrFloat("epsilon", 0))
	// r = R / (1 + T*decay), in float64.
	r := l.div(rate, l.add(l.scalarOf(Float64, 1), l.mul(count, l.scalarOf(Float64, decay))))
	for i := 0; i < k; i++ {
		dt, err := l.optimizerDType(i)
		if err != nil {
			return err
		}
		x, g, h := l.in(2+i), l.in(2+k+i), l.in(2+2*k+i)
		gr := l.regularized(x, g, norm, dt)
		hv := l.add(h, l.mul(gr, gr))
		step := l.div(l.mul(l.cast(r, dt), gr), l.add(l.op("Sqrt", hv), l.scalarOf(dt, eps)))
		l.optimizerOut(0, k, i, l.sub(x, step))
		l.optimizerOut(1, k, i, hv)
	}
	return nil
}

func lowerAdam(l *lowering) error {
	k, err := l.optimizerGroups(2)
	if err != nil {
		return err
	}
	rate, count, started, err := l.optimizerScalars()
	if err != nil {
		return err
	}
	alpha := float64(l.n.AttrFloat("alpha", 0.9))
	beta := float64(l.n.AttrFloat("beta", 0.999))
	eps := float64(l.n.AttrFloat("epsilon", 0))
	norm := float64(l.n.AttrFloat("norm_coefficient", 0))
	post := 1 - float64(l.n.AttrFloat("norm_coefficient_post", 0))
	// r = R*sqrt(1-beta^T)/(1-alpha^T) once T > 0, in float64.
	one := l.scalarOf(Float64, 1)
	corr := l.div(l.op("Sqrt", l.sub(one, l.op("Pow", l.scalarOf(Float64, beta), count))),
		l.sub(one, l.op("Pow", l.scalarOf(Float64, alpha), count)))
	r := l.op("Where", started, l.mul(rate, corr), rate)
	for i := 0; i < k; i++ {
		dt, err := l.optimizerDType(i)
		if err != nil {
			return err
		}
		x, g, v, h := l.in(2+i), l.in(2+k+i), l.in(2+2*k+i), l.in(2+3*k+i)
		gr := l.regularized(x, g, norm, dt)
		vv := l.add(l.mul(l.scalarOf(dt, alpha), v), l.mul(l.scalarOf(dt, 1-alpha), gr))
		hv := l.add(l.mul(l.scalarOf(dt, beta), h), l.mul(l.mul(l.scalarOf(dt, 1-beta), gr), gr))
		step := l.mul(l.cast(r, dt), l.div(vv, l.add(l.op("Sqrt", hv), l.scalarOf(dt, eps))))
		xNew := l.sub(x, step)
		if post != 1 {
			xNew = l.mul(l.scalarOf(dt, post), xNew)
		}
		l.optimizerOut(0, k, i, xNew)
		l.optimizerOut(1, k, i, vv)
		l.optimizerOut(2, k, i, hv)
	}
	return nil
}

func lowerMomentum(l *lowering) error {
	for _, name := range []string{"alpha", "beta", "mode", "norm_coefficient"} {
		if !l.n.HasAttr(name) {
			return l.unsupported("attribute %q is missing", name)
		}
	}
	nesterov := false
	switch mode := l.n.AttrString("mode", ""); mode {
	case "standard":
	case "nesterov":
		nesterov = true
	default:
		return l.unsupported("mode %q", mode)
	}
	k, err := l.optimizerGroups(1)
	if err != nil {
		return err
	}
	rate, _, started, err := l.optimizerScalars()
	if err != nil {
		return err
	}
	alpha := float64(l.n.AttrFloat("alpha", 0))
	norm := float64(l.n.AttrFloat("norm_coefficient", 0))
	// beta, or 1 on the first update (T <= 0).
	beta := l.op("Where", started, l.scalarOf(Float64, float64(l.n.AttrFloat("beta", 0))), l.scalarOf(Float64, 1))
	for i := 0; i < k; i++ {
		dt, err := l.optimizerDType(i)
		if err != nil {
			return err
		}
		x, g, v := l.in(2+i), l.in(2+k+i), l.in(2+2*k+i)
		gr := l.regularized(x, g, norm, dt)
		a := l.scalarOf(dt, alpha)
		vv := l.add(l.mul(a, v), l.mul(l.cast(beta, dt), gr))
		step := vv
		if nesterov {
			step = l.add(gr, l.mul(a, vv))
		}
		l.optimizerOut(0, k, i, l.sub(x, l.mul(l.cast(rate, dt), step)))
		l.optimizerOut(1, k, i, vv)
	}
	return nil
}
