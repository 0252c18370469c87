package elementwise

import (
	"github.com/onnxtrain/onnxtrain/graph"
)

// arithOp names a same-type binary arithmetic op.
type arithOp int

const (
	opAdd arithOp = iota
	opSub
	opMul
	opDiv
	opMax
	opMin
)

// Row kernels of the arithmetic ops, generic over every numeric type. Go
// stencils one copy per element type, so each is a tight typed loop. For
// float32, Add, Sub, Mul and Div run eight lanes at a time where the CPU
// has AVX2 (vvPrefix, scalarPrefix: each lane rounded as the scalar
// instruction rounds it, so the bits are the loop's) and the loop does the
// tail: the scalar loops ran at a third of the memory's rate on
// attention's scaling by √d and its gradient (Div), and Go does not
// vectorise them.
//
// Division: integer kernels are only called once the divisor is known to
// hold no zero (Go panics on integer division by zero).

func addVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	i := vvStart(opAdd, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] + b[i]
	}
}

func addVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	i := vsStart(opAdd, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] + b
	}
}

func addSV[T number](dst []T, a T, b []T) { addVS(dst, b, a) }

func subVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	i := vvStart(opSub, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] - b[i]
	}
}

func subVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	i := vsStart(opSub, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] - b
	}
}

func subSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	i := svStart(opSub, dst, a, b)
	for ; i < len(b); i++ {
		dst[i] = a - b[i]
	}
}

func mulVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	i := vvStart(opMul, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] * b[i]
	}
}

func mulVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	i := vsStart(opMul, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] * b
	}
}

func mulSV[T number](dst []T, a T, b []T) { mulVS(dst, b, a) }

func divVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	i := vvStart(opDiv, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] / b[i]
	}
}

func divVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	i := vsStart(opDiv, dst, a, b)
	for ; i < len(a); i++ {
		dst[i] = a[i] / b
	}
}

func divSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	i := svStart(opDiv, dst, a, b)
	for ; i < len(b); i++ {
		dst[i] = a / b[i]
	}
}

// vvStart runs the float32 vector loop of op over dst = a op b (T being
// float32) and returns the elements it did, for the scalar loop to go on
// from; 0 for the other types.
func vvStart[T number](op arithOp, dst, a, b []T) int {
	if d32, ok := any(dst).([]float32); ok {
		return vvPrefix(op, d32, any(a).([]float32), any(b).([]float32))
	}
	return 0
}

// vsStart is vvStart for dst = a op s.
func vsStart[T number](op arithOp, dst, a []T, s T) int {
	if d32, ok := any(dst).([]float32); ok {
		return scalarPrefix(op, false, d32, any(a).([]float32), any(s).(float32))
	}
	return 0
}

// svStart is vvStart for dst = s op b.
func svStart[T number](op arithOp, dst []T, s T, b []T) int {
	if d32, ok := any(dst).([]float32); ok {
		return scalarPrefix(op, true, d32, any(b).([]float32), any(s).(float32))
	}
	return 0
}

// max2 and min2 propagate NaN like numpy.maximum/minimum (for integers the
// self-comparison is constant false and compiles away).
func max2[T number](a, b T) T {
	if b > a || b != b {
		return b
	}
	return a
}

func min2[T number](a, b T) T {
	if b < a || b != b {
		return b
	}
	return a
}

func maxVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = max2(v, b[i])
	}
}

func maxVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = max2(v, b)
	}
}

func maxSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = max2(a, v)
	}
}

func minVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = min2(v, b[i])
	}
}

func minVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = min2(v, b)
	}
}

func minSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = min2(a, v)
	}
}

// nArithOps is the number of arithOps.
const nArithOps = int(opMin) + 1

// arithTable holds the row kernels of every arithOp for one element type.
type arithTable[T number] [nArithOps]binLoops[T, T, T]

