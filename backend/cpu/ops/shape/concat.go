package shape

import (
	"strconv"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Concat", concatKernel)
	kern.RegisterHalf("Split", splitKernel)
}

// concatKernel implements Concat: the inputs joined along axis (the
// attribute is required from opset 4; Concat-1 defaults it to 1).
func concatKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) == 0 {
		return nil, n.Errorf("needs at least one input")
	}
	for i, t := range in {
		// (the input's name is built only for the error)
		if t == nil || t.Validate() != nil {
			return nil, checkData(n, t, "inputs["+strconv.Itoa(i)+"]")
		}
	}
	first := in[0]
	r := first.Rank()
	if r == 0 {
		return nil, n.Errorf("cannot concatenate scalars")
	}
	axisAttr := n.Attr("axis")
	axis := int64(1)
	switch {
	case axisAttr != nil:
		axis = axisAttr.I
	case ctx != nil && ctx.Opset >= 4:
		return nil, n.Errorf("attribute axis is required")
	}
	ax, err := normAxis(n, axis, r)
	if err != nil {
		return nil, err
	}
	// Shape and the inputs' data and run lengths live in the node's
	// state between runs.
	st := kern.State[concatState](n)
	shape := append(st.shape[:0], first.Shape...)
	st.shape = shape
	shape[ax] = 0
	for i, t := range in {
		if t.DType != first.DType {
			return nil, n.Errorf("input %d has dtype %v, input 0 has %v", i, t.DType, first.DType)
		}
		if t.Rank() != r {
			return nil, n.Errorf("input %d has shape %v, input 0 has %v: ranks differ", i, t.Shape, first.Shape)
		}
		for a, d := range t.Shape {
			if a != ax && d != first.Shape[a] {
				return nil, n.Errorf("input %d has shape %v, input 0 has %v: dims differ off axis %d", i, t.Shape, first.Shape, ax)
			}
		}
		shape[ax] += t.Shape[ax]
	}
	out, err := kern.NewUninit(n, first.DType, shape) // every element is written
	if err != nil {
		return nil, err
	}
	outer := prod(shape[:ax])
	inner := prod(shape[ax+1:])
	srcs, runs := st.srcs[:0], st.runs[:0]
	for _, t := range in {
		srcs = append(srcs, t.Data)
		runs = append(runs, t.Shape[ax]*inner)
	}
	st.srcs, st.runs = srcs, runs
	err = st.run(out.Data, outer)
	clear(srcs) // (the inputs' data is not kept past the call)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	return kern.Results(n, out), nil
}

// concatState is what a Concat node keeps between runs, and its copy in
// flight: a chunk copies a range of the output's elements.
type concatState struct {
	shape, runs []int
	srcs        []any
	dst         any
	outer       int
}

// run copies st.srcs into dst (concatInto), split into contiguous element
// ranges over the kernel pool when the output is large.
func (st *concatState) run(dst any, outer int) error {
	size := dataLen(dst)
	w := copyWorkers(size, size)
	if w <= 1 {
		return concatInto(dst, st.srcs, st.runs, outer)
	}
	// The element types are checked once here, not in the chunks.
	if err := concatRange(dst, st.srcs, st.runs, outer, 0, 0); err != nil {
		return err
	}
	st.dst, st.outer = dst, outer
	kern.RunTask("shape worker", size, w, st)
	st.dst = nil
	return nil
}

// Chunk copies the output elements [lo, hi).
func (st *concatState) Chunk(lo, hi int) {
	if err := concatRange(st.dst, st.srcs, st.runs, st.outer, lo, hi); err != nil {
		panic(err) // (checked by run)
	}
}

// splitKernel implements Split. The part sizes come from input 1 (opset 13
// on, and optionally Split-1), the "split" attribute (opsets 2-12), or
// otherwise equal parts, one per output; from opset 18 num_outputs parts of
// ceil(dim/num_outputs), the last one smaller.
func splitKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("cannot split a scalar")
	}
	ax, err := normAxis(n, n.AttrInt("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	dim := x.Shape[ax]
	nout := len(n.Outputs)
	var sizes []int64
	switch {
	case kern.Opt(in, 1) != nil:
		if sizes, err = readInts1D(n, in[1], "split"); err != nil {
			return nil, err
		}
	case n.HasAttr("split"):
		sizes = n.AttrInts("split", nil)
	case n.HasAttr("num_outputs"):
		k := n.AttrInt("num_outputs", 0)
		if k <= 0 || k != int64(nout) {
			return nil, n.Errorf("num_outputs %d does not match the %d outputs", k, nout)
		}
		chunk := (int64(dim) + k - 1) / k
		sizes = make([]int64, k)
		for i := range sizes {
			sizes[i] = min(chunk, max(int64(dim)-int64(i)*chunk, 0))
		}
		if last := int64(dim) - chunk*(k-1); last < 0 {
			return nil, n.Errorf("axis %d of size %d cannot be split into %d parts of %d", ax, dim, k, chunk)
		}
	default:
		if nout == 0 || dim%nout != 0 {
			return nil, n.Errorf("axis %d of size %d cannot be split into %d equal parts", ax, dim, nout)
		}
		sizes = make([]int64, nout)
		for i := range sizes {
			sizes[i] = int64(dim / nout)
		}
	}
	if len(sizes) != nout {
		return nil, n.Errorf("split %v has %d parts, the node has %d outputs", sizes, len(sizes), nout)
	}
	total := int64(0)
	for _, s := range sizes {
		if s < 0 {
			return nil, n.Errorf("split %v has a negative part", sizes)
		}
		total += s
	}
	if total != int64(dim) {
		return nil, n.Errorf("split %v sums to %d, axis %d of input %v has size %d", sizes, total, ax, x.Shape, dim)
	}
	outer := prod(x.Shape[:ax])
	inner := prod(x.Shape[ax+1:])
	outs := make([]*graph.Tensor, nout)
	start := 0
	for i, s := range sizes {
		shape := append([]int{}, x.Shape...)
		shape[ax] = int(s)
		maps := []axisMap{arith(outer, 0, dim*inner), arith(int(s)*inner, start*inner, 1)}
		if outs[i], err = gatherInto(n, x, shape, 0, maps, nil); err != nil {
			return nil, err
		}
		start += int(s)
	}
	return outs, nil
}
