package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("ReverseSequence", reverseSequenceKernel)
}

// reverseSequenceKernel implements ReverseSequence: for each batch entry b,
// the first sequence_lens[b] steps along time_axis are reversed and the rest
// copied. batch_axis and time_axis are 0 and 1 in some order.
func reverseSequenceKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	if x.Rank() < 2 {
		return nil, n.Errorf("input must have rank 2 or more, has shape %v", x.Shape)
	}
	batchAxis, timeAxis := n.AttrInt("batch_axis", 1), n.AttrInt("time_axis", 0)
	if !(batchAxis == 0 && timeAxis == 1 || batchAxis == 1 && timeAxis == 0) {
		return nil, n.Errorf("batch_axis %d and time_axis %d must be 0 and 1 in some order", batchAxis, timeAxis)
	}
	batch, steps := x.Shape[batchAxis], x.Shape[timeAxis]
	lens, err := readInts1D(n, in[1], "sequence_lens")
	if err != nil {
		return nil, err
	}
	if len(lens) != batch {
		return nil, n.Errorf("sequence_lens has %d entries, the batch axis %d of input %v has %d", len(lens), batchAxis, x.Shape, batch)
	}
	for b, l := range lens {
		if l < 0 || l > int64(steps) {
			return nil, n.Errorf("sequence_lens[%d] = %d is out of range [0, %d]", b, l, steps)
		}
	}
	// The first two axes, combined, map to their source; the rest is copied.
	d0, d1 := x.Shape[0], x.Shape[1]
	inner := prod(x.Shape[2:])
	table := make([]int, d0*d1)
	for i0 := 0; i0 < d0; i0++ {
		for i1 := 0; i1 < d1; i1++ {
			b, t := i1, i0
			if batchAxis == 0 {
				b, t = i0, i1
			}
			if l := int(lens[b]); t < l {
				t = l - 1 - t
			}
			s0, s1 := t, b
			if batchAxis == 0 {
				s0, s1 = b, t
			}
			table[i0*d1+i1] = (s0*d1 + s1) * inner
		}
	}
	out, err := gatherInto(n, x, x.Shape, 0, []axisMap{tabled(table), arith(inner, 0, 1)}, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}
