package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Slice", sliceKernel)
}

// sliceKernel implements Slice: starts, ends, axes and steps are inputs from
// opset 10 and attributes (without steps) before.
func sliceKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	// The resolved ranges, the output shape and the gather's maps live in
	// the node's state, so that a step allocates none of them.
	ss := kern.State[sliceState](n)
	r := &ss.ranges
	if err := r.Resolve(n, x.Shape, in[1:]); err != nil {
		return nil, err
	}
	rank := len(x.Shape)
	shape := append(ss.shape[:0], x.Shape...)
	maps := append(ss.maps[:0], make([]axisMap, rank)...)
	st := 1
	for a := rank - 1; a >= 0; a-- {
		maps[a] = arith(x.Shape[a], 0, st)
		if r.Count[a] != x.Shape[a] || r.First[a] != 0 || r.Step[a] != 1 {
			shape[a] = r.Count[a]
			maps[a] = arith(r.Count[a], r.First[a]*st, r.Step[a]*st)
		}
		st *= x.Shape[a]
	}
	ss.shape, ss.maps = shape, maps
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// sliceState is a Slice node's scratch between runs.
type sliceState struct {
	ranges SliceRanges
	shape  []int
	maps   []axisMap
}

// SliceAxes resolves a Slice node's starts, ends, axes and steps
// (attributes before opset 10, the inputs params = Slice's inputs 1.. from
// 10) against a data shape: per axis of the data, the first index read, the
// number of elements and the step (an axis that is not sliced reads all of
// it). It allocates its results; a kernel that runs on every step keeps a
// SliceRanges in its node's state and calls Resolve instead.
func SliceAxes(n *graph.Node, shape []int, params []*graph.Tensor) (first, count, step []int, err error) {
	var r SliceRanges
	if err := r.Resolve(n, shape, params); err != nil {
		return nil, nil, nil, err
	}
	return r.First, r.Count, r.Step, nil
}

// SliceRanges is a Slice resolved against a data shape (SliceAxes), with
// the scratch that resolving it needs; kept between runs, a Resolve on the
// same ranks allocates nothing. The Slice kernel and its gradient use it.
type SliceRanges struct {
	// First, Count and Step hold, per axis of the data, the first index
	// read, the number of elements and the step.
	First, Count, Step []int
	axes               []int
	// ints holds starts, ends, axes and steps when their tensors are not
	// int64 (converted), and the default axes.
	ints [4][]int64
}

// Resolve fills r from a Slice node's parameters against a data shape
// (see SliceAxes).
func (r *SliceRanges) Resolve(n *graph.Node, shape []int, params []*graph.Tensor) error {
	var starts, ends, axes, steps []int64
	var err error
	if n.HasAttr("starts") || n.HasAttr("ends") {
		starts = n.AttrInts("starts", nil)
		ends = n.AttrInts("ends", nil)
		axes = n.AttrInts("axes", nil)
	} else {
		if len(params) < 2 || params[0] == nil || params[1] == nil {
			return n.Errorf("needs the starts and ends inputs")
		}
		if starts, err = readInts1DInto(n, r.ints[0], params[0], "starts"); err != nil {
			return err
		}
		if ends, err = readInts1DInto(n, r.ints[1], params[1], "ends"); err != nil {
			return err
		}
		if t := kern.Opt(params, 2); t != nil {
			if axes, err = readInts1DInto(n, r.ints[2], t, "axes"); err != nil {
				return err
			}
		}
		if t := kern.Opt(params, 3); t != nil {
			if steps, err = readInts1DInto(n, r.ints[3], t, "steps"); err != nil {
				return err
			}
		}
	}
	// Keep the converted copies' storage (an int64 input's own data is
	// not kept: it belongs to the tensor).
	for i, v := range [4][]int64{starts, ends, axes, steps} {
		if len(params) > i && params[i] != nil && !isInt64(params[i]) && cap(v) > cap(r.ints[i]) {
			r.ints[i] = v[:0]
		}
	}
	rank := len(shape)
	if len(starts) != len(ends) {
		return n.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		if len(starts) > rank {
			return n.Errorf("starts %v has more entries than the input %v has axes", starts, shape)
		}
		axes = r.ints[2][:0]
		for i := range starts {
			axes = append(axes, int64(i))
		}
		r.ints[2] = axes[:0]
	}
	if len(axes) != len(starts) {
		return n.Errorf("axes %v and starts %v differ in length", axes, starts)
	}
	if steps != nil && len(steps) != len(starts) {
		return n.Errorf("steps %v and starts %v differ in length", steps, starts)
	}
	ax, err := normAxesInto(n, r.axes, axes, rank)
	if err != nil {
		return err
	}
	r.axes = ax
	r.First = append(r.First[:0], make([]int, rank)...)
	r.Count = append(r.Count[:0], shape...)
	r.Step = append(r.Step[:0], make([]int, rank)...)
	for a := range r.Step {
		r.Step[a] = 1
	}
	for i, a := range ax {
		s := int64(1)
		if steps != nil {
			s = steps[i]
		}
		if s == 0 {
			return n.Errorf("steps %v has a 0", steps)
		}
		f, c := sliceRange(starts[i], ends[i], s, int64(shape[a]))
		r.First[a], r.Count[a], r.Step[a] = int(f), int(c), int(s)
	}
	return nil
}

// isInt64 reports whether t's data is an int64 slice (which readIntsInto
// returns as it is).
func isInt64(t *graph.Tensor) bool {
	_, ok := t.Data.([]int64)
	return ok
}

// sliceRange clamps start and end the way the Slice spec says and returns
// the first index and the element count along an axis of size dim.
func sliceRange(start, end, step, dim int64) (first, count int64) {
	if start < 0 {
		start += dim
	}
	if end < 0 {
		end += dim
	}
	// A step longer than the axis takes one element, and clamping it
	// keeps the arithmetic below from overflowing.
	step = min(max(step, -dim-1), dim+1)
	if step > 0 {
		start = min(max(start, 0), dim)
		end = min(max(end, 0), dim)
		if end <= start {
			return start, 0
		}
		return start, (end-start-1)/step + 1
	}
	if dim == 0 {
		return 0, 0
	}
	start = min(max(start, 0), dim-1)
	end = min(max(end, -1), dim-1)
	if end >= start {
		return start, 0
	}
	return start, (start-end-1)/-step + 1
}
