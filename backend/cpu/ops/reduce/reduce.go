package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// reduceOp names one member of the Reduce* family.
type reduceOp int

const (
	opSum reduceOp = iota
	opMean
	opMax
	opMin
	opProd
	opL1
	opL2
	opLogSum
	opLogSumExp
	opSumSquare
)

func init() {
	for name, op := range map[string]reduceOp{
		"ReduceSum":       opSum,
		"ReduceMean":      opMean,
		"ReduceMax":       opMax,
		"ReduceMin":       opMin,
		"ReduceProd":      opProd,
		"ReduceL1":        opL1,
		"ReduceL2":        opL2,
		"ReduceLogSum":    opLogSum,
		"ReduceLogSumExp": opLogSumExp,
		"ReduceSumSquare": opSumSquare,
	} {
		kern.Register(name, reduceKernel(op))
	}
}

// reducedAxes returns which of rank axes a Reduce* node reduces. The axes
// come from the optional second input (ReduceSum from opset 13, the others
// from 18) or else from the axes attribute (earlier opsets); empty axes mean
// every axis, or none when noop_with_empty_axes is set.
func reducedAxes(n *graph.Node, in []*graph.Tensor, rank int) ([]bool, error) {
	var axes []int64
	if t := kern.Opt(in, 1); t != nil {
		if !t.DType.IsInt() {
			return nil, n.Errorf("axes input has dtype %v, want int64", t.DType)
		}
		for i := 0; i < t.Size(); i++ {
			axes = append(axes, t.Int(i))
		}
	} else {
		axes = n.AttrInts("axes", nil)
	}
	reduced := make([]bool, rank)
	if len(axes) == 0 {
		if n.AttrInt("noop_with_empty_axes", 0) == 0 {
			for d := range reduced {
				reduced[d] = true
			}
		}
		return reduced, nil
	}
	for _, a := range axes {
		ax := int(a)
		if ax < -rank || ax >= rank {
			return nil, n.Errorf("axis %d is out of range for an input of rank %d", a, rank)
		}
		if ax < 0 {
			ax += rank
		}
		if reduced[ax] {
			return nil, n.Errorf("axis %d appears more than once in axes %v", a, axes)
		}
		reduced[ax] = true
	}
	return reduced, nil
}

// reducedShape is shape after reducing the flagged axes: kept as 1 with
// keepdims, dropped otherwise.
func reducedShape(shape []int, reduced []bool, keepdims bool) []int {
	out := make([]int, 0, len(shape))
	for d, s := range shape {
		switch {
		case !reduced[d]:
			out = append(out, s)
		case keepdims:
			out = append(out, 1)
		}
	}
	return out
}

// reduceKernel returns the kernel of one Reduce* op.
func reduceKernel(op reduceOp) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		st := kern.State[reduceState](n)
		if err := st.plan(n, in); err != nil {
			return nil, err
		}
		out, err := kern.New(n, x.DType, st.outShape)
		if err != nil {
			return nil, err
		}
		b := st.b
		if m := st.mid; m.keep > 0 && (op == opSum || op == opMean) {
			// Outer and inner axes reduced around a kept middle (a
			// convolution's bias gradient over N and the spatial axes):
			// summed in place, in the permuted layout's order.
			switch xs := x.Data.(type) {
			case []float32:
				sumAroundMiddle(op, xs, out.Data.([]float32), m)
				return kern.Results(n, out), nil
			case []float64:
				sumAroundMiddle(op, xs, out.Data.([]float64), m)
				return kern.Results(n, out), nil
			}
		}
		switch xs := x.Data.(type) {
		case []float32:
			reduceNumbers[float32, float64](op, permuted(st, xs, x.Shape), out.Data.([]float32), b)
		case []float64:
			reduceNumbers[float64, float64](op, permuted(st, xs, x.Shape), out.Data.([]float64), b)
		case []int8:
			reduceNumbers[int8, int64](op, permuted(st, xs, x.Shape), out.Data.([]int8), b)
		case []int16:
			reduceNumbers[int16, int64](op, permuted(st, xs, x.Shape), out.Data.([]int16), b)
		case []int32:
			reduceNumbers[int32, int64](op, permuted(st, xs, x.Shape), out.Data.([]int32), b)
		case []int64:
			reduceNumbers[int64, int64](op, permuted(st, xs, x.Shape), out.Data.([]int64), b)
		case []uint8:
			reduceNumbers[uint8, int64](op, permuted(st, xs, x.Shape), out.Data.([]uint8), b)
		case []uint16:
			reduceNumbers[uint16, int64](op, permuted(st, xs, x.Shape), out.Data.([]uint16), b)
		case []uint32:
			reduceNumbers[uint32, int64](op, permuted(st, xs, x.Shape), out.Data.([]uint32), b)
		case []uint64:
			reduceNumbers[uint64, int64](op, permuted(st, xs, x.Shape), out.Data.([]uint64), b)
		case []bool:
			if op != opMax && op != opMin {
				return nil, n.Errorf("bool input is only supported by ReduceMax and ReduceMin")
			}
			reduceBools(op == opMax, permuted(st, xs, x.Shape), out.Data.([]bool), b)
		default:
			return nil, n.Errorf("dtype %v is not supported", x.DType)
		}
		return kern.Results(n, out), nil
	}
}

