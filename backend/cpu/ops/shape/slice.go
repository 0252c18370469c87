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
	var starts, ends, axes, steps []int64
	if n.HasAttr("starts") || n.HasAttr("ends") {
		starts = n.AttrInts("starts", nil)
		ends = n.AttrInts("ends", nil)
		axes = n.AttrInts("axes", nil)
	} else {
		var err error
		if err = kern.Need(n, in, 3); err != nil {
			return nil, err
		}
		if starts, err = readInts1D(n, in[1], "starts"); err != nil {
			return nil, err
		}
		if ends, err = readInts1D(n, in[2], "ends"); err != nil {
			return nil, err
		}
		if t := kern.Opt(in, 3); t != nil {
			if axes, err = readInts1D(n, t, "axes"); err != nil {
				return nil, err
			}
		}
		if t := kern.Opt(in, 4); t != nil {
			if steps, err = readInts1D(n, t, "steps"); err != nil {
				return nil, err
			}
		}
	}
	r := x.Rank()
	if len(starts) != len(ends) {
		return nil, n.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		if len(starts) > r {
			return nil, n.Errorf("starts %v has more entries than the input %v has axes", starts, x.Shape)
		}
		axes = make([]int64, len(starts))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(axes) != len(starts) {
		return nil, n.Errorf("axes %v and starts %v differ in length", axes, starts)
	}
	if steps != nil && len(steps) != len(starts) {
		return nil, n.Errorf("steps %v and starts %v differ in length", steps, starts)
	}
	ax, err := normAxes(n, axes, r)
	if err != nil {
		return nil, err
	}
	st := graph.Strides(x.Shape)
	shape := append([]int{}, x.Shape...)
	maps := identityMaps(x.Shape)
	for i, a := range ax {
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, n.Errorf("steps %v has a 0", steps)
		}
		start, count := sliceRange(starts[i], ends[i], step, int64(x.Shape[a]))
		shape[a] = int(count)
		maps[a] = arith(int(count), int(start)*st[a], int(step)*st[a])
	}
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
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
