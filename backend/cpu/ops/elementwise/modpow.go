package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("Mod", modKernel)
	kern.Register("Pow", powKernel)
	kern.Register("PRelu", preluKernel)
}

// modKernel is Mod: with fmod=0 the result takes the divisor's sign (Python
// and numpy.mod); with fmod=1 it takes the dividend's (C fmod).
func modKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have dtypes %v and %v (they must match)", a.DType, b.DType)
	}
	fmod := n.AttrInt("fmod", 0)
	if fmod != 0 && fmod != 1 {
		return nil, n.Errorf("attribute fmod is %d, want 0 or 1", fmod)
	}
	var out *graph.Tensor
	var err error
	switch a.Data.(type) {
	case []float32:
		out, err = modFloat[float32](n, a, b, fmod == 1)
	case []float64:
		out, err = modFloat[float64](n, a, b, fmod == 1)
	case []int8:
		out, err = modInt[int8](n, a, b, fmod == 1)
	case []int16:
		out, err = modInt[int16](n, a, b, fmod == 1)
	case []int32:
		out, err = modInt[int32](n, a, b, fmod == 1)
	case []int64:
		out, err = modInt[int64](n, a, b, fmod == 1)
	case []uint8:
		out, err = modInt[uint8](n, a, b, fmod == 1)
	case []uint16:
		out, err = modInt[uint16](n, a, b, fmod == 1)
	case []uint32:
		out, err = modInt[uint32](n, a, b, fmod == 1)
	case []uint64:
		out, err = modInt[uint64](n, a, b, fmod == 1)
	default:
		return nil, errDType(n, a)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// modFloat computes Mod for a float element type.
func modFloat[T float](n *graph.Node, a, b *graph.Tensor, fmod bool) (*graph.Tensor, error) {
	if fmod {
		return applyBinary(n, a, b, a.DType, loopsOf(func(x, y T) T {
			return T(math.Mod(float64(x), float64(y)))
		}))
	}
	return applyBinary(n, a, b, a.DType, loopsOf(func(x, y T) T {
		return T(pyModFloat(float64(x), float64(y)))
	}))
}

// modInt computes Mod for an integer element type.
func modInt[T integer](n *graph.Node, a, b *graph.Tensor, fmod bool) (*graph.Tensor, error) {
	bs, err := dataAs[T](n, b, 1)
	if err != nil {
		return nil, err
	}
	if hasZero(bs) {
		return nil, n.Errorf("integer modulo by zero (input 1 holds a 0)")
	}
	if fmod {
		return applyBinary(n, a, b, a.DType, loopsOf(func(x, y T) T { return x % y }))
	}
	return applyBinary(n, a, b, a.DType, loopsOf(pyModInt[T]))
}

// pyModInt is x mod y with the sign of y (y != 0).
func pyModInt[T integer](x, y T) T {
	r := x % y
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

// pyModFloat is numpy.mod for floats: fmod adjusted to the divisor's sign.
func pyModFloat(x, y float64) float64 {
	r := math.Mod(x, y)
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

// powKernel is Pow. The exponent may have another numeric dtype than the
// base (opset 12+); the output has the base's dtype.
func powKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a := in[0]
	b, err := legacyBroadcast(ctx, n, a, in[1])
	if err != nil {
		return nil, err
	}
	if !isNumeric(b) {
		return nil, n.Errorf("exponent: %w", errDType(n, b))
	}
	// Integer exponents of integer bases use exact integer powers.
	if a.DType.IsInt() && b.DType.IsInt() {
		e, err := toInt64(b)
		if err != nil {
			return nil, n.Errorf("exponent: %v", err)
		}
		eb := &graph.Tensor{DType: graph.Int64, Shape: b.Shape, Data: e}
		var out *graph.Tensor
		switch a.Data.(type) {
		case []int8:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[int8]))
		case []int16:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[int16]))
		case []int32:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[int32]))
		case []int64:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[int64]))
		case []uint8:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[uint8]))
		case []uint16:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[uint16]))
		case []uint32:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[uint32]))
		case []uint64:
			out, err = applyBinary(n, a, eb, a.DType, loopsOf(intPow[uint64]))
		default:
			return nil, errDType(n, a)
		}
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}
	// Otherwise the exponent is read as float64.
	var eb *graph.Tensor
	if fb, ok := b.Data.([]float64); ok {
		eb = &graph.Tensor{DType: graph.Float64, Shape: b.Shape, Data: fb}
	} else if eb, err = kern.Cast(b, graph.Float64); err != nil {
		return nil, n.Errorf("exponent: %v", err)
	}
	var out *graph.Tensor
	switch as := a.Data.(type) {
	case []float32:
		if eb.Size() == 1 && len(as) == a.Size() {
			if out, ok := powScalar32(n, a, eb.Data.([]float64)[0]); ok {
				return one(out), nil
			}
		}
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(func(x float32, y float64) float32 {
			return float32(math.Pow(float64(x), y))
		}))
	case []float64:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(math.Pow))
	case []int8:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[int8]))
	case []int16:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[int16]))
	case []int32:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[int32]))
	case []int64:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[int64]))
	case []uint8:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[uint8]))
	case []uint16:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[uint16]))
	case []uint32:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[uint32]))
	case []uint64:
		out, err = applyBinary(n, a, eb, a.DType, loopsOf(floatPow[uint64]))
	default:
		return nil, errDType(n, a)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// powScalar32 handles float32 bases raised to the common scalar exponents