// reduceState is a Reduce* node's layout, kept between runs while the
// input's shape and the axes input's values stay the same (the attributes
// are fixed), and the storage of its permuted input.
type reduceState struct {
	xs       []int
	axes     []int64 // the axes input's values (hasAxes), else unused
	hasAxes  bool
	outShape []int
	perm     []int
	b        blocks
	valid    bool
	buf      any // the permuted input's storage, a []T
	// mid is the layout [outer, keep, inner] with outer and inner reduced
	// and keep kept (keep 0: not that layout).
	mid middleLayout
}

// middleLayout views an input as [outer, keep, inner] elements.
type middleLayout struct{ outer, keep, inner int }

// middleOf reports whether reduced leaves exactly one run of kept axes
// between two runs of reduced ones (axes of size 1 aside), and the layout.
func middleOf(shape []int, reduced []bool) middleLayout {
	var m middleLayout
	state := 0 // 0: leading reduced run, 1: the kept run, 2: trailing reduced run
	m.outer, m.keep, m.inner = 1, 1, 1
	for d, s := range shape {
		if s == 1 {
			continue
		}
		switch {
		case reduced[d] && state == 0:
			m.outer *= s
		case !reduced[d] && state <= 1:
			state = 1
			m.keep *= s
		case reduced[d] && state >= 1:
			state = 2
			m.inner *= s
		default:
			return middleLayout{}
		}
	}
	if state != 2 || m.outer == 1 {
		return middleLayout{}
	}
	return m
}

// sumAroundMiddle sets y[k] to the sum (or mean) over o and i of
// x[o, k, i], adding in float64 in the order o-major, i-minor (the
// order of the permuted layout [keep, outer, inner]), so the result is the
// general path's to the bit; the kept elements are spread over the cores.
func sumAroundMiddle[T float32 | float64](op reduceOp, x, y []T, m middleLayout) {
	parallelRowsOf(m.keep, m.outer*m.inner, middleSumTask[T]{op: op, x: x, y: y, m: m})
}

// middleSumTask is sumAroundMiddle's work over a range of kept elements
// (a value, so that handing it to the workers allocates nothing).
type middleSumTask[T float32 | float64] struct {
	op   reduceOp
	x, y []T
	m    middleLayout
}

func (t *middleSumTask[T]) Chunk(lo, hi int) {
	m := t.m
	for k := lo; k < hi; k++ {
		var s float64
		for o := 0; o < m.outer; o++ {
			for _, v := range t.x[(o*m.keep+k)*m.inner : (o*m.keep+k+1)*m.inner] {
				s += float64(v)
			}
		}
		if t.op == opMean {
			s /= float64(m.outer * m.inner)
		}
		t.y[k] = T(s)
	}
}

// plan resolves the layout for in, or keeps the one of the last run.
func (st *reduceState) plan(n *graph.Node, in []*graph.Tensor) error {
	x, t := in[0], kern.Opt(in, 1)
	if st.valid && graph.SameShape(st.xs, x.Shape) && st.hasAxes == (t != nil) && (t == nil || st.sameAxes(t)) {
		return nil
	}
	st.valid = false
	reduced, err := reducedAxes(n, in, x.Rank())
	if err != nil {
		return err
	}
	st.outShape = reducedShape(x.Shape, reduced, n.AttrInt("keepdims", 1) != 0)
	st.perm, st.b = reduceLayout(x.Shape, reduced)
	st.mid = middleOf(x.Shape, reduced)
	st.xs = append(st.xs[:0], x.Shape...)
	st.hasAxes, st.axes = t != nil, st.axes[:0]
	if t != nil {
		for i := 0; i < t.Size(); i++ {
			st.axes = append(st.axes, t.Int(i))
		}
	}
	st.valid = true
	return nil
}

