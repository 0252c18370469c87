package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// numOp names a unary op defined for every numeric dtype.
type numOp int

const (
	opAbs numOp = iota
	opNeg
	opSign
	opRelu
)

func init() {
	for op, code := range map[string]numOp{"Abs": opAbs, "Neg": opNeg, "Sign": opSign, "Relu": opRelu} {
		kern.Register(op, numUnaryKernel(code))
	}
	kern.Register("Shrink", shrinkKernel)
	kern.Register("IsNaN", isNaNKernel)
	kern.Register("IsInf", isInfKernel)
	kern.Register("Not", notKernel)
	kern.Register("BitwiseNot", bitwiseNotKernel)
}

// numUnaryLoop applies op to src. For unsigned types Abs and Relu are the
// identity and Neg wraps around, like numpy.
func numUnaryLoop[T number](op numOp, dst, src []T) {
	dst = dst[:len(src)]
	var zero T
	switch op {
	case opAbs:
		if isFloatSlice(src) {
			// math.Abs also clears the sign of -0 and of NaN.
			for i, v := range src {
				dst[i] = T(math.Abs(float64(v)))
			}
			return
		}
		for i, v := range src {
			if v < zero {
				v = -v
			}
			dst[i] = v
		}
	case opNeg:
		for i, v := range src {
			dst[i] = -v
		}
	case opSign:
		for i, v := range src {
			switch {
			case v > zero:
				dst[i] = 1
			case v < zero:
				dst[i] = zero - 1
			default:
				dst[i] = v // 0 stays 0, NaN stays NaN
			}
		}
	case opRelu:
		for i, v := range src {
			if v < zero {
				v = zero
			}
			dst[i] = v
		}
	}
}

// mapNumeric allocates an output like x and applies op; it fails for
// non-numeric dtypes.
func mapNumeric(n *graph.Node, x *graph.Tensor, op numOp) (*graph.Tensor, error) {
	if !isNumeric(x) {
		return nil, errDType(n, x)
	}
	if err := x.Validate(); err != nil {
		return nil, n.Errorf("input 0: %v", err)
	}
	out, err := newFull(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	if src, ok := x.Data.([]float32); ok && op == opRelu {
		// The task in a box, not a closure: the call allocates nothing.
		t := kern.TakeBox[reluTask]()
		*t = reluTask{dst: out.Data.([]float32), src: src}
		parallelTask(len(src), parallelGrain, t)
		kern.PutBox(t)
		return out, nil
	}
	switch src := x.Data.(type) {
	case []float32:
		numUnaryLoop(op, out.Data.([]float32), src)
	case []float64:
		numUnaryLoop(op, out.Data.([]float64), src)
	case []int8:
		numUnaryLoop(op, out.Data.([]int8), src)
	case []int16:
		numUnaryLoop(op, out.Data.([]int16), src)
	case []int32:
		numUnaryLoop(op, out.Data.([]int32), src)
	case []int64:
		numUnaryLoop(op, out.Data.([]int64), src)
	case []uint8:
		numUnaryLoop(op, out.Data.([]uint8), src)
	case []uint16:
		numUnaryLoop(op, out.Data.([]uint16), src)
	case []uint32:
		numUnaryLoop(op, out.Data.([]uint32), src)
	case []uint64:
		numUnaryLoop(op, out.Data.([]uint64), src)
	}
	return out, nil
}

// reluTask is the float32 Relu over a range of elements.
type reluTask struct{ dst, src []float32 }

func (t *reluTask) Chunk(lo, hi int) { reluF32(t.dst[lo:hi], t.src[lo:hi]) }

// numUnaryKernel is the kernel of Abs, Neg, Sign or Relu.
func numUnaryKernel(op numOp) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		out, err := mapNumeric(n, in[0], op)
		if err != nil {
			return nil, err
		}
		return kern.Results(n, out), nil
	}
}

