package graph

import "math"

// Lowerings of ops that backends used to implement directly (the primitive
// set before it shrank to PrimitiveOps) and of further ONNX ops, written in
// the primitive set. Backends keep their direct kernels as fast paths: these
// forms run where a backend lacks the kernel or is restricted to the
// primitive set (backend.CompileOptions.PrimitivesOnly).

func init() {
	registerTyped("Neg", lowerNeg)
	registerTyped("Abs", lowerAbs)
	registerTyped("Reciprocal", lowerReciprocal)
	registerTyped("Relu", lowerRelu)
	registerTyped("Sigmoid", lowerSigmoid)
	registerTyped("Not", lowerNot)
	registerTyped("And", lowerAnd)
	registerTyped("Or", lowerOr)
	registerTyped("Greater", lowerGreater)
	registerTyped("Ceil", lowerCeil)
	registerTyped("ReduceMean", lowerReduceMean)
	registerTyped("ReduceMin", lowerReduceMin)
	registerTyped("ArgMin", lowerArgMin)
	registerTyped("Softmax", lowerSoftmax(false))
	registerTyped("LogSoftmax", lowerSoftmax(true))
	registerTyped("Constant", lowerConstant)
}

// isUnsigned reports whether d is an unsigned integer type.
func isUnsigned(d DType) bool {
	switch d {
	case Uint8, Uint16, Uint32, Uint64:
		return true
	}
	return false
}

// maxOfUnsigned is the largest value of an unsigned integer type.
func maxOfUnsigned(d DType) float64 {
	switch d {
	case Uint8:
		return math.MaxUint8
	case Uint16:
		return math.MaxUint16
	case Uint32:
		return math.MaxUint32
	}
	return math.MaxUint64
}

// neg is Mul(x, -1): exact, and the sign of zero flips as with negation.
func (l *lowering) neg(x string) string { return l.negLike(x, x) }

// negLike negates v with a -1 of like's dtype (for values a lowering made,
// whose type it does not know).
func (l *lowering) negLike(v, like string) string { return l.mul(v, l.scalar(like, -1)) }

func lowerNeg(l *lowering) error {
	if isUnsigned(l.dtype(l.in(0))) {
		return l.unsupported("Neg of an unsigned integer")
	}
	l.finish(0, l.neg(l.in(0)))
	return nil
}

func lowerAbs(l *lowering) error {
	x := l.in(0)
	switch d := l.dtype(x); {
	case isUnsigned(d):
		l.finish(0, l.op("Identity", x))
		return nil
	case d == Bool:
		return l.unsupported("Abs of bool")
	}
	l.finish(0, l.op("Max", x, l.neg(x)))
	return nil
}

func lowerReciprocal(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.div(l.scalar(x, 1), x))
	return nil
}

func lowerRelu(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.op("Max", x, l.scalar(x, 0)))
	return nil
}

// lowerSigmoid is 1 / (1 + exp(-x)): exp(-x) overflowing to +Inf gives 0.
func lowerSigmoid(l *lowering) error {
	x := l.in(0)
	one := l.scalar(x, 1)
	l.finish(0, l.div(one, l.add(one, l.op("Exp", l.neg(x)))))
	return nil
}

func (l *lowering) boolConst(v bool) string {
	return l.b.Const(&Tensor{DType: Bool, Shape: []int{}, Data: []bool{v}})
}

func lowerNot(l *lowering) error {
	l.finish(0, l.op("Equal", l.in(0), l.boolConst(false)))
	return nil
}

// lowerAnd is Where(a, b, false), broadcast like And.
func lowerAnd(l *lowering) error {
	l.finish(0, l.op("Where", l.in(0), l.in(1), l.boolConst(false)))
	return nil
}

// lowerOr is Where(a, true, b).
func lowerOr(l *lowering) error {
	l.finish(0, l.op("Where", l.in(0), l.boolConst(true), l.in(1)))
	return nil
}

func lowerGreater(l *lowering) error {
	l.finish(0, l.op("Less", l.in(1), l.in(0)))
	return nil
}

// lowerCeil is -floor(-x).
func lowerCeil(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.negLike(l.op("Floor", l.neg(x)), x))
	return nil
}

// lowerReduceMean divides the sum by the number of elements each output
// element covers: a constant when the input shape is known, otherwise the
// same reduction over ones of the input's shape (folded once shapes are).
func lowerReduceMean(l *lowering) error {
	x := l.in(0)
	axes := l.sourceAxes()
	keep := l.keepdims()
	if axes.noop && axes.input == "" && axes.list == nil {
		l.finish(0, l.op("Identity", x))
		return nil
	}
	sum, err := l.reduce("ReduceSum", x, axes, keep)
	if err != nil {
		return err
	}
	var count string
	if s, ok := l.staticShape(x); ok && (axes.input == "" || l.constant(axes.input) != nil) {
		list := axes.list
		if axes.input != "" {
			t := l.constant(axes.input)
			list = make([]int64, t.Size())
			for i := range list {
				list[i] = t.Int(i)
			}
		}
		n := int64(1)
		if len(list) == 0 {
			for _, d := range s {
				n *= d
			}
		} else {
			for _, a := range list {
				if a < 0 {
					a += int64(len(s))
				}
				if a < 0 || a >= int64(len(s)) {
					return l.unsupported("axis %d out of range for rank %d", a, len(s))
				}
				n *= s[a]
			}
		}
		count = l.scalar(x, float64(n))
	} else {
		if l.opset() > 0 && l.opset() < 8 {
			return l.unsupported("ReduceMean of an unknown shape before opset 8 (no Expand)")
		}
		ones := l.op("Expand", l.scalar(x, 1), l.op("Shape", x))
		if count, err = l.reduce("ReduceSum", ones, axes, keep); err != nil {
			return err
		}
	}
	l.finish(0, l.div(sum, count))
	return nil
}