// (x², √x, ...) without math.Pow. It reports false for other exponents.
func powScalar32(n *graph.Node, a *graph.Tensor, e float64) (*graph.Tensor, bool) {
	src := a.Data.([]float32)
	out, err := newLike(n, a.DType, a.Shape)
	if err != nil {
		return nil, false
	}
	dst := out.Data.([]float32)
	switch e {
	case 1:
		copy(dst, src)
	case 2:
		for i, v := range src {
			dst[i] = v * v
		}
	case 3:
		for i, v := range src {
			dst[i] = v * v * v
		}
	case 0.5:
		for i, v := range src {
			dst[i] = float32(math.Sqrt(float64(v)))
		}
	case -1:
		for i, v := range src {
			dst[i] = 1 / v
		}
	default:
		return nil, false
	}
	return out, true
}

// intPow is x**e by repeated squaring; negative exponents give 0 except for
// bases 1 and -1 (the integer part of the real result).
func intPow[T integer](x T, e int64) T {
	if e < 0 {
		switch {
		case x == 1:
			return 1
		case isMinusOne(x):
			if e%2 == 0 {
				return 1
			}
			return x
		}
		return 0
	}
	r := T(1)
	for e > 0 {
		if e&1 == 1 {
			r *= x
		}
		x *= x
		e >>= 1
	}
	return r
}

// isMinusOne reports whether x is -1 (false for unsigned types).
func isMinusOne[T integer](x T) bool {
	var zero T
	return x < zero && x+1 == zero
}

// floatPow raises an integer base to a float exponent, truncating the result.
func floatPow[T integer](x T, e float64) T {
	return T(math.Pow(float64(x), e))
}

// toInt64 reads an integer tensor as []int64.
func toInt64(t *graph.Tensor) ([]int64, error) {
	if s, ok := t.Data.([]int64); ok {
		return s, nil
	}
	c, err := kern.Cast(t, graph.Int64)
	if err != nil {
		return nil, err
	}
	return c.Data.([]int64), nil
}

// preluKernel is PRelu: x for x >= 0 and slope*x otherwise, where slope
// broadcasts to x's shape (unidirectionally).
func preluKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, slope := in[0], in[1]
	if x.DType != slope.DType {
		return nil, n.Errorf("slope has dtype %v, X has %v (they must match)", slope.DType, x.DType)
	}
	// Before opset 7 a 1-D slope of C values applied along axis 1.
	if ctx != nil && ctx.Opset > 0 && ctx.Opset < 7 && slope.Rank() == 1 && x.Rank() > 2 && slope.Shape[0] == x.Shape[1] && slope.Shape[0] != x.Shape[x.Rank()-1] {
		shape := []int{slope.Shape[0]}
		for len(shape) < x.Rank()-1 {
			shape = append(shape, 1)
		}
		slope = kern.Reshape(slope, shape)
	}
	bs, err := kern.BroadcastShape(x.Shape, slope.Shape)
	if err != nil || !graph.SameShape(bs, x.Shape) {
		return nil, n.Errorf("slope of shape %v does not broadcast to X's shape %v", slope.Shape, x.Shape)
	}
	var out *graph.Tensor
	switch x.Data.(type) {
	case []float32:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[float32]())
	case []float64:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[float64]())
	case []int8:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[int8]())
	case []int16:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[int16]())
	case []int32:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[int32]())
	case []int64:
		out, err = applyBinary(n, x, slope, x.DType, preluLoops[int64]())
	case []uint8, []uint16, []uint32, []uint64:
		// Unsigned values are never negative: PRelu is the identity.
		if !x.DType.IsInt() {
			return nil, errDType(n, x)
		}
		out = x.Clone()
	default:
		return nil, errDType(n, x)
	}
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// preluLoops are PRelu's row kernels for T.
func preluLoops[T signed]() binLoops[T, T, T] {
	return binLoops[T, T, T]{
		vv: func(dst, a, b []T) {
			b, dst = b[:len(a)], dst[:len(a)]
			for i, v := range a {
				if v < 0 {
					v *= b[i]
				}
				dst[i] = v
			}
		},
		vs: func(dst, a []T, b T) {
			dst = dst[:len(a)]
			for i, v := range a {
				if v < 0 {
					v *= b
				}
				dst[i] = v
			}
		},
		sv: func(dst []T, a T, b []T) {
			dst = dst[:len(b)]
			for i, s := range b {
				if a < 0 {
					dst[i] = a * s
				} else {
					dst[i] = a
				}
			}
		},
	}
}
