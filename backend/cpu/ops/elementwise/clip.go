package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("Clip", clipKernel)
}

// clipKernel is Clip. Before opset 11 the bounds are the float attributes
// min and max; from 11 on they are optional scalar inputs of the input's
// dtype. With min > max every element becomes max, as the spec says.
func clipKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !isNumeric(x) {
		return nil, errDType(n, x)
	}
	var lo, hi *graph.Tensor
	if ctx != nil && ctx.Opset > 0 && ctx.Opset < 11 {
		if x.DType != graph.Float32 && x.DType != graph.Float64 {
			return nil, errDType(n, x)
		}
		lo = graph.Scalar(x.DType, float64(n.AttrFloat("min", -math.MaxFloat32)))
		hi = graph.Scalar(x.DType, float64(n.AttrFloat("max", math.MaxFloat32)))
		if !n.HasAttr("min") {
			lo = nil
		}
		if !n.HasAttr("max") {
			hi = nil
		}
	} else {
		lo, hi = kern.Opt(in, 1), kern.Opt(in, 2)
	}
	var out *graph.Tensor
	var err error
	switch x.Data.(type) {
	case []float32:
		out, err = clipTyped[float32](n, x, lo, hi)
	case []float64:
		out, err = clipTyped[float64](n, x, lo, hi)
	case []int8:
		out, err = clipTyped[int8](n, x, lo, hi)
	case []int16:
		out, err = clipTyped[int16](n, x, lo, hi)
	case []int32:
		out, err = clipTyped[int32](n, x, lo, hi)
	case []int64:
		out, err = clipTyped[int64](n, x, lo, hi)
	case []uint8:
		out, err = clipTyped[uint8](n, x, lo, hi)
	case []uint16:
		out, err = clipTyped[uint16](n, x, lo, hi)
	case []uint32:
		out, err = clipTyped[uint32](n, x, lo, hi)
	case []uint64:
		out, err = clipTyped[uint64](n, x, lo, hi)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// clipBound reads an optional one-element bound of type T.
func clipBound[T number](n *graph.Node, t *graph.Tensor, idx int, name string) (v T, ok bool, err error) {
	if t == nil {
		return v, false, nil
	}
	s, err := dataAs[T](n, t, idx)
	if err != nil {
		return v, false, err
	}
	if len(s) != 1 {
		return v, false, n.Errorf("%s must be a scalar, has shape %v", name, t.Shape)
	}
	return s[0], true, nil
}

// clipTyped clips a tensor holding []T.
func clipTyped[T number](n *graph.Node, x, lo, hi *graph.Tensor) (*graph.Tensor, error) {
	src, err := dataAs[T](n, x, 0)
	if err != nil {
		return nil, err
	}
	l, hasLo, err := clipBound[T](n, lo, 1, "min")
	if err != nil {
		return nil, err
	}
	h, hasHi, err := clipBound[T](n, hi, 2, "max")
	if err != nil {
		return nil, err
	}
	out, err := newLike(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]T)
	switch {
	case hasLo && hasHi:
		for i, v := range src {
			if v < l {
				v = l
			}
			if v > h {
				v = h
			}
			dst[i] = v
		}
	case hasLo:
		for i, v := range src {
			if v < l {
				v = l
			}
			dst[i] = v
		}
	case hasHi:
		for i, v := range src {
			if v > h {
				v = h
			}
			dst[i] = v
		}
	default:
		copy(dst, src)
	}
	return out, nil
}
