package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Gather", gatherKernel)
	kern.RegisterHalf("GatherElements", gatherElementsKernel)
	kern.RegisterHalf("GatherND", gatherNDKernel)
	kern.RegisterHalf("Compress", compressKernel)
}

// readIndices reads an index tensor whose values address an axis of size
// dim: negative values count from the end, and anything outside [-dim, dim)
// is an error.
func readIndices(n *graph.Node, t *graph.Tensor, dim int, what string) ([]int, error) {
	return readIndicesInto(n, nil, t, dim, what)
}

// readIndicesInto is readIndices appending to dst[:0] (a node's scratch).
func readIndicesInto(n *graph.Node, dst []int, t *graph.Tensor, dim int, what string) ([]int, error) {
	v, err := readInts(n, t, what)
	if err != nil {
		return nil, err
	}
	out := append(dst[:0], make([]int, len(v))...)
	d := int64(dim)
	for i, x := range v {
		if x < -d || x >= d {
			return nil, n.Errorf("%s value %d (element %d) is out of range [%d, %d)", what, x, i, -d, d)
		}
		if x < 0 {
			x += d
		}
		out[i] = int(x)
	}
	return out, nil
}

// stridedOffsets lists, for every element of shape in row-major order, the
// offset Σ i_a*strides[a].
func stridedOffsets(shape, strides []int) []int {
	out := make([]int, prod(shape))
	if len(out) == 0 {
		return out
	}
	r := len(shape)
	idx := make([]int, r)
	off := 0
	for p := range out {
		out[p] = off
		for a := r - 1; a >= 0; a-- {
			idx[a]++
			off += strides[a]
			if idx[a] < shape[a] {
				break
			}
			off -= strides[a] * idx[a]
			idx[a] = 0
		}
	}
	return out
}

