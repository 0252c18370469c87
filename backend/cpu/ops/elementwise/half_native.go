package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Half-precision kernels for the elementwise ops of a mixed-precision
// training step's ReLUs (Relu forward, and the comparison that masks its
// gradient): they read and write bfloat16/float16 directly, so that the
// step holds no float32 copy of the activations (see kern.AdaptHalfKernels;
// the cases they do not cover go through the converting adapter).

func init() {
	kern.RegisterNativeHalf("", "Cast", castHalf)
	kern.RegisterNativeHalf("", "CastLike", castHalf)
	kern.RegisterNativeHalf("", "Relu", reluHalf)
	for op, code := range map[string]cmpOp{
		"Equal": opEqual, "Less": opLess, "LessOrEqual": opLessOrEqual,
		"Greater": opGreater, "GreaterOrEqual": opGreaterOrEqual,
	} {
		kern.RegisterNativeHalf("", op, compareHalf(code))
	}
}

func halfDType(d graph.DType) bool { return d == graph.Float16 || d == graph.BFloat16 }

// reluHalf is Relu on half values: negative values become +0; zeros, NaNs
// and positive values are kept, as the float32 kernel does.
func reluHalf(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
	if len(in) != 1 || in[0] == nil || !halfDType(in[0].DType) {
		return nil, false, nil
	}
	x := in[0]
	src, ok := x.Data.([]uint16)
	if !ok {
		return nil, false, nil
	}
	out, err := kern.NewUninit(n, x.DType, x.Shape)
	if err != nil {
		return nil, false, err
	}
	dst := out.Data.([]uint16)
	if len(src) < len(dst) {
		return nil, false, nil
	}
	d := x.DType
	parallelRange(len(dst), parallelGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			h := src[i]
			if h&0x8000 != 0 && kern.HalfToFloat32At(d, h) < 0 {
				h = 0
			}
			dst[i] = h
		}
	})
	return []*graph.Tensor{out}, true, nil
}

// compareHalf compares two half tensors of one dtype whose shapes are equal
// or one of which is a single value (the ReLU gradient's x > 0).
func compareHalf(op cmpOp) kern.HalfKernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
		if len(in) != 2 || in[0] == nil || in[1] == nil || in[0].DType != in[1].DType || !halfDType(in[0].DType) ||
			(ctx != nil && ctx.Opset > 0 && ctx.Opset < 7) {
			return nil, false, nil
		}
		a, b := in[0], in[1]
		as, okA := a.Data.([]uint16)
		bs, okB := b.Data.([]uint16)
		if !okA || !okB {
			return nil, false, nil
		}
		shape := a.Shape
		switch {
		case graph.SameShape(a.Shape, b.Shape):
		case len(bs) == 1 && len(b.Shape) <= len(a.Shape):
		case len(as) == 1 && len(a.Shape) <= len(b.Shape):
			shape = b.Shape
		default:
			return nil, false, nil
		}
		out, err := kern.NewUninit(n, graph.Bool, shape)
		if err != nil {
			return nil, false, err
		}
		dst := out.Data.([]bool)
		d := a.DType
		at := func(s []uint16, i int) float32 {
			if len(s) == 1 {
				return kern.HalfToFloat32At(d, s[0])
			}
			return kern.HalfToFloat32At(d, s[i])
		}
		switch op {
		case opEqual, opLess, opLessOrEqual, opGreater, opGreaterOrEqual:
		default:
			return nil, false, nil
		}
		parallelRange(len(dst), parallelGrain, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x, y := at(as, i), at(bs, i)
				var r bool
				switch op {
				case opEqual:
					r = x == y
				case opLess:
					r = x < y
				case opLessOrEqual:
					r = x <= y
				case opGreater:
					r = x > y
				case opGreaterOrEqual:
					r = x >= y
				}
				dst[i] = r
			}
		})
		return []*graph.Tensor{out}, true, nil
	}
}

func init() {
	for _, op := range []string{"Add", "Sub", "Mul", "Div"} {
		kern.RegisterNativeHalf("", op, arithHalf(op))
	}
}

// arithHalf is Add, Sub, Mul or Div on two half tensors of one dtype, in
// float32 rounded once to the half type (what the converting adapter
// computes), for the broadcasts of a training step: equal shapes, a single
// value on either side, or one side's shape a suffix of the other's (a
// bias over the last dims). It works in blocks widened on the stack.
func arithHalf(op string) kern.HalfKernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
		if len(in) != 2 || in[0] == nil || in[1] == nil || in[0].DType != in[1].DType || !halfDType(in[0].DType) ||
			(ctx != nil && ctx.Opset > 0 && ctx.Opset < 7) {
			return nil, false, nil
		}
		a, b := in[0], in[1]
		as, okA := a.Data.([]uint16)
		bs, okB := b.Data.([]uint16)
		if !okA || !okB || len(as) == 0 || len(bs) == 0 {
			return nil, false, nil
		}
		// The longer side sets the shape; the shorter one repeats with
		// period len(short) (a suffix of the shape, or a single value).
		shape, swap := a.Shape, false
		switch {
		case graph.SameShape(a.Shape, b.Shape):
		case suffixOf(b.Shape, a.Shape):
		case suffixOf(a.Shape, b.Shape):
			shape, swap = b.Shape, true
		default:
			return nil, false, nil
		}
		out, err := kern.NewUninit(n, a.DType, shape)
		if err != nil {
			return nil, false, err
		}
		dst := out.Data.([]uint16)
		d := a.DType
		long, short := as, bs
		if swap {
			long, short = bs, as
		}
		if len(long) < len(dst) || len(dst)%len(short) != 0 {
			return nil, false, nil
		}
		period := len(short)
		var shortF []float32 // the repeating side, widened once
		if period < len(dst) {
			shortF = make([]float32, period)
			widenHalf(d, shortF, short)
		}
		parallelRange(len(dst), parallelGrain, func(lo, hi int) {
			const block = 256
			var xb, yb [block]float32
			for i0 := lo; i0 < hi; i0 += block {
				m := min(block, hi-i0)
				x, y := xb[:m], yb[:m]
				widenHalf(d, x, long[i0:i0+m])
				if shortF == nil {
					widenHalf(d, y, short[i0:i0+m])
				} else {
					k := i0 % period
					for j := range y {
						y[j] = shortF[k]
						if k++; k == period {
							k = 0
						}
					}
				}
				if swap {
					x, y = y, x
				}
				switch op {
				case "Add":
					for j := range x {
						x[j] += y[j]
					}
				case "Sub":
					for j := range x {
						x[j] -= y[j]
					}
				case "Mul":
					for j := range x {
						x[j] *= y[j]
					}
				case "Div":
					for j := range x {
						x[j] /= y[j]
					}
				}
				if d == graph.BFloat16 {
					kern.Float32sToBFloat16s(dst[i0:i0+m], x)
				} else {
					kern.Float32sToFloat16s(dst[i0:i0+m], x)
				}
			}
		})
		return []*graph.Tensor{out}, true, nil
	}
}