// lowerReduceMin is -max(-x) (bool: not max(not x); unsigned:
// M - max(M - x) with M the type's largest value).
func lowerReduceMin(l *lowering) error {
	x := l.in(0)
	axes := l.sourceAxes()
	keep := l.keepdims()
	d := l.dtype(x)
	var flip func(string) string
	switch {
	case d == Bool:
		flip = func(v string) string { return l.op("Equal", v, l.boolConst(false)) }
	case isUnsigned(d):
		m := l.scalar(x, maxOfUnsigned(d))
		flip = func(v string) string { return l.sub(m, v) }
	default:
		flip = func(v string) string { return l.negLike(v, x) }
	}
	y, err := l.reduce("ReduceMax", flip(x), axes, keep)
	if err != nil {
		return err
	}
	l.finish(0, flip(y))
	return nil
}

// lowerArgMin is ArgMax of the negated input (unsigned: of M - x), which has
// its minima at the same indices, ties included.
func lowerArgMin(l *lowering) error {
	x := l.in(0)
	d := l.dtype(x)
	var f string
	switch {
	case isUnsigned(d):
		f = l.sub(l.scalar(x, maxOfUnsigned(d)), x)
	case d == Bool:
		f = l.op("Equal", x, l.boolConst(false))
	case d.IsInt():
		// -MinInt wraps to itself: compare as float64 (exact below 2**53).
		return l.unsupported("ArgMin of %v", d)
	default:
		f = l.neg(x)
	}
	var attrs []*Attr
	for _, name := range []string{"axis", "keepdims", "select_last_index"} {
		if a := l.n.Attr(name); a != nil {
			attrs = append(attrs, a)
		}
	}
	l.finish(0, l.opAttrs("ArgMax", []string{f}, attrs...))
	return nil
}

// lowerSoftmax is exp(x - max) / sum(exp(x - max)) along axis (log: x - max -
// log(sum)); before opset 13 over the flattened dims from axis on.
func lowerSoftmax(logOf bool) loweringFunc {
	return func(l *lowering) error {
		x := l.in(0)
		legacy := l.opset() > 0 && l.opset() < 13
		axis := l.n.AttrInt("axis", -1)
		if legacy {
			axis = l.n.AttrInt("axis", 1)
		}
		v := x
		if legacy {
			r := l.rank(x)
			if axis < 0 && r < 0 {
				return l.unsupported("negative axis on an input of unknown rank")
			}
			if axis < 0 {
				axis += int64(r)
			}
			if r < 0 || axis != int64(r-1) {
				// Coerce to 2-D at axis and normalise its second dim.
				v = l.opAttrs("Flatten", []string{x}, IntAttr("axis", axis))
				axis = 1
			}
		}
		ax := reduceAxes{list: []int64{axis}}
		m, err := l.reduce("ReduceMax", v, ax, true)
		if err != nil {
			return err
		}
		shifted := l.sub(v, m)
		e := l.op("Exp", shifted)
		s, err := l.reduce("ReduceSum", e, ax, true)
		if err != nil {
			return err
		}
		var y string
		if logOf {
			y = l.sub(shifted, l.op("Log", s))
		} else {
			y = l.div(e, s)
		}
		if v != x {
			if y, err = l.reshapeTo(y, l.op("Shape", x)); err != nil {
				return err
			}
		}
		l.finish(0, y)
		return nil
	}
}

// lowerConstant makes the constant an initializer that an Identity copies.
func lowerConstant(l *lowering) error {
	var t *Tensor
	switch {
	case l.n.Attr("value") != nil:
		t = l.n.Attr("value").T
	case l.n.Attr("value_float") != nil:
		t = Scalar(Float32, float64(l.n.Attr("value_float").F))
	case l.n.Attr("value_floats") != nil:
		f := l.n.Attr("value_floats").Floats
		t = FromFloat32(append([]float32{}, f...), len(f))
	case l.n.Attr("value_int") != nil:
		t = &Tensor{DType: Int64, Shape: []int{}, Data: []int64{l.n.Attr("value_int").I}}
	case l.n.Attr("value_ints") != nil:
		v := l.n.Attr("value_ints").Ints
		t = FromInt64(append([]int64{}, v...), len(v))
	}
	if t == nil || t.DType == String {
		return l.unsupported("Constant without a numeric value, value_float(s) or value_int(s)")
	}
	l.b.OpTo("Identity", []string{l.b.Const(t)}, []string{l.n.Outputs[0]})
	return nil
}
