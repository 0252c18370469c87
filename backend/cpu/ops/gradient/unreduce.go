package gradient

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	register("UnreduceTo", unreduceTo)
}

// unreduceTo(v, x[, axes]) undoes a reduction's shape: with keepdims=0 it
// reinserts size-1 dims at the reduced axes, then broadcasts v to x's shape.
// Attributes mirror the reduction's: keepdims (default 1), axes (attribute
// form), noop_with_empty_axes.
func unreduceTo(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	v, x := in[0], in[1]
	rank := len(x.Shape)
	var axes []int
	if a := kern.Opt(in, 2); a != nil {
		axes = a.Ints()
	} else {
		axes = graph.IntsToInt(n.AttrInts("axes", nil))
	}
	if len(axes) == 0 && n.AttrInt("noop_with_empty_axes", 0) == 1 {
		return []*graph.Tensor{v}, nil
	}
	reduced := make([]bool, rank)
	if len(axes) == 0 {
		for i := range reduced {
			reduced[i] = true
		}
	}
	for _, ax := range axes {
		a, err := kern.NormAxis(n, ax, rank)
		if err != nil {
			return nil, err
		}
		reduced[a] = true
	}
	shape := make([]int, rank)
	if n.AttrInt("keepdims", 1) == 1 {
		if len(v.Shape) != rank {
			return nil, n.Errorf("value of shape %v does not match rank %d", v.Shape, rank)
		}
		copy(shape, v.Shape)
	} else {
		j := 0
		for i := 0; i < rank; i++ {
			if reduced[i] {
				shape[i] = 1
				continue
			}
			if j >= len(v.Shape) {
				return nil, n.Errorf("value of shape %v does not fit %v", v.Shape, x.Shape)
			}
			shape[i] = v.Shape[j]
			j++
		}
	}
	out, err := kern.New(n, v.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	idx := kern.BroadcastIndex(shape, x.Shape)
	switch src := v.Data.(type) {
	case []float32:
		dst := out.Data.([]float32)
		for i, j := range idx {
			dst[i] = src[j]
		}
	case []float64:
		dst := out.Data.([]float64)
		for i, j := range idx {
			dst[i] = src[j]
		}
	default:
		for i, j := range idx {
			out.SetFloat(i, v.Float(j))
		}
	}
	return []*graph.Tensor{out}, nil
}