// shrinkLoop is Shrink: x+bias below -lambd, x-bias above lambd, else 0.
func shrinkLoop[T number](dst, src []T, lambd, bias float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		x := float64(v)
		switch {
		case x < -lambd:
			dst[i] = T(x + bias)
		case x > lambd:
			dst[i] = T(x - bias)
		default:
			dst[i] = 0
		}
	}
}

func shrinkKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !isNumeric(x) {
		return nil, errDType(n, x)
	}
	if err := x.Validate(); err != nil {
		return nil, n.Errorf("input 0: %v", err)
	}
	lambd := float64(n.AttrFloat("lambd", 0.5))
	bias := float64(n.AttrFloat("bias", 0))
	out, err := newLike(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch src := x.Data.(type) {
	case []float32:
		shrinkLoop(out.Data.([]float32), src, lambd, bias)
	case []float64:
		shrinkLoop(out.Data.([]float64), src, lambd, bias)
	case []int8:
		shrinkLoop(out.Data.([]int8), src, lambd, bias)
	case []int16:
		shrinkLoop(out.Data.([]int16), src, lambd, bias)
	case []int32:
		shrinkLoop(out.Data.([]int32), src, lambd, bias)
	case []int64:
		shrinkLoop(out.Data.([]int64), src, lambd, bias)
	case []uint8:
		shrinkLoop(out.Data.([]uint8), src, lambd, bias)
	case []uint16:
		shrinkLoop(out.Data.([]uint16), src, lambd, bias)
	case []uint32:
		shrinkLoop(out.Data.([]uint32), src, lambd, bias)
	case []uint64:
		shrinkLoop(out.Data.([]uint64), src, lambd, bias)
	}
	return one(out), nil
}

// floatPredicate maps a float tensor to a bool tensor with pred.
func floatPredicate(n *graph.Node, x *graph.Tensor, pred func(float64) bool) (*graph.Tensor, error) {
	if err := x.Validate(); err != nil {
		return nil, n.Errorf("input 0: %v", err)
	}
	out, err := newLike(n, graph.Bool, x.Shape)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]bool)
	switch src := x.Data.(type) {
	case []float32:
		for i, v := range src {
			dst[i] = pred(float64(v))
		}
	case []float64:
		for i, v := range src {
			dst[i] = pred(v)
		}
	default:
		return nil, errDType(n, x)
	}
	return out, nil
}

func isNaNKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	out, err := floatPredicate(n, in[0], math.IsNaN)
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

func isInfKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	neg := n.AttrInt("detect_negative", 1) != 0
	pos := n.AttrInt("detect_positive", 1) != 0
	out, err := floatPredicate(n, in[0], func(x float64) bool {
		return pos && math.IsInf(x, 1) || neg && math.IsInf(x, -1)
	})
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

func notKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	src, ok := x.Data.([]bool)
	if !ok || x.DType != graph.Bool {
		return nil, errDType(n, x)
	}
	if len(src) != x.Size() {
		return nil, n.Errorf("input of shape %v holds %d elements", x.Shape, len(src))
	}
	out, err := newLike(n, graph.Bool, x.Shape)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]bool)
	for i, v := range src {
		dst[i] = !v
	}
	return one(out), nil
}

// notLoop complements every bit.
func notLoop[T integer](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = ^v
	}
}

func bitwiseNotKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.DType.IsInt() {
		return nil, errDType(n, x)
	}
	if err := x.Validate(); err != nil {
		return nil, n.Errorf("input 0: %v", err)
	}
	out, err := newLike(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch src := x.Data.(type) {
	case []int8:
		notLoop(out.Data.([]int8), src)
	case []int16:
		notLoop(out.Data.([]int16), src)
	case []int32:
		notLoop(out.Data.([]int32), src)
	case []int64:
		notLoop(out.Data.([]int64), src)
	case []uint8:
		notLoop(out.Data.([]uint8), src)
	case []uint16:
		notLoop(out.Data.([]uint16), src)
	case []uint32:
		notLoop(out.Data.([]uint32), src)
	case []uint64:
		notLoop(out.Data.([]uint64), src)
	}
	return one(out), nil
}
