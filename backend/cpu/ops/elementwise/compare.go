package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// cmpOp names a comparison.
type cmpOp int

const (
	opEqual cmpOp = iota
	opLess
	opLessOrEqual
	opGreater
	opGreaterOrEqual
)

func init() {
	for op, code := range map[string]cmpOp{
		"Equal": opEqual, "Less": opLess, "LessOrEqual": opLessOrEqual,
		"Greater": opGreater, "GreaterOrEqual": opGreaterOrEqual,
	} {
		kern.Register(op, compareKernel(code))
	}
	for op, code := range map[string]logicOp{"And": opAnd, "Or": opOr, "Xor": opXor} {
		kern.Register(op, logicKernel(code))
	}
	for op, code := range map[string]logicOp{"BitwiseAnd": opAnd, "BitwiseOr": opOr, "BitwiseXor": opXor} {
		kern.Register(op, bitwiseKernel(code))
	}
	kern.Register("BitShift", bitShiftKernel)
}

// ordered is the element types with < (every numeric type and string).
type ordered interface{ number | ~string }

func eqVV[T comparable](dst []bool, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v == b[i]
	}
}

func eqVS[T comparable](dst []bool, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v == b
	}
}

func eqSV[T comparable](dst []bool, a T, b []T) { eqVS(dst, b, a) }

func ltVV[T ordered](dst []bool, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v < b[i]
	}
}

func ltVS[T ordered](dst []bool, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v < b
	}
}

func ltSV[T ordered](dst []bool, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = a < v
	}
}

func leVV[T ordered](dst []bool, a, b []T) {
	b, dst = b[:len(a)], dst[:len(a)]
	for i, v := range a {
		dst[i] = v <= b[i]
	}
}

func leVS[T ordered](dst []bool, a []T, b T) {
	dst = dst[:len(a)]
	for i, v := range a {
		dst[i] = v <= b
	}
}

func leSV[T ordered](dst []bool, a T, b []T) {
	dst = dst[:len(b)]
	for i, v := range b {
		dst[i] = a <= v
	}
}

// compareTyped compares tensors holding []T. Greater and GreaterOrEqual run
// as Less and LessOrEqual with the operands swapped.
func compareTyped[T ordered](n *graph.Node, op cmpOp, a, b *graph.Tensor) (*graph.Tensor, error) {
	switch op {
	case opEqual:
		return applyBinary(n, a, b, graph.Bool, binLoops[T, T, bool]{eqVV[T], eqVS[T], eqSV[T]})
	case opLess:
		return applyBinary(n, a, b, graph.Bool, binLoops[T, T, bool]{ltVV[T], ltVS[T], ltSV[T]})
	case opLessOrEqual:
		return applyBinary(n, a, b, graph.Bool, binLoops[T, T, bool]{leVV[T], leVS[T], leSV[T]})
	case opGreater:
		return applyBinary(n, b, a, graph.Bool, binLoops[T, T, bool]{ltVV[T], ltVS[T], ltSV[T]})
	default:
		return applyBinary(n, b, a, graph.Bool, binLoops[T, T, bool]{leVV[T], leVS[T], leSV[T]})
	}
}

// compareKernel is the kernel of a comparison op; the output is bool.
func compareKernel(op cmpOp) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		a := in[0]
		b, err := legacyBroadcast(ctx, n, a, in[1])
		if err != nil {
			return nil, err
		}
		if a.DType != b.DType {
			return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
		}
		var out *graph.Tensor
		switch a.Data.(type) {
		case []float32:
			out, err = compareTyped[float32](n, op, a, b)
		case []float64:
			out, err = compareTyped[float64](n, op, a, b)
		case []int8:
			out, err = compareTyped[int8](n, op, a, b)
		case []int16:
			out, err = compareTyped[int16](n, op, a, b)
		case []int32:
			out, err = compareTyped[int32](n, op, a, b)
		case []int64:
			out, err = compareTyped[int64](n, op, a, b)
		case []uint8:
			out, err = compareTyped[uint8](n, op, a, b)
		case []uint16:
			if a.DType != graph.Uint16 {
				return nil, errDType(n, a)
			}
			out, err = compareTyped[uint16](n, op, a, b)
		case []uint32:
			out, err = compareTyped[uint32](n, op, a, b)
		case []uint64:
			out, err = compareTyped[uint64](n, op, a, b)
		case []string:
			if op != opEqual {
				return nil, errDType(n, a)
			}
			out, err = compareTyped[string](n, op, a, b)
		case []bool:
			if op != opEqual {
				return nil, errDType(n, a)
			}
			out, err = applyBinary(n, a, b, graph.Bool, binLoops[bool, bool, bool]{eqVV[bool], eqVS[bool], eqSV[bool]})
		default:
			return nil, errDType(n, a)
		}
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}
}

