package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// checkData fails unless t is a well-formed tensor (data of the Go type its
// dtype asks for, as many elements as its shape).
func checkData(n *graph.Node, t *graph.Tensor, what string) error {
	if t == nil {
		return n.Errorf("input %s is required", what)
	}
	if err := t.Validate(); err != nil {
		return n.Errorf("input %s: %v", what, err)
	}
	return nil
}

// readInts returns the elements of an integer tensor (shapes, axes, pads,
// repeats, indices). The result may alias t's data; callers must not modify it.
func readInts(n *graph.Node, t *graph.Tensor, what string) ([]int64, error) {
	return readIntsInto(n, nil, t, what)
}

// readIntsInto is readInts converting a tensor that does not hold int64
// into dst[:0] (a node's scratch, reused); an int64 tensor's data is
// returned as it is. The result is never nil (an empty tensor gives an
// empty slice, which callers tell from an absent input).
func readIntsInto(n *graph.Node, dst []int64, t *graph.Tensor, what string) ([]int64, error) {
	if err := checkData(n, t, what); err != nil {
		return nil, err
	}
	out := dst[:0]
	if out == nil {
		out = []int64{}
	}
	switch s := t.Data.(type) {
	case []int64:
		return s, nil
	case []int32:
		for _, v := range s {
			out = append(out, int64(v))
		}
		return out, nil
	}
	if !t.DType.IsInt() {
		return nil, n.Errorf("input %s must be an integer tensor, got %v", what, t.DType)
	}
	for i := range t.Size() {
		out = append(out, t.Int(i))
	}
	return out, nil
}

// readInts1D is readInts for an input that must be a scalar or 1-D.
func readInts1D(n *graph.Node, t *graph.Tensor, what string) ([]int64, error) {
	return readInts1DInto(n, nil, t, what)
}

// readInts1DInto is readIntsInto for an input that must be a scalar or 1-D.
func readInts1DInto(n *graph.Node, dst []int64, t *graph.Tensor, what string) ([]int64, error) {
	if t != nil && t.Rank() > 1 {
		return nil, n.Errorf("input %s must be 1-D, has shape %v", what, t.Shape)
	}
	return readIntsInto(n, dst, t, what)
}

// readScalarInt reads a one-element integer tensor.
func readScalarInt(n *graph.Node, t *graph.Tensor, what string) (int64, error) {
	v, err := readInts(n, t, what)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, n.Errorf("input %s must hold one element, has shape %v", what, t.Shape)
	}
	return v[0], nil
}

// normAxes maps possibly negative axes into [0, rank) and rejects repeats.
func normAxes(n *graph.Node, axes []int64, rank int) ([]int, error) {
	return normAxesInto(n, nil, axes, rank)
}

// normAxesInto is normAxes appending to dst[:0] (a node's scratch, reused).
func normAxesInto(n *graph.Node, dst []int, axes []int64, rank int) ([]int, error) {
	out := append(dst[:0], make([]int, len(axes))...)
	var seenBuf [64]bool
	seen := seenBuf[:0]
	if rank <= len(seenBuf) {
		seen = seenBuf[:max(rank, 0)]
	} else {
		seen = make([]bool, rank)
	}
	for i, a := range axes {
		if a < int64(-rank) || a >= int64(rank) {
			return nil, n.Errorf("axis %d is out of range for rank %d", a, rank)
		}
		if a < 0 {
			a += int64(rank)
		}
		if seen[a] {
			return nil, n.Errorf("axis %d is repeated in %v", a, axes)
		}
		seen[a] = true
		out[i] = int(a)
	}
	return out, nil
}

// normAxis maps one possibly negative axis into [0, rank).
func normAxis(n *graph.Node, axis int64, rank int) (int, error) {
	if axis < int64(-rank) || axis >= int64(rank) {
		return 0, n.Errorf("axis %d is out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += int64(rank)
	}
	return int(axis), nil
}

// identityMaps returns the maps that read a contiguous tensor of shape
// unchanged (used as a starting point that callers then edit).
func identityMaps(shape []int) []axisMap {
	st := graph.Strides(shape)
	maps := make([]axisMap, len(shape))
	for a, d := range shape {
		maps[a] = arith(d, 0, st[a])
	}
	return maps
}

// gatherInto allocates the output of dtype d and shape and fills it from
// src through maps (see gatherView), split over the kernel pool when it is
// large (gatherTask). Every element is written (gathered or fill), so the
// output is not zeroed first.
func gatherInto(n *graph.Node, src *graph.Tensor, shape []int, base int, maps []axisMap, fill any) (*graph.Tensor, error) {
	out, err := kern.NewUninit(n, src.DType, shape)
	if err != nil {
		return nil, err
	}
	if err := gatherIntoNode(n, out.Data, src.Data, base, maps, fill); err != nil {
		return nil, n.Errorf("%v", err)
	}
	return out, nil
}

// prod multiplies dims.
func prod(dims []int) int {
	p := 1
	for _, d := range dims {
		p *= d
	}
	return p
}

// checkedShape validates a shape computed from user input.
func checkedShape(n *graph.Node, shape []int) error {
	if _, err := graph.NumElements(shape); err != nil {
		return n.Errorf("output shape: %v", err)
	}
	return nil
}

// int64Tensor wraps values as a 1-D int64 tensor.
func int64Tensor(v []int64) *graph.Tensor {
	return &graph.Tensor{DType: graph.Int64, Shape: []int{len(v)}, Data: v}
}
