package training

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// adam implements ai.onnx.preview.training.Adam: inputs R, T, X..., G...,
// V..., H... (V the averaged gradients, H the averaged squared gradients);
// outputs X_new..., V_new..., H_new.... With g = norm_coefficient*X + G it
// computes
//
//	V_new = alpha*V + (1-alpha)*g
//	H_new = beta*H + (1-beta)*g*g
//	r     = T > 0 ? R*Sqrt(1-beta^T)/(1-alpha^T) : R
//	X_new = (1-norm_coefficient_post) * (X - r*V_new/(Sqrt(H_new)+epsilon))
func adam(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	rate, count, err := optimScalars(n, in)
	if err != nil {
		return nil, err
	}
	p := adamParams[float64]{
		alpha: float64(n.AttrFloat("alpha", 0.9)),
		beta:  float64(n.AttrFloat("beta", 0.999)),
		eps:   float64(n.AttrFloat("epsilon", 0)),
		norm:  float64(n.AttrFloat("norm_coefficient", 0)),
		post:  1 - float64(n.AttrFloat("norm_coefficient_post", 0)),
		r:     rate,
	}
	p.oneMinusAlpha, p.oneMinusBeta = 1-p.alpha, 1-p.beta
	if count > 0 {
		t := float64(count)
		p.r = rate * math.Sqrt(1-math.Pow(p.beta, t)) / (1 - math.Pow(p.alpha, t))
	}
	p32 := adamParams[float32]{
		alpha: float32(p.alpha), beta: float32(p.beta), eps: float32(p.eps),
		norm: float32(p.norm), post: float32(p.post), r: float32(p.r),
		oneMinusAlpha: float32(p.oneMinusAlpha), oneMinusBeta: float32(p.oneMinusBeta),
	}
	return applyOptimizer(n, in, 2, adamUpdate(p32), adamUpdate(p))
}

// adamParams are Adam's scalars for one node: r is the bias-corrected
// learning rate and post is 1 - norm_coefficient_post. The complements of
// alpha and beta are computed in float64 before rounding to T.
type adamParams[T float] struct {
	alpha, beta, eps, norm, post, r T
	oneMinusAlpha, oneMinusBeta     T
}

// adamUpdate returns the Adam update of one tensor.
func adamUpdate[T float](p adamParams[T]) updateFn[T] {
	return func(ops, outs [][]T) {
		xNew, vNew, hNew := outs[0], outs[1], outs[2]
		m := len(xNew)
		x, g, v, h := ops[0][:m], ops[1][:m], ops[2][:m], ops[3][:m]
		vNew, hNew = vNew[:m], hNew[:m]
		alpha, beta, oneMinusAlpha, oneMinusBeta := p.alpha, p.beta, p.oneMinusAlpha, p.oneMinusBeta
		for i := range xNew {
			gr := p.norm*x[i] + g[i]
			vv := alpha*v[i] + oneMinusAlpha*gr
			hv := beta*h[i] + oneMinusBeta*gr*gr
			vNew[i], hNew[i] = vv, hv
			xNew[i] = p.post * (x[i] - p.r*(vv/(sqrt(hv)+p.eps)))
		}
	}
}
