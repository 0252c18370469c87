package sequence

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("SequenceEmpty", sequenceEmptyKernel)
	kern.RegisterHalf("SequenceConstruct", sequenceConstructKernel)
	kern.RegisterHalf("SequenceInsert", sequenceInsertKernel)
	kern.RegisterHalf("SequenceErase", sequenceEraseKernel)
	kern.RegisterHalf("SequenceAt", sequenceAtKernel)
	kern.RegisterHalf("SequenceLength", sequenceLengthKernel)
	kern.RegisterHalf("SplitToSequence", splitToSequenceKernel)
	kern.RegisterHalf("ConcatFromSequence", concatFromSequenceKernel)
}

// sequenceEmptyKernel returns an empty sequence. The dtype attribute is
// checked but not recorded: an empty sequence value carries no element type.
func sequenceEmptyKernel(_ *kern.Context, n *graph.Node, _ []*graph.Tensor) ([]*graph.Tensor, error) {
	d := graph.DType(n.AttrInt("dtype", int64(graph.Float32)))
	if _, err := graph.MakeSlice(d, 0); err != nil || d == graph.SequenceOf || d == graph.OptionalOf {
		return nil, n.Errorf("dtype %v is not a tensor element type", d)
	}
	return []*graph.Tensor{graph.NewSequence(nil)}, nil
}

// sequenceConstructKernel makes a sequence of its inputs, which must all be
// tensors of one dtype.
func sequenceConstructKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) == 0 {
		return nil, n.Errorf("needs at least one input")
	}
	items := make([]*graph.Tensor, len(in))
	for i := range in {
		t, err := seqTensorInput(n, in, i, "element")
		if err != nil {
			return nil, err
		}
		if t.DType != in[0].DType {
			return nil, n.Errorf("input %d has dtype %v, input 0 has %v: a sequence holds one dtype", i, t.DType, in[0].DType)
		}
		items[i] = seqView(t)
	}
	return []*graph.Tensor{graph.NewSequence(items)}, nil
}

// seqPosition reads the optional position input at index i and maps it into
// [0, limit]; a missing position yields def. Negative positions count from
// the back of a sequence of length size.
func seqPosition(n *graph.Node, in []*graph.Tensor, i, size, limit, def int) (int, error) {
	p := kern.Opt(in, i)
	if p == nil {
		return def, nil
	}
	pos, err := seqScalarInt(n, "position", p)
	if err != nil {
		return 0, err
	}
	if pos < -int64(size) || pos > int64(limit) {
		return 0, n.Errorf("position %d is out of range [%d, %d] for a sequence of %d tensors", pos, -size, limit, size)
	}
	if pos < 0 {
		pos += int64(size)
	}
	return int(pos), nil
}

// sequenceInsertKernel inserts a tensor at a position (default: the end).
func sequenceInsertKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	items, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	t, err := seqTensorInput(n, in, 1, "tensor")
	if err != nil {
		return nil, err
	}
	if len(items) > 0 && items[0].DType != t.DType {
		return nil, n.Errorf("tensor has dtype %v, the sequence holds %v", t.DType, items[0].DType)
	}
	pos, err := seqPosition(n, in, 2, len(items), len(items), len(items))
	if err != nil {
		return nil, err
	}
	out := make([]*graph.Tensor, 0, len(items)+1)
	out = append(out, items[:pos]...)
	out = append(out, seqView(t))
	out = append(out, items[pos:]...)
	return []*graph.Tensor{graph.NewSequence(out)}, nil
}

// sequenceEraseKernel removes the tensor at a position (default: the last).
func sequenceEraseKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	items, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, n.Errorf("cannot erase from an empty sequence")
	}
	pos, err := seqPosition(n, in, 1, len(items), len(items)-1, len(items)-1)
	if err != nil {
		return nil, err
	}
	out := make([]*graph.Tensor, 0, len(items)-1)
	out = append(out, items[:pos]...)
	out = append(out, items[pos+1:]...)
	return []*graph.Tensor{graph.NewSequence(out)}, nil
}

// sequenceAtKernel returns the tensor at a position.
func sequenceAtKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	items, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	if kern.Opt(in, 1) == nil {
		return nil, n.Errorf("position (input 1) is required")
	}
	if len(items) == 0 {
		return nil, n.Errorf("cannot read from an empty sequence")
	}
	pos, err := seqPosition(n, in, 1, len(items), len(items)-1, 0)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{seqView(items[pos])}, nil
}

// sequenceLengthKernel returns the number of tensors as an int64 scalar.
func sequenceLengthKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	items, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{{DType: graph.Int64, Shape: []int{}, Data: []int64{int64(len(items))}}}, nil
}

