package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Reshape", reshapeKernel)
	kern.RegisterHalf("Flatten", flattenKernel)
	kern.RegisterHalf("Squeeze", squeezeKernel)
	kern.RegisterHalf("Unsqueeze", unsqueezeKernel)
	kern.RegisterHalf("Shape", shapeKernel)
	kern.RegisterHalf("Size", sizeKernel)
}

// reshapeKernel implements Reshape. The new shape comes from input 1 (the
// "shape" attribute before opset 5); a 0 copies the input's dim at that
// position unless allowzero=1 (opset 14), and one -1 is inferred. The output
// shares the input's data.
func reshapeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	var want []int64
	if t := kern.Opt(in, 1); t != nil {
		var err error
		if want, err = readInts1D(n, t, "shape"); err != nil {
			return nil, err
		}
	} else if a := n.Attr("shape"); a != nil {
		want = a.Ints
	} else {
		return nil, n.Errorf("input shape is required")
	}
	shape, err := reshapeTarget(n, x.Shape, want, n.AttrInt("allowzero", 0) != 0)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{kern.Reshape(x, shape)}, nil
}

// reshapeTarget resolves Reshape's requested shape against the input shape.
func reshapeTarget(n *graph.Node, in []int, want []int64, allowZero bool) ([]int, error) {
	size := prod(in)
	out := make([]int, len(want))
	infer := -1
	known := 1
	for i, d := range want {
		switch {
		case d == -1:
			if infer >= 0 {
				return nil, n.Errorf("shape %v has more than one -1", want)
			}
			infer = i
			continue
		case d == 0 && !allowZero:
			if i >= len(in) {
				return nil, n.Errorf("shape %v copies dim %d (0) but the input %v has rank %d", want, i, in, len(in))
			}
			out[i] = in[i]
		case d < 0:
			return nil, n.Errorf("shape %v has a negative dim %d", want, d)
		case d > graph.MaxElements:
			return nil, n.Errorf("shape %v has a dim past %d", want, int64(graph.MaxElements))
		default:
			out[i] = int(d)
		}
		if out[i] != 0 && known > graph.MaxElements/out[i] {
			return nil, n.Errorf("shape %v is too large", want)
		}
		known *= out[i]
	}
	if infer >= 0 {
		if known == 0 || size%known != 0 {
			return nil, n.Errorf("cannot reshape %v (%d elements) to %v: the -1 dim cannot be inferred", in, size, want)
		}
		out[infer] = size / known
		known *= out[infer]
	}
	if known != size {
		return nil, n.Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in, size, out, known)
	}
	return out, nil
}

// flattenKernel implements Flatten: the dims before axis become the first
// output dim and the rest the second. The output shares the input's data.
func flattenKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	r := x.Rank()
	axis := n.AttrInt("axis", 1)
	if axis < int64(-r) || axis > int64(r) {
		return nil, n.Errorf("axis %d is out of range [%d, %d] for input %v", axis, -r, r, x.Shape)
	}
	if axis < 0 {
		axis += int64(r)
	}
	return []*graph.Tensor{kern.Reshape(x, []int{prod(x.Shape[:axis]), prod(x.Shape[axis:])})}, nil
}

// axesInput reads the axes of Squeeze/Unsqueeze: input 1 from opset 13, the
// "axes" attribute before. ok is false when neither is given.
func axesInput(n *graph.Node, in []*graph.Tensor) (axes []int64, ok bool, err error) {
	if t := kern.Opt(in, 1); t != nil {
		axes, err = readInts1D(n, t, "axes")
		return axes, true, err
	}
	if a := n.Attr("axes"); a != nil {
		return a.Ints, true, nil
	}
	return nil, false, nil
}

// squeezeKernel implements Squeeze: it removes the given axes (which must
// have size 1), or every size-1 axis when none are given.
func squeezeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	axes, given, err := axesInput(n, in)
	if err != nil {
		return nil, err
	}
	drop := make([]bool, x.Rank())
	if given {
		ax, err := normAxes(n, axes, x.Rank())
		if err != nil {
			return nil, err
		}
		for _, a := range ax {
			if x.Shape[a] != 1 {
				return nil, n.Errorf("cannot squeeze axis %d of shape %v: its size is not 1", a, x.Shape)
			}
			drop[a] = true
		}
	} else {
		for a, d := range x.Shape {
			drop[a] = d == 1
		}
	}
	shape := make([]int, 0, x.Rank())
	for a, d := range x.Shape {
		if !drop[a] {
			shape = append(shape, d)
		}
	}
	return []*graph.Tensor{kern.Reshape(x, shape)}, nil
}

// unsqueezeKernel implements Unsqueeze: it inserts size-1 axes at the given
// positions of the output (negative positions count from the output's end).
func unsqueezeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	axes, given, err := axesInput(n, in)
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, n.Errorf("axes are required")
	}
	r := x.Rank() + len(axes)
	ax, err := normAxes(n, axes, r)
	if err != nil {
		return nil, err
	}
	ones := make([]bool, r)
	for _, a := range ax {
		ones[a] = true
	}
	shape := make([]int, r)
	j := 0
	for a := range shape {
		if ones[a] {
			shape[a] = 1
			continue
		}
		shape[a] = x.Shape[j]
		j++
	}
	return []*graph.Tensor{kern.Reshape(x, shape)}, nil
}

// shapeKernel implements Shape, with the start/end attributes of opset 15
// (negative values count from the end; both are clamped to [0, rank]).
func shapeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if x == nil {
		return nil, n.Errorf("input data is required")
	}
	r := int64(x.Rank())
	clamp := func(v int64) int64 {
		if v < 0 {
			v += r
		}
		return min(max(v, 0), r)
	}
	start := clamp(n.AttrInt("start", 0))
	end := clamp(n.AttrInt("end", r))
	out := make([]int64, 0, max(end-start, 0))
	for i := start; i < end; i++ {
		out = append(out, int64(x.Shape[i]))
	}
	return []*graph.Tensor{int64Tensor(out)}, nil
}

// sizeKernel implements Size: the element count as an int64 scalar.
func sizeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if x == nil {
		return nil, n.Errorf("input data is required")
	}
	return []*graph.Tensor{{DType: graph.Int64, Shape: []int{}, Data: []int64{int64(x.Size())}}}, nil
}
