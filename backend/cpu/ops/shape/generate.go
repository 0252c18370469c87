package shape

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("ConstantOfShape", constantOfShapeKernel)
	kern.RegisterHalf("Range", rangeKernel)
	kern.RegisterHalf("OneHot", oneHotKernel)
	kern.RegisterHalf("EyeLike", eyeLikeKernel)
	kern.RegisterHalf("NonZero", nonZeroKernel)
	kern.RegisterHalf("Trilu", triluKernel)
}

// constantOfShapeKernel implements ConstantOfShape: a tensor of the given
// shape filled with the one-element "value" attribute (float32 0 when absent).
func constantOfShapeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	want, err := readInts1D(n, in[0], "input")
	if err != nil {
		return nil, err
	}
	shape := make([]int, len(want))
	for i, d := range want {
		if d < 0 || d > graph.MaxElements {
			return nil, n.Errorf("shape %v has an invalid dim %d", want, d)
		}
		shape[i] = int(d)
	}
	value := graph.Zeros(graph.Float32, 1)
	if a := n.Attr("value"); a != nil && a.T != nil {
		value = a.T
		if err := checkData(n, value, "value (attribute)"); err != nil {
			return nil, err
		}
		if value.Size() != 1 {
			return nil, n.Errorf("attribute value must hold one element, has shape %v", value.Shape)
		}
	}
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	out, err := kern.New(n, value.DType, shape)
	if err != nil {
		return nil, err
	}
	fillWith(out, value)
	return []*graph.Tensor{out}, nil
}

// fillWith sets every element of out (freshly zeroed) to value's single
// element. Zero values need no work, which is the common case.
func fillWith(out, value *graph.Tensor) {
	switch dst := out.Data.(type) {
	case []float32:
		fillSlice(dst, value.Data.([]float32)[0])
	case []float64:
		fillSlice(dst, value.Data.([]float64)[0])
	case []int64:
		fillSlice(dst, value.Data.([]int64)[0])
	case []int32:
		fillSlice(dst, value.Data.([]int32)[0])
	case []int16:
		fillSlice(dst, value.Data.([]int16)[0])
	case []int8:
		fillSlice(dst, value.Data.([]int8)[0])
	case []uint8:
		fillSlice(dst, value.Data.([]uint8)[0])
	case []uint16:
		fillSlice(dst, value.Data.([]uint16)[0])
	case []uint32:
		fillSlice(dst, value.Data.([]uint32)[0])
	case []uint64:
		fillSlice(dst, value.Data.([]uint64)[0])
	case []bool:
		fillSlice(dst, value.Data.([]bool)[0])
	case []string:
		fillSlice(dst, value.Data.([]string)[0])
	}
}

func fillSlice[T comparable](s []T, v T) {
	var zero T
	if v == zero {
		return
	}
	for i := range s {
		s[i] = v
	}
}

// rangeKernel implements Range: start, start+delta, ... up to (excluding)
// limit; ceil((limit-start)/delta) elements, or none.
func rangeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	for i, what := range []string{"start", "limit", "delta"} {
		if err := checkData(n, in[i], what); err != nil {
			return nil, err
		}
		if in[i].Size() != 1 {
			return nil, n.Errorf("%s must be a scalar, has shape %v", what, in[i].Shape)
		}
		if in[i].DType != in[0].DType {
			return nil, n.Errorf("%s has dtype %v, start %v", what, in[i].DType, in[0].DType)
		}
	}
	d := in[0].DType
	switch {
	case d.IsFloat():
		start, limit, delta := in[0].Float(0), in[1].Float(0), in[2].Float(0)
		if delta == 0 {
			return nil, n.Errorf("delta is 0")
		}
		c := math.Ceil((limit - start) / delta)
		if math.IsNaN(c) || c > graph.MaxElements {
			return nil, n.Errorf("range from %g to %g by %g has too many elements", start, limit, delta)
		}
		count := int(max(c, 0))
		out, err := kern.New(n, d, []int{count})
		if err != nil {
			return nil, err
		}
		if f, ok := out.Data.([]float32); ok {
			s, dl := float32(start), float32(delta)
			for i := range f {
				f[i] = s + float32(i)*dl
			}
		} else {
			for i := 0; i < count; i++ {
				out.SetFloat(i, start+float64(i)*delta)
			}
		}
		return []*graph.Tensor{out}, nil
	case d.IsInt():
		start, limit, delta := in[0].Int(0), in[1].Int(0), in[2].Int(0)
		if delta == 0 {
			return nil, n.Errorf("delta is 0")
		}
		span := limit - start
		count := int64(0)
		if span != 0 && (span > 0) == (delta > 0) {
			// ceil(span/delta) for same-sign span and delta.
			count = (span-sign(delta))/delta + 1
		}
		if count > graph.MaxElements {
			return nil, n.Errorf("range from %d to %d by %d has too many elements", start, limit, delta)
		}
		out, err := kern.New(n, d, []int{int(count)})
		if err != nil {
			return nil, err
		}
		for i := int64(0); i < count; i++ {
			kern.SetInt(out, int(i), start+i*delta)
		}
		return []*graph.Tensor{out}, nil
	}
	return nil, n.Errorf("dtype %v is not supported", d)
}