// makeArithTable builds the row kernels of every arithOp for T.
func makeArithTable[T number]() *arithTable[T] {
	return &arithTable[T]{
		opAdd: {addVV[T], addVS[T], addSV[T]},
		opSub: {subVV[T], subVS[T], subSV[T]},
		opMul: {mulVV[T], mulVS[T], mulSV[T]},
		opDiv: {divVV[T], divVS[T], divSV[T]},
		opMax: {maxVV[T], maxVS[T], maxSV[T]},
		opMin: {minVV[T], minVS[T], minSV[T]},
	}
}

// The tables of the tensor element types, built once: func values of
// generic functions made inside generic code are allocated on every call.
var (
	arithF32 = makeArithTable[float32]()
	arithF64 = makeArithTable[float64]()
	arithI8  = makeArithTable[int8]()
	arithI16 = makeArithTable[int16]()
	arithI32 = makeArithTable[int32]()
	arithI64 = makeArithTable[int64]()
	arithU8  = makeArithTable[uint8]()
	arithU16 = makeArithTable[uint16]()
	arithU32 = makeArithTable[uint32]()
	arithU64 = makeArithTable[uint64]()
)

// arithLoops returns the row kernels of op for element type T.
func arithLoops[T number](op arithOp) binLoops[T, T, T] {
	var tab any
	switch any(*new(T)).(type) {
	case float32:
		tab = arithF32
	case float64:
		tab = arithF64
	case int8:
		tab = arithI8
	case int16:
		tab = arithI16
	case int32:
		tab = arithI32
	case int64:
		tab = arithI64
	case uint8:
		tab = arithU8
	case uint16:
		tab = arithU16
	case uint32:
		tab = arithU32
	case uint64:
		tab = arithU64
	}
	t, ok := tab.(*arithTable[T])
	if !ok {
		t = makeArithTable[T]() // a named type over one of them
	}
	if op < 0 || int(op) >= nArithOps {
		op = opMin
	}
	return t[op]
}

// arithTyped runs op on tensors whose data are []T.
func arithTyped[T number](n *graph.Node, op arithOp, a, b *graph.Tensor, over []*graph.Tensor) (*graph.Tensor, error) {
	if op == opDiv {
		bs, err := dataAs[T](n, b, 1)
		if err != nil {
			return nil, err
		}
		if !isFloatSlice(bs) && hasZero(bs) {
			return nil, n.Errorf("integer division by zero (input 1 holds a 0)")
		}
	}
	return applyBinaryOver(n, a, b, a.DType, arithLoops[T](op), over)
}

// hasZero reports whether s holds a zero.
func hasZero[T number](s []T) bool {
	for _, v := range s {
		if v == 0 {
			return true
		}
	}
	return false
}

// arith applies a same-dtype arithmetic op with numpy broadcasting.
func arith(n *graph.Node, op arithOp, a, b *graph.Tensor) (*graph.Tensor, error) {
	return arithOver(n, op, a, b, nil)
}

// arithOver is arith writing its result over the first of over whose
// dtype and shape are the result's (applyBinaryOver).
func arithOver(n *graph.Node, op arithOp, a, b *graph.Tensor, over []*graph.Tensor) (*graph.Tensor, error) {
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
	}
	switch a.Data.(type) {
	case []float32:
		return arithTyped[float32](n, op, a, b, over)
	case []float64:
		return arithTyped[float64](n, op, a, b, over)
	case []int8:
		return arithTyped[int8](n, op, a, b, over)
	case []int16:
		return arithTyped[int16](n, op, a, b, over)
	case []int32:
		return arithTyped[int32](n, op, a, b, over)
	case []int64:
		return arithTyped[int64](n, op, a, b, over)
	case []uint8:
		return arithTyped[uint8](n, op, a, b, over)
	case []uint16:
		if a.DType != graph.Uint16 {
			return nil, errDType(n, a)
		}
		return arithTyped[uint16](n, op, a, b, over)
	case []uint32:
		return arithTyped[uint32](n, op, a, b, over)
	case []uint64:
		return arithTyped[uint64](n, op, a, b, over)
	}
	return nil, errDType(n, a)
}
