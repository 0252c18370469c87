package reduce

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() { kern.Register("TopK", topK) }

// topK is TopK: the k largest (or, with largest=0, smallest) elements along
// axis (default -1) and their int64 indices. k is an attribute before opset
// 10 and a one-element input from then on. Equal values keep the lower index
// first, NaN ranks above every number, and the result is always sorted (the
// spec leaves the order free when sorted=0).
func topK(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var k int64
	if kt := kern.Opt(in, 1); kt != nil {
		var err error
		if k, err = scalarInt(n, kt, "k input"); err != nil {
			return nil, err
		}
	} else {
		if !n.HasAttr("k") {
			return nil, n.Errorf("k is missing (an input from opset 10, an attribute before)")
		}
		k = n.AttrInt("k", 0)
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("input must have rank 1 or more")
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", -1)), x.Rank())
	if err != nil {
		return nil, err
	}
	b := axisBlocks(x.Shape, axis)
	if k < 0 || k > int64(b.r) {
		return nil, n.Errorf("k = %d is out of range for axis %d of size %d", k, axis, b.r)
	}
	shape := append([]int{}, x.Shape...)
	shape[axis] = int(k)
	values, err := kern.New(n, x.DType, shape)
	if err != nil {
		return nil, err
	}
	indices, err := kern.New(n, graph.Int64, shape)
	if err != nil {
		return nil, err
	}
	largest := n.AttrInt("largest", 1) != 0
	idx := indices.Data.([]int64)
	switch xs := x.Data.(type) {
	case []float32:
		topKBlocks(xs, values.Data.([]float32), idx, b, int(k), largest)
	case []float64:
		topKBlocks(xs, values.Data.([]float64), idx, b, int(k), largest)
	case []int8:
		topKBlocks(xs, values.Data.([]int8), idx, b, int(k), largest)
	case []int16:
		topKBlocks(xs, values.Data.([]int16), idx, b, int(k), largest)
	case []int32:
		topKBlocks(xs, values.Data.([]int32), idx, b, int(k), largest)
	case []int64:
		topKBlocks(xs, values.Data.([]int64), idx, b, int(k), largest)
	case []uint8:
		topKBlocks(xs, values.Data.([]uint8), idx, b, int(k), largest)
	case []uint16:
		topKBlocks(xs, values.Data.([]uint16), idx, b, int(k), largest)
	case []uint32:
		topKBlocks(xs, values.Data.([]uint32), idx, b, int(k), largest)
	case []uint64:
		topKBlocks(xs, values.Data.([]uint64), idx, b, int(k), largest)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	return []*graph.Tensor{values, indices}, nil
}

// topKEntry is one candidate: a value and its index along the axis.
type topKEntry[T number] struct {
	v T
	i int
}

// topKBefore reports whether a ranks before b: larger (or smaller) value
// first, NaN above every number, lower index first among equals.
func topKBefore[T number](a, b topKEntry[T], largest bool) bool {
	an, bn := isNaN(a.v), isNaN(b.v)
	switch {
	case an && bn:
		return a.i < b.i
	case an:
		return largest
	case bn:
		return !largest
	case a.v == b.v:
		return a.i < b.i
	case largest:
		return a.v > b.v
	}
	return a.v < b.v
}

// topKBlocks selects the k best of each column along r.
func topKBlocks[T number](x, vals []T, idx []int64, b blocks, k int, largest bool) {
	if k == 0 {
		return
	}
	size := b.r * b.inner
	cand := make([]topKEntry[T], 0, b.r)
	cmp := func(a, c topKEntry[T]) int {
		switch {
		case topKBefore(a, c, largest):
			return -1
		case topKBefore(c, a, largest):
			return 1
		}
		return 0
	}
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		for i := 0; i < b.inner; i++ {
			cand = cand[:0]
			if k <= 8 && k < b.r {
				// Insertion into a short sorted list: O(r·k) with no allocation.
				for j := 0; j < b.r; j++ {
					e := topKEntry[T]{block[j*b.inner+i], j}
					if len(cand) == k && !topKBefore(e, cand[k-1], largest) {
						continue
					}
					if len(cand) < k {
						cand = append(cand, e)
					} else {
						cand[k-1] = e
					}
					for p := len(cand) - 1; p > 0 && topKBefore(cand[p], cand[p-1], largest); p-- {
						cand[p], cand[p-1] = cand[p-1], cand[p]
					}
				}
			} else {
				for j := 0; j < b.r; j++ {
					cand = append(cand, topKEntry[T]{block[j*b.inner+i], j})
				}
				slices.SortFunc(cand, cmp)
			}
			base := o*k*b.inner + i
			for j, e := range cand[:k] {
				vals[base+j*b.inner] = e.v
				idx[base+j*b.inner] = int64(e.i)
			}
		}
	}
}