func sign(v int64) int64 {
	if v < 0 {
		return -1
	}
	return 1
}

// oneHotKernel implements OneHot: a new axis of size depth holding
// values[1] where it equals the index and values[0] elsewhere. Negative
// indices count from depth; indices outside [-depth, depth) are all off.
func oneHotKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	ind, depthT, values := in[0], in[1], in[2]
	for i, what := range []string{"indices", "depth", "values"} {
		if err := checkData(n, in[i], what); err != nil {
			return nil, err
		}
	}
	if depthT.Size() != 1 {
		return nil, n.Errorf("depth must hold one element, has shape %v", depthT.Shape)
	}
	if values.Size() != 2 {
		return nil, n.Errorf("values must hold [off, on], has shape %v", values.Shape)
	}
	depth := int64(depthT.Float(0))
	if depth <= 0 || depth > graph.MaxElements {
		return nil, n.Errorf("depth %g must be positive", depthT.Float(0))
	}
	r := ind.Rank()
	axis := n.AttrInt("axis", -1)
	if axis < int64(-r-1) || axis > int64(r) {
		return nil, n.Errorf("axis %d is out of range for output rank %d", axis, r+1)
	}
	if axis < 0 {
		axis += int64(r + 1)
	}
	shape := make([]int, 0, r+1)
	shape = append(shape, ind.Shape[:axis]...)
	shape = append(shape, int(depth))
	shape = append(shape, ind.Shape[axis:]...)
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	// Indices as int64 (non-integer indices are truncated).
	var idx []int64
	if ind.DType.IsInt() {
		var err error
		if idx, err = readInts(n, ind, "indices"); err != nil {
			return nil, err
		}
	} else {
		idx = make([]int64, ind.Size())
		for i := range idx {
			f := ind.Float(i)
			if math.IsNaN(f) || math.Abs(f) > float64(graph.MaxElements) {
				idx[i] = -1 - depth // out of range: all off
				continue
			}
			idx[i] = int64(f)
		}
	}
	outer := prod(ind.Shape[:axis])
	inner := prod(ind.Shape[axis:])
	sel := make([]int, prod(shape))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			v := idx[o*inner+i]
			if v < 0 {
				v += depth
			}
			if v >= 0 && v < depth {
				sel[(o*int(depth)+int(v))*inner+i] = 1
			}
		}
	}
	out, err := gatherInto(n, values, shape, 0, []axisMap{tabled(sel)}, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}

// eyeLikeKernel implements EyeLike: a 2-D tensor shaped like the input with
// ones on the k-th diagonal, of the dtype attribute (the input's by default).
func eyeLikeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if x == nil {
		return nil, n.Errorf("input is required")
	}
	if x.Rank() != 2 {
		return nil, n.Errorf("input must be 2-D, has shape %v", x.Shape)
	}
	d := x.DType
	if v := n.AttrInt("dtype", 0); v != 0 {
		d = graph.DType(v)
	}
	if d == graph.String {
		return nil, n.Errorf("dtype %v is not supported", d)
	}
	out, err := kern.New(n, d, x.Shape)
	if err != nil {
		return nil, err
	}
	rows, cols := int64(x.Shape[0]), int64(x.Shape[1])
	k := n.AttrInt("k", 0)
	for i := max(0, -k); i < rows && i+k < cols; i++ {
		kern.SetInt(out, int(i*cols+i+k), 1)
	}
	return []*graph.Tensor{out}, nil
}