func widenHalf(d graph.DType, dst []float32, src []uint16) {
	if d == graph.BFloat16 {
		kern.BFloat16sToFloat32s(dst, src)
	} else {
		kern.Float16sToFloat32s(dst, src)
	}
}

// suffixOf reports whether short broadcasts onto long by repetition: its
// size is 1, or its dims (leading 1s dropped) are long's trailing dims.
func suffixOf(short, long []int) bool {
	if len(short) > len(long) {
		return false // the output would have short's rank
	}
	for len(short) > 0 && short[0] == 1 {
		short = short[1:]
	}
	return graph.SameShape(short, long[len(long)-len(short):])
}

// castHalf is Cast and CastLike between float32 and a half type, the casts
// AutoCast inserts: one typed loop into planned storage (the general
// kernel goes through a float32 copy for half sources).
func castHalf(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
	if len(in) == 0 || in[0] == nil {
		return nil, false, nil
	}
	x := in[0]
	var to graph.DType
	if n.OpType == "CastLike" {
		if len(in) < 2 || in[1] == nil {
			return nil, false, nil
		}
		to = in[1].DType
	} else {
		a := n.Attr("to")
		if a == nil || a.Type != graph.AttrInt {
			return nil, false, nil
		}
		to = graph.DType(a.I)
	}
	switch {
	case x.DType == graph.Float32 && halfDType(to):
		src, ok := x.Data.([]float32)
		if !ok || len(src) != x.Size() {
			return nil, false, nil
		}
		out, err := kern.NewUninit(n, to, x.Shape)
		if err != nil {
			return nil, false, err
		}
		dst := out.Data.([]uint16)
		parallelRange(len(dst), parallelGrain, func(lo, hi int) {
			if to == graph.BFloat16 {
				kern.Float32sToBFloat16s(dst[lo:hi], src[lo:hi])
			} else {
				kern.Float32sToFloat16s(dst[lo:hi], src[lo:hi])
			}
		})
		return []*graph.Tensor{out}, true, nil
	case halfDType(x.DType) && to == graph.Float32:
		src, ok := x.Data.([]uint16)
		if !ok || len(src) != x.Size() {
			return nil, false, nil
		}
		out, err := kern.NewUninit(n, to, x.Shape)
		if err != nil {
			return nil, false, err
		}
		dst := out.Data.([]float32)
		parallelRange(len(dst), parallelGrain, func(lo, hi int) {
			if x.DType == graph.BFloat16 {
				kern.BFloat16sToFloat32s(dst[lo:hi], src[lo:hi])
			} else {
				kern.Float16sToFloat32s(dst[lo:hi], src[lo:hi])
			}
		})
		return []*graph.Tensor{out}, true, nil
	}
	return nil, false, nil
}

// The fused ReLU gradient (graph.ReluGrad in domain graph.FusedDomain,
// named here by value so that this file does not depend on the fusion
// pass being present).
func init() { kern.RegisterNativeHalf("com.onnxtrain.fused", "ReluGrad", reluGradHalf) }

// reluGradHalf is ReluGrad(dY, X) = Where(X > 0, dY, 0) for half dY and X
// of one dtype and shape.
func reluGradHalf(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, bool, error) {
	if len(in) != 2 || in[0] == nil || in[1] == nil || in[0].DType != in[1].DType || !halfDType(in[0].DType) ||
		!graph.SameShape(in[0].Shape, in[1].Shape) {
		return nil, false, nil
	}
	dy, x := in[0], in[1]
	ds, ok1 := dy.Data.([]uint16)
	xs, ok2 := x.Data.([]uint16)
	if !ok1 || !ok2 || len(ds) != len(xs) {
		return nil, false, nil
	}
	out, err := kern.NewUninit(n, dy.DType, dy.Shape)
	if err != nil {
		return nil, false, err
	}
	dst := out.Data.([]uint16)
	d := x.DType
	parallelRange(len(dst), parallelGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			h := xs[i]
			if h&0x8000 == 0 && h&0x7fff != 0 && kern.HalfToFloat32At(d, h) > 0 {
				dst[i] = ds[i]
			} else {
				dst[i] = 0
			}
		}
	})
	return []*graph.Tensor{out}, true, nil
}
