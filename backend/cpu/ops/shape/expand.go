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
	st := graph.Strides(in)
	off := len(out) - len(in)
	maps := make([]axisMap, len(out))
	for a, d := range out {
		stride := 0
		if j := a - off; j >= 0 && in[j] != 1 {
			stride = st[j]
		}
		maps[a] = arith(d, 0, stride)
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
	dims := make([]int, len(want))
	for i, d := range want {
		if d < 0 || d > graph.MaxElements {
			return nil, n.Errorf("shape %v has an invalid dim %d", want, d)
		}
		dims[i] = int(d)
	}
	shape, err := kern.BroadcastShape(x.Shape, dims)
	if err != nil {
		return nil, n.Errorf("cannot expand input %v to %v: %v", x.Shape, want, err)
	}
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	out, err := gatherInto(n, x, shape, 0, broadcastMaps(x.Shape, shape), nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
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
