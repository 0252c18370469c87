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
	var buf [8]int
	shape, err := reshapeTarget(n, buf[:0], x.Shape, want, n.AttrInt("allowzero", 0) != 0)
	if err != nil {
		return nil, err
	}
	// The node's own header (reused on its next run), sharing x's data.
	return kern.Results(n, kern.View(n, x, shape)), nil
}

// reshapeTarget resolves Reshape's requested shape against the input shape,
// appending it to dst[:0].
func reshapeTarget(n *graph.Node, dst, in []int, want []int64, allowZero bool) ([]int, error) {
	size := prod(in)
	out := append(dst[:0], make([]int, len(want))...)
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
		return nil, n.Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in, size, append([]int(nil), out...), known)
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
	shape := [2]int{prod(x.Shape[:axis]), prod(x.Shape[axis:])}
	return kern.Results(n, kern.View(n, x, shape[:])), nil
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
	// Scratch of rank up to 8 on the stack.
	var dropBuf [8]bool
	var axBuf, shapeBuf [8]int
	drop := dropBuf[:0]
	if x.Rank() <= len(dropBuf) {
		drop = dropBuf[:x.Rank()]
	} else {
		drop = make([]bool, x.Rank())
	}
	if given {
		ax, err := normAxesInto(n, axBuf[:0], axes, x.Rank())
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
	shape := shapeBuf[:0]
	for a, d := range x.Shape {
		if !drop[a] {
			shape = append(shape, d)
		}
	}
	return kern.Results(n, kern.View(n, x, shape)), nil
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
	// Scratch of rank up to 8 on the stack.
	var axBuf, shapeBuf [8]int
	var onesBuf [8]bool
	ax, err := normAxesInto(n, axBuf[:0], axes, r)
	if err != nil {
		return nil, err
	}
	ones, shape := onesBuf[:0], shapeBuf[:0]
	if r <= len(onesBuf) {
		ones, shape = onesBuf[:r], shapeBuf[:r]
	} else {
		ones, shape = make([]bool, r), make([]int, r)
	}
	for _, a := range ax {
		ones[a] = true
	}
	j := 0
	for a := range shape {
		if ones[a] {
			shape[a] = 1
			continue
		}
		shape[a] = x.Shape[j]
		j++
	}
	return kern.Results(n, kern.View(n, x, shape)), nil
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
	// The output comes from the node's storage (kern.New, which the
	// memory plan serves) and its shape from the node's state: a training
	// step that reads shapes allocates nothing for them.
	st := kern.State[shapeState](n)
	st.shape = append(st.shape[:0], int(max(end-start, 0)))
	t, err := kern.NewUninit(n, graph.Int64, st.shape) // every element is written
	if err != nil {
		return nil, err
	}
	out := t.Data.([]int64)
	for i := start; i < end; i++ {
		out[i-start] = int64(x.Shape[i])
	}
	return kern.Results(n, t), nil
}

// shapeState is what a Shape node keeps between runs.
type shapeState struct{ shape []int }

// sizeKernel implements Size: the element count as an int64 scalar.
func sizeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if x == nil {
		return nil, n.Errorf("input data is required")
	}
	out, err := kern.New(n, graph.Int64, []int{})
	if err != nil {
		return nil, err
	}
	out.Data.([]int64)[0] = int64(x.Size())
	return kern.Results(n, out), nil
}
