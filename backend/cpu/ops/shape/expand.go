package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Expand", expandKernel)
	kern.RegisterHalf("Tile", tileKernel)
}

// broadcastMaps returns the maps that read a contiguous tensor of shape in
// broadcast (numpy style, aligned at the right) to shape out.
func broadcastMaps(in, out []int) []axisMap {
	return broadcastMapsInto(nil, in, out)
}

// broadcastMapsInto is broadcastMaps appending to dst[:0].
func broadcastMapsInto(dst []axisMap, in, out []int) []axisMap {
	off := len(out) - len(in)
	maps := append(dst[:0], make([]axisMap, len(out))...)
	// Row-major strides of in, from the last axis.
	stride := 1
	for a := len(out) - 1; a >= 0; a-- {
		s := 0
		if j := a - off; j >= 0 {
			if in[j] != 1 {
				s = stride
			}
			stride *= in[j]
		}
		maps[a] = arith(out[a], 0, s)
	}
	return maps
}

// expandKernel implements Expand: the input broadcast with the given shape
// (bidirectionally, so a 1 in shape keeps the input's dim).
func expandKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	want, err := readInts1D(n, in[1], "shape")
	if err != nil {
		return nil, err
	}
	// The output shape and maps live in the node's state between runs.
	st := kern.State[expandState](n)
	shape := append(st.shape[:0], make([]int, max(len(want), x.Rank()))...)
	st.shape = shape
	for i := range shape {
		shape[i] = 1
	}
	for i, d := range want {
		if d < 0 || d > graph.MaxElements {
			return nil, n.Errorf("shape %v has an invalid dim %d", want, d)
		}
		shape[len(shape)-len(want)+i] = int(d)
	}
	// Numpy broadcast of x's shape with the requested one (as
	// kern.BroadcastShape, in place).
	off := len(shape) - x.Rank()
	for i, d := range x.Shape {
		switch o := shape[off+i]; {
		case o == d || d == 1:
		case o == 1:
			shape[off+i] = d
		default:
			return nil, n.Errorf("cannot expand input %v to %v: shapes %v and %v cannot be broadcast together", x.Shape, want, x.Shape, want)
		}
	}
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	st.maps = broadcastMapsInto(st.maps, x.Shape, shape)
	out, err := gatherInto(n, x, shape, 0, st.maps, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// expandState is what an Expand node keeps between runs.
type expandState struct {
	shape []int
	maps  []axisMap
}

// tileKernel implements Tile: axis a of the input repeated repeats[a] times.
func tileKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	reps, err := readInts1D(n, in[1], "repeats")
	if err != nil {
		return nil, err
	}
	if len(reps) != x.Rank() {
		return nil, n.Errorf("repeats %v must have one entry per axis of input %v", reps, x.Shape)
	}
	st := graph.Strides(x.Shape)
	shape := make([]int, x.Rank())
	// Output axis a, of size reps[a]*d, is viewed as two axes [reps[a], d]:
	// the repetition (stride 0) and the input axis.
	maps := make([]axisMap, 0, 2*x.Rank())
	for a, d := range x.Shape {
		r := reps[a]
		if r < 0 || (d != 0 && r > int64(graph.MaxElements/d)) {
			return nil, n.Errorf("repeats %v has an invalid entry %d for input %v", reps, r, x.Shape)
		}
		shape[a] = int(r) * d
		maps = append(maps, arith(int(r), 0, 0), arith(d, 0, st[a]))
	}
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}
