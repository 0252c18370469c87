package training

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// momentum implements ai.onnx.preview.training.Momentum: inputs R, T, X...,
// G..., V... (V the momenta); outputs X_new..., V_new.... With
// g = norm_coefficient*X + G and b = beta when T > 0, else 1, it computes
//
//	V_new = alpha*V + b*g
//	X_new = X - R*V_new                 (mode "standard")
//	X_new = X - R*(g + alpha*V_new)     (mode "nesterov")
//
// alpha, beta, mode and norm_coefficient are required attributes.
func momentum(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	for _, name := range []string{"alpha", "beta", "mode", "norm_coefficient"} {
		if !n.HasAttr(name) {
			return nil, n.Errorf("required attribute %q is missing", name)
		}
	}
	rate, count, err := optimScalars(n, in)
	if err != nil {
		return nil, err
	}
	alpha := float64(n.AttrFloat("alpha", 0))
	beta := float64(n.AttrFloat("beta", 0))
	norm := float64(n.AttrFloat("norm_coefficient", 0))
	if count <= 0 {
		beta = 1
	}
	var (
		f32 updateFn[float32]
		f64 updateFn[float64]
	)
	switch mode := n.AttrString("mode", ""); mode {
	case "standard":
		f32 = momentumStandard(float32(rate), float32(alpha), float32(beta), float32(norm))
		f64 = momentumStandard(rate, alpha, beta, norm)
	case "nesterov":
		f32 = momentumNesterov(float32(rate), float32(alpha), float32(beta), float32(norm))
		f64 = momentumNesterov(rate, alpha, beta, norm)
	default:
		return nil, n.Errorf("attribute mode must be \"standard\" or \"nesterov\", got %q", mode)
	}
	return applyOptimizer(n, in, 1, f32, f64)
}

// momentumStandard returns the standard-momentum update of one tensor;
// beta is already adjusted for the first iteration.
func momentumStandard[T float](r, alpha, beta, norm T) updateFn[T] {
	return func(ops, outs [][]T) {
		xNew, vNew := outs[0], outs[1]
		x, g, v := ops[0][:len(xNew)], ops[1][:len(xNew)], ops[2][:len(xNew)]
		vNew = vNew[:len(xNew)]
		for i := range xNew {
			gr := norm*x[i] + g[i]
			vv := alpha*v[i] + beta*gr
			vNew[i] = vv
			xNew[i] = x[i] - r*vv
		}
	}
}

// momentumNesterov returns the Nesterov-momentum update of one tensor;
// beta is already adjusted for the first iteration.
func momentumNesterov[T float](r, alpha, beta, norm T) updateFn[T] {
	return func(ops, outs [][]T) {
		xNew, vNew := outs[0], outs[1]
		x, g, v := ops[0][:len(xNew)], ops[1][:len(xNew)], ops[2][:len(xNew)]
		vNew = vNew[:len(xNew)]
		for i := range xNew {
			gr := norm*x[i] + g[i]
			vv := alpha*v[i] + beta*gr
			vNew[i] = vv
			xNew[i] = x[i] - r*(gr+alpha*vv)
		}
	}
}
