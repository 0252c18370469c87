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
// stencils one copy per element type, so each is a tight typed loop.

func addVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v + b[i]
	}
}

func addVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v + b
	}
}

func addSV[T number](dst []T, a T, b []T) { addVS(dst, b, a) }

func subVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v - b[i]
	}
}

func subVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v - b
	}
}

func subSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = a - v
	}
}

func mulVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v * b[i]
	}
}

func mulVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v * b
	}
}

func mulSV[T number](dst []T, a T, b []T) { mulVS(dst, b, a) }

// Division: integer kernels are only called once the divisor is known to
// hold no zero (Go panics on integer division by zero).

func divVV[T number](dst, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v / b[i]
	}
}

func divVS[T number](dst, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v / b
	}
}

func divSV[T number](dst []T, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = a / v
	}
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

// arithLoops returns the row kernels of op for element type T.
func arithLoops[T number](op arithOp) binLoops[T, T, T] {
	switch op {
	case opAdd:
		return binLoops[T, T, T]{addVV[T], addVS[T], addSV[T]}
	case opSub:
		return binLoops[T, T, T]{subVV[T], subVS[T], subSV[T]}
	case opMul:
		return binLoops[T, T, T]{mulVV[T], mulVS[T], mulSV[T]}
	case opDiv:
		return binLoops[T, T, T]{divVV[T], divVS[T], divSV[T]}
	case opMax:
		return binLoops[T, T, T]{maxVV[T], maxVS[T], maxSV[T]}
	default:
		return binLoops[T, T, T]{minVV[T], minVS[T], minSV[T]}
	}
}

// arithTyped runs op on tensors whose data are []T.
func arithTyped[T number](n *graph.Node, op arithOp, a, b *graph.Tensor) (*graph.Tensor, error) {
	if op == opDiv {
		bs, err := dataAs[T](n, b, 1)
		if err != nil {
			return nil, err
		}
		if !isFloatSlice(bs) && hasZero(bs) {
			return nil, n.Errorf("integer division by zero (input 1 holds a 0)")
		}
	}
	return applyBinary(n, a, b, a.DType, arithLoops[T](op))
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
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
	}
	switch a.Data.(type) {
	case []float32:
		return arithTyped[float32](n, op, a, b)
	case []float64:
		return arithTyped[float64](n, op, a, b)
	case []int8:
		return arithTyped[int8](n, op, a, b)
	case []int16:
		return arithTyped[int16](n, op, a, b)
	case []int32:
		return arithTyped[int32](n, op, a, b)
	case []int64:
		return arithTyped[int64](n, op, a, b)
	case []uint8:
		return arithTyped[uint8](n, op, a, b)
	case []uint16:
		if a.DType != graph.Uint16 {
			return nil, errDType(n, a)
		}
		return arithTyped[uint16](n, op, a, b)
	case []uint32:
		return arithTyped[uint32](n, op, a, b)
	case []uint64:
		return arithTyped[uint64](n, op, a, b)
	}
	return nil, errDType(n, a)
}
