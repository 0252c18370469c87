package reduce

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("ArgMax", argKernel(true))
	kern.Register("ArgMin", argKernel(false))
}

// argKernel returns the ArgMax (isMax) or ArgMin kernel: the int64 index of
// the first extreme element along axis (default 0), or of the last one with
// select_last_index (opset 12). NaN counts as the extreme, as in NumPy.
func argKernel(isMax bool) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if x.Rank() == 0 {
			return nil, n.Errorf("input must have rank 1 or more")
		}
		axis, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), x.Rank())
		if err != nil {
			return nil, err
		}
		b := axisBlocks(x.Shape, axis)
		if b.r == 0 {
			return nil, n.Errorf("cannot take the arg-extreme of an empty axis %d (shape %v)", axis, x.Shape)
		}
		reduced := make([]bool, x.Rank())
		reduced[axis] = true
		out, err := kern.New(n, graph.Int64, reducedShape(x.Shape, reduced, n.AttrInt("keepdims", 1) != 0))
		if err != nil {
			return nil, err
		}
		last := n.AttrInt("select_last_index", 0) != 0
		y := out.Data.([]int64)
		switch xs := x.Data.(type) {
		case []float32:
			argBlocks(isMax, last, xs, y, b)
		case []float64:
			argBlocks(isMax, last, xs, y, b)
		case []int8:
			argBlocks(isMax, last, xs, y, b)
		case []int16:
			argBlocks(isMax, last, xs, y, b)
		case []int32:
			argBlocks(isMax, last, xs, y, b)
		case []int64:
			argBlocks(isMax, last, xs, y, b)
		case []uint8:
			argBlocks(isMax, last, xs, y, b)
		case []uint16:
			argBlocks(isMax, last, xs, y, b)
		case []uint32:
			argBlocks(isMax, last, xs, y, b)
		case []uint64:
			argBlocks(isMax, last, xs, y, b)
		case []bool:
			u := make([]uint8, len(xs))
			for i, v := range xs {
				if v {
					u[i] = 1
				}
			}
			argBlocks(isMax, last, u, y, b)
		default:
			return nil, n.Errorf("dtype %v is not supported", x.DType)
		}
		return []*graph.Tensor{out}, nil
	}
}

// argBlocks writes to y the index along r of the extreme element of each
// (outer, inner) column of x. b.r must be positive.
func argBlocks[T number](isMax, last bool, x []T, y []int64, b blocks) {
	size := b.r * b.inner
	best := make([]T, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		idx := y[o*b.inner : (o+1)*b.inner]
		copy(best, block[:b.inner])
		clear(idx)
		for k := 1; k < b.r; k++ {
			row := block[k*b.inner : (k+1)*b.inner]
			for i, v := range row {
				if argBetter(isMax, last, v, best[i]) {
					best[i] = v
					idx[i] = int64(k)
				}
			}
		}
	}
}

// argBetter reports whether v (seen after cur) replaces cur as the extreme.
func argBetter[T number](isMax, last bool, v, cur T) bool {
	if isNaN(cur) {
		return last && isNaN(v)
	}
	if isNaN(v) {
		return true
	}
	if last {
		if isMax {
			return v >= cur
		}
		return v <= cur
	}
	if isMax {
		return v > cur
	}
	return v < cur
}