// gatherKernel implements Gather: output[..., j..., ...] = data[..., indices[j...], ...]
// along axis, with negative indices counting from the end.
func gatherKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, ind := in[0], in[1]
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	ax, err := normAxis(n, n.AttrInt("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	dim := x.Shape[ax]
	st := kern.State[gatherState](n)
	idx, err := readIndicesInto(n, st.idx, ind, dim, "indices")
	if err != nil {
		return nil, err
	}
	st.idx = idx
	shape := st.shape[:0]
	shape = append(shape, x.Shape[:ax]...)
	shape = append(shape, ind.Shape...)
	shape = append(shape, x.Shape[ax+1:]...)
	st.shape = shape
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	outer := prod(x.Shape[:ax])
	inner := prod(x.Shape[ax+1:])
	for i, v := range idx {
		idx[i] = v * inner
	}
	maps := [3]axisMap{arith(outer, 0, dim*inner), tabled(idx), arith(inner, 0, 1)}
	out, err := gatherInto(n, x, shape, 0, maps[:], nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// gatherState is what a Gather node keeps between runs.
type gatherState struct{ shape, idx []int }

// elementOffsets computes, for GatherElements and ScatterElements, the flat
// data offset each element of indices addresses: its own coordinates with
// the axis coordinate replaced by its value.
func elementOffsets(n *graph.Node, data, ind *graph.Tensor, ax int) ([]int, error) {
	if ind.Rank() != data.Rank() {
		return nil, n.Errorf("indices %v and data %v must have the same rank", ind.Shape, data.Shape)
	}
	for a, d := range ind.Shape {
		if a != ax && d > data.Shape[a] {
			return nil, n.Errorf("indices %v exceed data %v on axis %d", ind.Shape, data.Shape, a)
		}
	}
	idx, err := readIndices(n, ind, data.Shape[ax], "indices")
	if err != nil {
		return nil, err
	}
	st := graph.Strides(data.Shape)
	axStride := st[ax]
	st[ax] = 0
	offs := stridedOffsets(ind.Shape, st)
	for i, v := range idx {
		offs[i] += v * axStride
	}
	return offs, nil
}

// gatherElementsKernel implements GatherElements: output has the indices'
// shape and output[i][j][k] = data[i][indices[i][j][k]][k] (for axis 1).
func gatherElementsKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, ind := in[0], in[1]
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	ax, err := normAxis(n, n.AttrInt("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	offs, err := elementOffsets(n, x, ind, ax)
	if err != nil {
		return nil, err
	}
	out, err := gatherInto(n, x, ind.Shape, 0, []axisMap{tabled(offs)}, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}

// ndOffsets computes, for GatherND and ScatterND, the flat data offset of
// the slice each index tuple (the last axis of indices) addresses, with
// batchDims leading axes shared by data and indices. It returns the offsets
// and the size of one slice.
func ndOffsets(n *graph.Node, data, ind *graph.Tensor, batchDims int) ([]int, int, error) {
	r, q := data.Rank(), ind.Rank()
	if q == 0 {
		return nil, 0, n.Errorf("indices must have rank 1 or more")
	}
	if batchDims < 0 || batchDims >= min(r, q) {
		return nil, 0, n.Errorf("batch_dims %d must be in [0, %d) for data %v and indices %v", batchDims, min(r, q), data.Shape, ind.Shape)
	}
	k := ind.Shape[q-1]
	if k > r-batchDims {
		return nil, 0, n.Errorf("index tuples of length %d address more than the %d axes of data %v after batch_dims %d", k, r-batchDims, data.Shape, batchDims)
	}
	for a := 0; a < batchDims; a++ {
		if ind.Shape[a] != data.Shape[a] {
			return nil, 0, n.Errorf("batch dims of indices %v and data %v differ", ind.Shape, data.Shape)
		}
	}
	raw, err := readInts(n, ind, "indices")
	if err != nil {
		return nil, 0, err
	}
	st := graph.Strides(data.Shape)
	slice := prod(data.Shape[batchDims+k:])
	batch := prod(data.Shape[:batchDims])
	batchStride := prod(data.Shape[batchDims:])
	tuples := prod(ind.Shape[:q-1])
	perBatch := 0
	if batch > 0 {
		perBatch = tuples / batch
	}
	offs := make([]int, tuples)
	for t := range offs {
		off := 0
		if perBatch > 0 {
			off = t / perBatch * batchStride
		}
		for j := 0; j < k; j++ {
			v := raw[t*k+j]
			d := int64(data.Shape[batchDims+j])
			if v < -d || v >= d {
				return nil, 0, n.Errorf("index %d (tuple %d, position %d) is out of range [%d, %d)", v, t, j, -d, d)
			}
			if v < 0 {
				v += d
			}
			off += int(v) * st[batchDims+j]
		}
		offs[t] = off
	}
	return offs, slice, nil
}

// gatherNDKernel implements GatherND: each index tuple in the last axis of
// indices selects a slice of data, after batch_dims shared leading axes.
func gatherNDKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, ind := in[0], in[1]
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	b := int(n.AttrInt("batch_dims", 0))
	offs, slice, err := ndOffsets(n, x, ind, b)
	if err != nil {
		return nil, err
	}
	k := ind.Shape[ind.Rank()-1]
	shape := append(append([]int{}, ind.Shape[:ind.Rank()-1]...), x.Shape[b+k:]...)
	out, err := gatherInto(n, x, shape, 0, []axisMap{tabled(offs), arith(slice, 0, 1)}, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}

// compressKernel implements Compress: the slices along axis (of the
// flattened input when axis is absent) whose condition is true.
func compressKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, cond := in[0], in[1]
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	if err := checkData(n, cond, "condition"); err != nil {
		return nil, err
	}
	if cond.Rank() != 1 {
		return nil, n.Errorf("condition must be 1-D, has shape %v", cond.Shape)
	}
	shape := []int{x.Size()}
	ax := 0
	if a := n.Attr("axis"); a != nil {
		var err error
		if ax, err = normAxis(n, a.I, x.Rank()); err != nil {
			return nil, err
		}
		shape = append([]int{}, x.Shape...)
	}
	dim := shape[ax]
	inner := prod(shape[ax+1:])
	var sel []int
	for i := 0; i < cond.Size(); i++ {
		if cond.Float(i) == 0 {
			continue
		}
		if i >= dim {
			return nil, n.Errorf("condition is true at %d, past the size %d of axis %d", i, dim, ax)
		}
		sel = append(sel, i*inner)
	}
	shape[ax] = len(sel)
	maps := []axisMap{arith(prod(shape[:ax]), 0, dim*inner), tabled(sel), arith(inner, 0, 1)}
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}