// logicOp names And, Or or Xor (boolean or bitwise).
type logicOp int

const (
	opAnd logicOp = iota
	opOr
	opXor
)

// logicKernel is the kernel of And, Or or Xor on bool tensors.
func logicKernel(op logicOp) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		a := in[0]
		b, err := legacyBroadcast(ctx, n, a, in[1])
		if err != nil {
			return nil, err
		}
		if a.DType != graph.Bool {
			return nil, errDType(n, a)
		}
		if b.DType != graph.Bool {
			return nil, errDType(n, b)
		}
		var f func(x, y bool) bool
		switch op {
		case opAnd:
			f = func(x, y bool) bool { return x && y }
		case opOr:
			f = func(x, y bool) bool { return x || y }
		default:
			f = func(x, y bool) bool { return x != y }
		}
		out, err := applyBinary(n, a, b, graph.Bool, loopsOf(f))
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}
}

// bitwiseTyped applies a bitwise op to integer tensors holding []T.
func bitwiseTyped[T integer](n *graph.Node, op logicOp, a, b *graph.Tensor) (*graph.Tensor, error) {
	var f func(x, y T) T
	switch op {
	case opAnd:
		f = func(x, y T) T { return x & y }
	case opOr:
		f = func(x, y T) T { return x | y }
	default:
		f = func(x, y T) T { return x ^ y }
	}
	return applyBinary(n, a, b, a.DType, loopsOf(f))
}

// bitwiseKernel is the kernel of BitwiseAnd, BitwiseOr or BitwiseXor.
func bitwiseKernel(op logicOp) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		if a.DType != b.DType {
			return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
		}
		if !a.DType.IsInt() {
			return nil, errDType(n, a)
		}
		var out *graph.Tensor
		var err error
		switch a.Data.(type) {
		case []int8:
			out, err = bitwiseTyped[int8](n, op, a, b)
		case []int16:
			out, err = bitwiseTyped[int16](n, op, a, b)
		case []int32:
			out, err = bitwiseTyped[int32](n, op, a, b)
		case []int64:
			out, err = bitwiseTyped[int64](n, op, a, b)
		case []uint8:
			out, err = bitwiseTyped[uint8](n, op, a, b)
		case []uint16:
			out, err = bitwiseTyped[uint16](n, op, a, b)
		case []uint32:
			out, err = bitwiseTyped[uint32](n, op, a, b)
		case []uint64:
			out, err = bitwiseTyped[uint64](n, op, a, b)
		default:
			return nil, errDType(n, a)
		}
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}
}

// unsigned is the unsigned integer types (BitShift's domain).
type unsigned interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

// shiftTyped shifts x by y bits; shifting by the width or more gives 0.
func shiftTyped[T unsigned](n *graph.Node, left bool, a, b *graph.Tensor) (*graph.Tensor, error) {
	if left {
		return applyBinary(n, a, b, a.DType, loopsOf(func(x, y T) T { return x << y }))
	}
	return applyBinary(n, a, b, a.DType, loopsOf(func(x, y T) T { return x >> y }))
}

func bitShiftKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
	}
	var left bool
	switch d := n.AttrString("direction", ""); d {
	case "LEFT":
		left = true
	case "RIGHT":
	default:
		return nil, n.Errorf("attribute direction is %q, want \"LEFT\" or \"RIGHT\"", d)
	}
	var out *graph.Tensor
	var err error
	switch a.DType {
	case graph.Uint8:
		out, err = shiftTyped[uint8](n, left, a, b)
	case graph.Uint16:
		out, err = shiftTyped[uint16](n, left, a, b)
	case graph.Uint32:
		out, err = shiftTyped[uint32](n, left, a, b)
	case graph.Uint64:
		out, err = shiftTyped[uint64](n, left, a, b)
	default:
		return nil, errDType(n, a)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}