// sameAxes reports whether the axes input t holds the values of the plan.
func (st *reduceState) sameAxes(t *graph.Tensor) bool {
	if !t.DType.IsInt() || t.Size() != len(st.axes) {
		return false
	}
	for i, a := range st.axes {
		if t.Int(i) != a {
			return false
		}
	}
	return true
}

// permuted returns xs (of the given shape) laid out for the plan: xs itself,
// or its transposition by st.perm in the state's reused storage.
func permuted[T any](st *reduceState, xs []T, shape []int) []T {
	if st.perm == nil {
		return xs
	}
	d, ok := st.buf.([]T)
	if !ok || cap(d) < len(xs) {
		d = make([]T, len(xs))
		st.buf = d
	}
	d = d[:len(xs)]
	permuteSliceInto(d, xs, shape, st.perm)
	return d
}

// reduceNumbers reduces x, viewed as blocks b, into y (outer*inner
// elements). A is the accumulator: float64 for floats, int64 (wrapping, like
// the element types themselves) for integers.
func reduceNumbers[T number, A int64 | float64](op reduceOp, x, y []T, b blocks) {
	size := b.r * b.inner
	switch op {
	case opMax, opMin:
		init := lowest[T]()
		if op == opMin {
			init = highest[T]()
		}
		for o := 0; o < b.outer; o++ {
			extremeBlock(op == opMax, x[o*size:(o+1)*size], y[o*b.inner:(o+1)*b.inner], b.r, init)
		}
		return
	case opLogSumExp:
		mx := make([]float64, b.inner)
		acc := make([]float64, b.inner)
		for o := 0; o < b.outer; o++ {
			logSumExpBlock(x[o*size:(o+1)*size], y[o*b.inner:(o+1)*b.inner], b.r, mx, acc)
		}
		return
	}
	acc := make([]A, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		dst := y[o*b.inner : (o+1)*b.inner]
		switch op {
		case opProd:
			prodBlock(block, acc, b.r)
		case opL1:
			sumAbsBlock(block, acc, b.r)
		case opL2, opSumSquare:
			sumSquaresBlock(block, acc, b.r)
		default:
			sumBlock(block, acc, b.r)
		}
		finish(op, acc, dst, b.r)
	}
}

// finish turns accumulated sums into the op's result.
func finish[T number, A int64 | float64](op reduceOp, acc []A, dst []T, r int) {
	switch op {
	case opMean:
		for i, a := range acc {
			dst[i] = T(float64(a) / float64(r))
		}
	case opL2:
		for i, a := range acc {
			dst[i] = T(math.Sqrt(float64(a)))
		}
	case opLogSum:
		for i, a := range acc {
			dst[i] = T(math.Log(float64(a)))
		}
	default:
		for i, a := range acc {
			dst[i] = T(a)
		}
	}
}

// sumBlock sets acc[i] to the sum over the r rows of block (each len(acc)
// long) at column i.
func sumBlock[T number, A int64 | float64](block []T, acc []A, r int) {
	if len(acc) == 1 {
		var s A
		for _, v := range block[:r] {
			s += A(v)
		}
		acc[0] = s
		return
	}
	clear(acc)
	inner := len(acc)
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			acc[i] += A(v)
		}
	}
}

// sumAbsBlock is sumBlock of |v|.
func sumAbsBlock[T number, A int64 | float64](block []T, acc []A, r int) {
	if len(acc) == 1 {
		var s A
		for _, v := range block[:r] {
			if v < 0 {
				s -= A(v)
			} else {
				s += A(v)
			}
		}
		acc[0] = s
		return
	}
	clear(acc)
	inner := len(acc)
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			if v < 0 {
				acc[i] -= A(v)
			} else {
				acc[i] += A(v)
			}
		}
	}
}

// sumSquaresBlock is sumBlock of v².
func sumSquaresBlock[T number, A int64 | float64](block []T, acc []A, r int) {
	if len(acc) == 1 {
		var s A
		for _, v := range block[:r] {
			a := A(v)
			s += a * a
		}
		acc[0] = s
		return
	}
	clear(acc)
	inner := len(acc)
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			a := A(v)
			acc[i] += a * a
		}
	}
}