// splitToSequenceKernel cuts a tensor along axis into a sequence. Without a
// split input the parts have length 1 and keepdims=0 drops the axis; a
// scalar split gives parts of that length (the last may be shorter); a 1-D
// split lists the lengths, which must add up to the axis length.
func splitToSequenceKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x, err := seqTensorInput(n, in, 0, "input")
	if err != nil {
		return nil, err
	}
	if len(x.Shape) == 0 {
		return nil, n.Errorf("cannot split a scalar")
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), len(x.Shape))
	if err != nil {
		return nil, err
	}
	dim := x.Shape[axis]
	var lengths []int
	squeeze := false
	switch split := kern.Opt(in, 1); {
	case split == nil:
		lengths = make([]int, dim)
		for i := range lengths {
			lengths[i] = 1
		}
		squeeze = n.AttrInt("keepdims", 1) == 0
	case split.IsContainer() || !split.DType.IsInt():
		return nil, n.Errorf("split must be an int32 or int64 tensor, got %v", split.DType)
	case len(split.Shape) == 0:
		size := int(split.Int(0))
		if size <= 0 {
			return nil, n.Errorf("scalar split %d must be positive", size)
		}
		for left := dim; left > 0; left -= size {
			lengths = append(lengths, min(size, left))
		}
	case len(split.Shape) == 1:
		sum := 0
		lengths = make([]int, split.Size())
		for i := range lengths {
			v := split.Int(i)
			if v < 0 || v > int64(dim) {
				return nil, n.Errorf("split[%d] = %d is out of range [0, %d]", i, v, dim)
			}
			lengths[i] = int(v)
			sum += lengths[i]
		}
		if sum != dim {
			return nil, n.Errorf("split %v adds up to %d, but axis %d has length %d", lengths, sum, axis, dim)
		}
	default:
		return nil, n.Errorf("split must be a scalar or 1-D, has shape %v", split.Shape)
	}
	outer, _, inner := seqAxisSplit(x.Shape, axis)
	items := make([]*graph.Tensor, len(lengths))
	start := 0
	for i, l := range lengths {
		shape := append([]int{}, x.Shape...)
		shape[axis] = l
		part, err := kern.New(n, x.DType, shape)
		if err != nil {
			return nil, err
		}
		if err := seqCopyRuns(part.Data, x.Data, 0, l*inner, start*inner, dim*inner, outer, l*inner); err != nil {
			return nil, n.Errorf("%v", err)
		}
		if squeeze {
			part.Shape = append(shape[:axis:axis], shape[axis+1:]...)
		}
		items[i] = part
		start += l
	}
	return []*graph.Tensor{graph.NewSequence(items)}, nil
}

// concatFromSequenceKernel joins the tensors of a sequence along axis, or,
// with new_axis=1, stacks them along a new axis.
func concatFromSequenceKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	items, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	if n.Attr("axis") == nil {
		return nil, n.Errorf("attribute axis is required")
	}
	if len(items) == 0 {
		return nil, n.Errorf("cannot concatenate an empty sequence")
	}
	first := items[0]
	rank := len(first.Shape)
	newAxis := n.AttrInt("new_axis", 0) != 0
	outRank := rank
	if newAxis {
		outRank++
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), outRank)
	if err != nil {
		return nil, err
	}
	if !newAxis && rank == 0 {
		return nil, n.Errorf("cannot concatenate scalars (set new_axis=1 to stack them)")
	}
	// Every item is viewed as [outer, length along axis, inner].
	total := 0
	lengths := make([]int, len(items))
	for i, t := range items {
		if t.DType != first.DType {
			return nil, n.Errorf("tensor %d has dtype %v, tensor 0 has %v", i, t.DType, first.DType)
		}
		same := len(t.Shape) == rank
		for d := 0; same && d < rank; d++ {
			same = t.Shape[d] == first.Shape[d] || (!newAxis && d == axis)
		}
		if !same {
			return nil, n.Errorf("tensor %d has shape %v, tensor 0 has %v: only the axis %d length may differ", i, t.Shape, first.Shape, axis)
		}
		lengths[i] = 1
		if !newAxis {
			lengths[i] = t.Shape[axis]
		}
		total += lengths[i]
	}
	shape := make([]int, 0, outRank)
	shape = append(shape, first.Shape[:axis]...)
	shape = append(shape, total)
	if newAxis {
		shape = append(shape, first.Shape[axis:]...)
	} else {
		shape = append(shape, first.Shape[axis+1:]...)
	}
	out, err := kern.New(n, first.DType, shape)
	if err != nil {
		return nil, err
	}
	outer, _, inner := seqAxisSplit(shape, axis)
	start := 0
	for i, t := range items {
		l := lengths[i]
		if err := seqCopyRuns(out.Data, t.Data, start*inner, total*inner, 0, l*inner, outer, l*inner); err != nil {
			return nil, n.Errorf("tensor %d: %v", i, err)
		}
		start += l
	}
	return []*graph.Tensor{out}, nil
}
