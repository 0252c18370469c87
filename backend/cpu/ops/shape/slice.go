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
	first, count, steps, err := SliceAxes(n, x.Shape, in[1:])
	if err != nil {
		return nil, err
	}
	st := graph.Strides(x.Shape)
	shape := append([]int{}, x.Shape...)
	maps := identityMaps(x.Shape)
	for a := range x.Shape {
		if count[a] == x.Shape[a] && first[a] == 0 && steps[a] == 1 {
			continue
		}
		shape[a] = count[a]
		maps[a] = arith(count[a], first[a]*st[a], steps[a]*st[a])
	}
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}

// SliceAxes resolves a Slice node's starts, ends, axes and steps
// (attributes before opset 10, the inputs params = Slice's inputs 1.. from
// 10) against a data shape: per axis of the data, the first index read, the
// number of elements and the step (an axis that is not sliced reads all of
// it). The Slice kernel and its gradient both use it.
func SliceAxes(n *graph.Node, shape []int, params []*graph.Tensor) (first, count, step []int, err error) {
	var starts, ends, axes, steps []int64
	if n.HasAttr("starts") || n.HasAttr("ends") {
		starts = n.AttrInts("starts", nil)
		ends = n.AttrInts("ends", nil)
		axes = n.AttrInts("axes", nil)
	} else {
		if len(params) < 2 || params[0] == nil || params[1] == nil {
			return nil, nil, nil, n.Errorf("needs the starts and ends inputs")
		}
		if starts, err = readInts1D(n, params[0], "starts"); err != nil {
			return nil, nil, nil, err
		}
		if ends, err = readInts1D(n, params[1], "ends"); err != nil {
			return nil, nil, nil, err
		}
		if t := kern.Opt(params, 2); t != nil {
			if axes, err = readInts1D(n, t, "axes"); err != nil {
				return nil, nil, nil, err
			}
		}
		if t := kern.Opt(params, 3); t != nil {
			if steps, err = readInts1D(n, t, "steps"); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	r := len(shape)
	if len(starts) != len(ends) {
		return nil, nil, nil, n.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		if len(starts) > r {
			return nil, nil, nil, n.Errorf("starts %v has more entries than the input %v has axes", starts, shape)
		}
		axes = make([]int64, len(starts))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(axes) != len(starts) {
		return nil, nil, nil, n.Errorf("axes %v and starts %v differ in length", axes, starts)
	}
	if steps != nil && len(steps) != len(starts) {
		return nil, nil, nil, n.Errorf("steps %v and starts %v differ in length", steps, starts)
	}
	ax, err := normAxes(n, axes, r)
	if err != nil {
		return nil, nil, nil, err
	}
	first, count, step = make([]int, r), append([]int{}, shape...), make([]int, r)
	for a := range step {
		step[a] = 1
	}
	for i, a := range ax {
		s := int64(1)
		if steps != nil {
			s = steps[i]
		}
		if s == 0 {
			return nil, nil, nil, n.Errorf("steps %v has a 0", steps)
		}
		f, c := sliceRange(starts[i], ends[i], s, int64(shape[a]))
		first[a], count[a], step[a] = int(f), int(c), int(s)
	}
	return first, count, step, nil
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