// nonZeroPositions lists the flat positions of t's non-zero elements (true,
// non-empty strings, and NaN count as non-zero; -0 does not).
func nonZeroPositions(t *graph.Tensor) []int {
	switch d := t.Data.(type) {
	case []float32:
		return nonZeroOf(d)
	case []float64:
		return nonZeroOf(d)
	case []int8:
		return nonZeroOf(d)
	case []int16:
		return nonZeroOf(d)
	case []int32:
		return nonZeroOf(d)
	case []int64:
		return nonZeroOf(d)
	case []uint8:
		return nonZeroOf(d)
	case []uint16:
		if t.DType == graph.Float16 || t.DType == graph.BFloat16 {
			var out []int
			for i, v := range d {
				if v&0x7fff != 0 {
					out = append(out, i)
				}
			}
			return out
		}
		return nonZeroOf(d)
	case []uint32:
		return nonZeroOf(d)
	case []uint64:
		return nonZeroOf(d)
	case []bool:
		return nonZeroOf(d)
	case []string:
		return nonZeroOf(d)
	}
	return nil
}

func nonZeroOf[T comparable](d []T) []int {
	var zero T
	var out []int
	for i, v := range d {
		if v != zero {
			out = append(out, i)
		}
	}
	return out
}

// nonZeroKernel implements NonZero: the coordinates of the non-zero
// elements, one row per axis, as int64 [rank, count]. A scalar is treated as
// a 1-element vector, as numpy does.
func nonZeroKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "X"); err != nil {
		return nil, err
	}
	shape := x.Shape
	if len(shape) == 0 {
		shape = []int{1}
	}
	pos := nonZeroPositions(x)
	r, c := len(shape), len(pos)
	out := make([]int64, r*c)
	for j, p := range pos {
		for a := r - 1; a >= 0; a-- {
			out[a*c+j] = int64(p % shape[a])
			p /= shape[a]
		}
	}
	return []*graph.Tensor{{DType: graph.Int64, Shape: []int{r, c}, Data: out}}, nil
}

// triluKernel implements Trilu: the upper (default) or lower triangle of the
// last two axes, relative to the k-th diagonal; the rest is zero.
func triluKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "input"); err != nil {
		return nil, err
	}
	r := x.Rank()
	if r < 2 {
		return nil, n.Errorf("input must have rank 2 or more, has shape %v", x.Shape)
	}
	k := int64(0)
	if t := kern.Opt(in, 1); t != nil {
		var err error
		if k, err = readScalarInt(n, t, "k"); err != nil {
			return nil, err
		}
	}
	upper := n.AttrInt("upper", 1) != 0
	rows, cols := x.Shape[r-2], x.Shape[r-1]
	batch := prod(x.Shape[:r-2])
	spans := make([]span, 0, 2*batch*rows)
	for b := 0; b < batch; b++ {
		for i := 0; i < rows; i++ {
			row := (b*rows + i) * cols
			// Columns [lo, hi) keep their value.
			lo, hi := int64(0), int64(cols)
			if upper {
				lo = min(max(int64(i)+k, 0), int64(cols))
			} else {
				hi = min(max(int64(i)+k+1, 0), int64(cols))
			}
			if lo > 0 {
				spans = append(spans, span{dst: row, n: int(lo), fill: true})
			}
			if hi > lo {
				spans = append(spans, span{dst: row + int(lo), src: row + int(lo), n: int(hi - lo)})
			}
			if hi < int64(cols) {
				spans = append(spans, span{dst: row + int(hi), n: cols - int(hi), fill: true})
			}
		}
	}
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	if err := copySpans(out.Data, x.Data, spans, nil); err != nil {
		return nil, n.Errorf("%v", err)
	}
	return []*graph.Tensor{out}, nil
}
