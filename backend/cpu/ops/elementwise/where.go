package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	// Where only moves elements, so it handles half types as raw bits.
	kern.RegisterHalf("Where", whereKernel)
}

// whereKernel is Where: X where the condition holds, else Y, with the three
// inputs broadcast together.
func whereKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	c, x, y := in[0], in[1], in[2]
	if c.DType != graph.Bool {
		return nil, n.Errorf("condition has dtype %v, want bool", c.DType)
	}
	if x.DType != y.DType {
		return nil, n.Errorf("X has dtype %v and Y %v (they must match)", x.DType, y.DType)
	}
	var out *graph.Tensor
	var err error
	switch x.Data.(type) {
	case []float32:
		out, err = whereTyped[float32](n, c, x, y)
	case []float64:
		out, err = whereTyped[float64](n, c, x, y)
	case []int8:
		out, err = whereTyped[int8](n, c, x, y)
	case []int16:
		out, err = whereTyped[int16](n, c, x, y)
	case []int32:
		out, err = whereTyped[int32](n, c, x, y)
	case []int64:
		out, err = whereTyped[int64](n, c, x, y)
	case []uint8:
		out, err = whereTyped[uint8](n, c, x, y)
	case []uint16:
		out, err = whereTyped[uint16](n, c, x, y)
	case []uint32:
		out, err = whereTyped[uint32](n, c, x, y)
	case []uint64:
		out, err = whereTyped[uint64](n, c, x, y)
	case []bool:
		out, err = whereTyped[bool](n, c, x, y)
	case []string:
		out, err = whereTyped[string](n, c, x, y)
	default:
		return nil, errDType(n, x)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// whereTyped selects between tensors holding []T.
func whereTyped[T any](n *graph.Node, c, x, y *graph.Tensor) (*graph.Tensor, error) {
	cs, err := dataAs[bool](n, c, 0)
	if err != nil {
		return nil, err
	}
	xs, err := dataAs[T](n, x, 1)
	if err != nil {
		return nil, err
	}
	ys, err := dataAs[T](n, y, 2)
	if err != nil {
		return nil, err
	}
	p, err := newPlan(n, c.Shape, x.Shape, y.Shape)
	if err != nil {
		return nil, err
	}
	out, err := newFull(n, x.DType, p.out)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]T)
	sc, sx, sy := p.innerStride(0), p.innerStride(1), p.innerStride(2)
	inner := p.inner
	p.eachRowParallel(func(o int, offs []int) {
		row := dst[o : o+inner]
		oc, ox, oy := offs[0], offs[1], offs[2]
		if sc == 1 && sx == 1 && sy == 1 {
			cr, xr, yr := cs[oc:oc+inner], xs[ox:ox+inner], ys[oy:oy+inner]
			for i, cond := range cr {
				if cond {
					row[i] = xr[i]
				} else {
					row[i] = yr[i]
				}
			}
			return
		}
		for i := range row {
			if cs[oc+i*sc] {
				row[i] = xs[ox+i*sx]
			} else {
				row[i] = ys[oy+i*sy]
			}
		}
	})
	return out, nil
}
