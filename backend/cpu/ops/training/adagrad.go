package training

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// adagrad implements ai.onnx.preview.training.Adagrad: inputs R, T, X...,
// G..., H... (H the accumulated squared gradients); outputs X_new...,
// H_new.... With r = R / (1 + T*decay_factor) and
// g = norm_coefficient*X + G, it computes
//
//	H_new = H + g*g
//	X_new = X - r*g / (Sqrt(H_new) + epsilon)
func adagrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	rate, count, err := optimScalars(n, in)
	if err != nil {
		return nil, err
	}
	decay := float64(n.AttrFloat("decay_factor", 0))
	norm := float64(n.AttrFloat("norm_coefficient", 0))
	eps := float64(n.AttrFloat("epsilon", 0))
	r := rate / (1 + float64(count)*decay)
	return applyOptimizer(n, in, 1,
		adagradUpdate(float32(r), float32(norm), float32(eps)),
		adagradUpdate(r, norm, eps))
}

// adagradUpdate returns the Adagrad update of one tensor for the effective
// learning rate r.
func adagradUpdate[T float](r, norm, eps T) updateFn[T] {
	return func(ops, outs [][]T) {
		xNew, hNew := outs[0], outs[1]
		x, g, h := ops[0][:len(xNew)], ops[1][:len(xNew)], ops[2][:len(xNew)]
		hNew = hNew[:len(xNew)]
		for i := range xNew {
			gr := norm*x[i] + g[i]
			hv := h[i] + gr*gr
			hNew[i] = hv
			xNew[i] = x[i] - r*gr/(sqrt(hv)+eps)
		}
	}
}