// prodBlock is sumBlock with products.
func prodBlock[T number, A int64 | float64](block []T, acc []A, r int) {
	for i := range acc {
		acc[i] = 1
	}
	inner := len(acc)
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			acc[i] *= A(v)
		}
	}
}

// extremeBlock writes to dst the max (or min) over the r rows of block, NaN
// winning over numbers; init is the result of an empty reduction.
func extremeBlock[T number](isMax bool, block, dst []T, r int, init T) {
	inner := len(dst)
	if r == 0 {
		for i := range dst {
			dst[i] = init
		}
		return
	}
	if inner == 1 {
		m := block[0]
		// !(v <= m) holds when v is larger or NaN; a NaN result is final.
		if isMax {
			for _, v := range block[1:r] {
				if !(v <= m) {
					if isNaN(m) {
						break
					}
					m = v
				}
			}
		} else {
			for _, v := range block[1:r] {
				if !(v >= m) {
					if isNaN(m) {
						break
					}
					m = v
				}
			}
		}
		dst[0] = m
		return
	}
	copy(dst, block[:inner])
	for k := 1; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		if isMax {
			for i, v := range row {
				if !(v <= dst[i]) && !isNaN(dst[i]) {
					dst[i] = v
				}
			}
		} else {
			for i, v := range row {
				if !(v >= dst[i]) && !isNaN(dst[i]) {
					dst[i] = v
				}
			}
		}
	}
}

// logSumExpBlock writes log(Σ exp(v)) over the r rows of block to dst,
// shifting by the maximum for stability. mx and acc are scratch buffers of
// len(dst).
func logSumExpBlock[T number](block, dst []T, r int, mx, acc []float64) {
	inner := len(dst)
	exp := expFunc[T]()
	for i := range mx {
		mx[i] = math.Inf(-1)
		acc[i] = 0
	}
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			if f := float64(v); f > mx[i] || f != f {
				mx[i] = f
			}
		}
	}
	for k := 0; k < r; k++ {
		row := block[k*inner : (k+1)*inner]
		for i, v := range row {
			acc[i] += exp(float64(v) - mx[i])
		}
	}
	for i := range dst {
		if math.IsInf(mx[i], 0) {
			dst[i] = T(mx[i])
			continue
		}
		dst[i] = T(mx[i] + math.Log(acc[i]))
	}
}

// reduceBools reduces booleans: max is "any", min is "all" (False < True).
func reduceBools(isMax bool, x, y []bool, b blocks) {
	size := b.r * b.inner
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		dst := y[o*b.inner : (o+1)*b.inner]
		for i := range dst {
			dst[i] = !isMax
		}
		for k := 0; k < b.r; k++ {
			row := block[k*b.inner : (k+1)*b.inner]
			for i, v := range row {
				if isMax {
					dst[i] = dst[i] || v
				} else {
					dst[i] = dst[i] && v
				}
			}
		}
	}
}

// lowest is the result of a max over nothing: -Inf, or the type's minimum.
func lowest[T number]() T {
	var z T
	var v any
	switch any(z).(type) {
	case float32:
		v = float32(math.Inf(-1))
	case float64:
		v = math.Inf(-1)
	case int8:
		v = int8(math.MinInt8)
	case int16:
		v = int16(math.MinInt16)
	case int32:
		v = int32(math.MinInt32)
	case int64:
		v = int64(math.MinInt64)
	default: // unsigned
		return 0
	}
	return v.(T)
}

// highest is the result of a min over nothing: +Inf, or the type's maximum.
func highest[T number]() T {
	var z T
	var v any
	switch any(z).(type) {
	case float32:
		v = float32(math.Inf(1))
	case float64:
		v = math.Inf(1)
	case int8:
		v = int8(math.MaxInt8)
	case int16:
		v = int16(math.MaxInt16)
	case int32:
		v = int32(math.MaxInt32)
	case int64:
		v = int64(math.MaxInt64)
	case uint8:
		v = uint8(math.MaxUint8)
	case uint16:
		v = uint16(math.MaxUint16)
	case uint32:
		v = uint32(math.MaxUint32)
	case uint64:
		v = uint64(math.MaxUint64)
	}
	return v.(T)
}
