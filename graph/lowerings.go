package graph

import (
	"errors"
	"fmt"
	"math"
)

// Lowerings of composite ONNX ops to the primitive set.
//
// Each lowering emits primitives only (see Primitives) and writes the
// node's own output names. Scalar constants take the dtype of the value they
// combine with when the caller knows it (LowerWithTypes, LowerGraph), and
// float32 otherwise (graph.Lower, which sees one node and no types): the
// untyped form is right for float32 and, on backends that compute half
// types in float32, for float16 and bfloat16.
//
// Some lowerings need a rank (a positive LayerNormalization axis, Squeeze
// without axes, GlobalAveragePool): with types they use it, without they
// compute shapes at run time (Shape → Slice → Concat → Reshape), which
// Specialize folds away once input shapes are known.

// loweringFunc is a lowering that may consult the types of values.
type loweringFunc func(l *lowering) error

// typedLowerings holds every lowering this file registers, for
// LowerWithTypes and LowerGraph.
var typedLowerings = map[string]loweringFunc{}

func registerTyped(op string, f loweringFunc) {
	typedLowerings[op] = f
	RegisterLowering(op, func(n *Node, b *Builder) error {
		return f(&lowering{n: n, b: b})
	})
}

func init() {
	registerTyped("Gemm", lowerGemm)
	registerTyped("Softplus", lowerSoftplus)
	registerTyped("Softsign", lowerSoftsign)
	registerTyped("Elu", lowerElu)
	registerTyped("Selu", lowerSelu)
	registerTyped("Celu", lowerCelu)
	registerTyped("LeakyRelu", lowerLeakyRelu)
	registerTyped("PRelu", lowerPRelu)
	registerTyped("HardSigmoid", lowerHardSigmoid)
	registerTyped("HardSwish", lowerHardSwish)
	registerTyped("ThresholdedRelu", lowerThresholdedRelu)
	registerTyped("Shrink", lowerShrink)
	registerTyped("Mish", lowerMish)
	registerTyped("Gelu", lowerGelu)
	registerTyped("Clip", lowerClip)
	registerTyped("Sum", lowerSum)
	registerTyped("Mean", lowerMean)
	registerTyped("Sign", lowerSign)
	registerTyped("IsNaN", lowerIsNaN)
	registerTyped("IsInf", lowerIsInf)
	registerTyped("Xor", lowerXor)
	registerTyped("LessOrEqual", lowerOrEqual("Less"))
	registerTyped("GreaterOrEqual", lowerOrEqual("Greater"))
	registerTyped("Tan", lowerTan)
	registerTyped("Sinh", lowerSinh)
	registerTyped("Cosh", lowerCosh)
	registerTyped("Asinh", lowerAsinh)
	registerTyped("Acosh", lowerAcosh)
	registerTyped("Atanh", lowerAtanh)
	registerTyped("ReduceL1", lowerReduceL1)
	registerTyped("ReduceL2", lowerReduceL2)
	registerTyped("ReduceSumSquare", lowerReduceSumSquare)
	registerTyped("ReduceLogSum", lowerReduceLogSum)
	registerTyped("ReduceLogSumExp", lowerReduceLogSumExp)
	registerTyped("LpNormalization", lowerLpNormalization)
	registerTyped("LayerNormalization", lowerLayerNorm)
	registerTyped("BatchNormalization", lowerBatchNorm)
	registerTyped("InstanceNormalization", lowerInstanceNorm)
	registerTyped("GlobalAveragePool", lowerGlobalPool("ReduceMean"))
	registerTyped("GlobalMaxPool", lowerGlobalPool("ReduceMax"))
	registerTyped("Flatten", lowerFlatten)
	registerTyped("Squeeze", lowerSqueeze)
	registerTyped("Unsqueeze", lowerUnsqueeze)
	registerTyped("Dropout", lowerDropout)
	registerTyped("ConstantOfShape", lowerConstantOfShape)
	registerTyped("CastLike", lowerCastLike)
}

// LowerWithTypes is Lower with what is known about the node's inputs at
// hand: typeOf returns a value's type and constOf its tensor when it is a
// constant (either returns nil when it does not know; either may be nil).
// Scalar constants then get the dtype of the values they combine with,
// rank-dependent ops use the rank, and inputs such as Squeeze's axes or
// Dropout's training_mode may be constants rather than attributes.
func LowerWithTypes(n *Node, opset int64, typeOf func(name string) *Type, constOf func(name string) *Tensor) (nodes []*Node, consts map[string]*Tensor, ok bool, err error) {
	f, ok := typedLowerings[n.OpType]
	if n.Domain != "" && n.Domain != "ai.onnx" {
		f, ok = domainLowerings[n.Domain+":"+n.OpType]
	}
	if !ok {
		return Lower(n, opset)
	}
	b := NewBuilder(n.Label(), opset)
	if err := f(&lowering{n: n, b: b, typeOf: typeOf, constOf: constOf}); err != nil {
		return nil, nil, true, err
	}
	return b.Nodes, b.Consts, true, nil
}

// LowerGraph replaces, in g's top-level node list, every node for which
// keep returns false by its lowering, recursively (a node a lowering emits
// is itself lowered when keep rejects it), using the types InferShapes finds
// and the graph's constants. A node keep rejects that has no lowering is an
// error wrapping ErrUnsupportedOp. Subgraphs are left as they are.
func LowerGraph(g *Graph, opset int64, keep func(n *Node) bool) error {
	return LowerGraphFallback(g, opset, keep, nil)
}

// LowerGraphFallback is LowerGraph where a node whose lowering is missing
// or refuses (ErrUnsupportedOp) is kept as it is when fallback (non-nil)
// returns true for it; any other error still fails.
func LowerGraphFallback(g *Graph, opset int64, keep func(n *Node) bool, fallback func(n *Node, err error) bool) error {
	st, _ := inferGraph(g, opset, nil, true)
	typeOf := func(name string) *Type { return st.types[name] }
	var out []*Node
	var visit func(n *Node, depth int) error
	visit = func(n *Node, depth int) error {
		if keep(n) {
			out = append(out, n)
			return nil
		}
		refused := func(err error) error {
			if fallback != nil && errors.Is(err, ErrUnsupportedOp) && fallback(n, err) {
				out = append(out, n)
				return nil
			}
			return err
		}
		f, ok := typedLowerings[n.OpType]
		if n.Domain != "" && n.Domain != "ai.onnx" {
			f, ok = domainLowerings[n.Domain+":"+n.OpType]
		}
		if !ok {
			sub, consts, has, err := Lower(n, opset)
			if err != nil {
				return refused(err)
			}
			if !has {
				dom := n.Domain
				if dom == "" {
					dom = "ai.onnx"
				}
				return refused(n.Errorf("%w: no kernel for %s (domain %s, opset %d) and no lowering", ErrUnsupportedOp, n.OpType, dom, opset))
			}
			return emitLowered(g, st, sub, consts, depth, visit)
		}
		if depth > 16 {
			return n.Errorf("lowering recursed too deep")
		}
		b := NewBuilder(n.Label(), opset)
		l := &lowering{n: n, b: b, typeOf: typeOf, constOf: func(name string) *Tensor { return st.consts[name] }}
		if err := f(l); err != nil {
			return refused(err)
		}
		return emitLowered(g, st, b.Nodes, b.Consts, depth, visit)
	}
	for _, n := range g.Nodes {
		if err := visit(n, 0); err != nil {
			return err
		}
	}
	g.Nodes = out
	return nil
}

// emitLowered adds a lowering's constants to g, infers the types of the
// values it introduces and visits its nodes.
func emitLowered(g *Graph, st *inferState, nodes []*Node, consts map[string]*Tensor, depth int, visit func(*Node, int) error) error {
	for k, v := range consts {
		g.Initializers[k] = v
		st.types[k] = typeOfTensor(v)
		st.setConst(k, v)
	}
	for _, s := range nodes {
		// Inference is advisory here: kernels report real shape errors.
		_ = st.inferNode(s)
		if err := visit(s, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// lowering is one node being lowered.
type lowering struct {
	n       *Node
	b       *Builder
	typeOf  func(string) *Type
	constOf func(string) *Tensor
}

func (l *lowering) opset() int64 { return l.b.Opset }

func (l *lowering) in(i int) string { return l.n.Input(i) }

// typ is the type of a value, nil when unknown.
func (l *lowering) typ(name string) *Type {
	if l.typeOf == nil || name == "" {
		return nil
	}
	return l.typeOf(name)
}

// dtype is a value's dtype, Undefined when unknown.
func (l *lowering) dtype(name string) DType {
	if t := l.typ(name); t != nil {
		return t.DType
	}
	return Undefined
}

// rank is a value's rank, -1 when unknown.
func (l *lowering) rank(name string) int {
	if t := l.typ(name); t != nil && t.HasShape {
		return len(t.Shape)
	}
	return -1
}

// staticShape is a value's shape when every dim is known.
func (l *lowering) staticShape(name string) ([]int64, bool) {
	t := l.typ(name)
	if t == nil || !t.HasShape {
		return nil, false
	}
	out := make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		if !d.Known {
			return nil, false
		}
		out[i] = d.Value
	}
	return out, true
}

// constant is a value's tensor when it is a known constant.
func (l *lowering) constant(name string) *Tensor {
	if l.constOf == nil || name == "" {
		return nil
	}
	return l.constOf(name)
}

// unsupported is the error for a variant the lowering does not cover.
func (l *lowering) unsupported(format string, args ...any) error {
	return l.n.Errorf("%w: lowering: %s", ErrUnsupportedOp, fmt.Sprintf(format, args...))
}

func (l *lowering) op(op string, inputs ...string) string { return l.b.Op(op, inputs) }

func (l *lowering) opAttrs(op string, inputs []string, attrs ...*Attr) string {
	return l.b.Op(op, inputs, attrs...)
}

// scalar is a rank-0 constant with like's dtype (float32 when unknown).
func (l *lowering) scalar(like string, v float64) string {
	dt := l.dtype(like)
	if dt == Undefined || dt == String || dt == Complex64 || dt == Complex128 {
		dt = Float32
	}
	return l.b.Const(Scalar(dt, v))
}

// scalarOf is a rank-0 constant of dtype dt (float32 when Undefined).
func (l *lowering) scalarOf(dt DType, v float64) string {
	if dt == Undefined {
		dt = Float32
	}
	return l.b.Const(Scalar(dt, v))
}

// int64s is a constant int64 vector.
func (l *lowering) int64s(v ...int64) string {
	return l.b.Const(FromInt64(append([]int64{}, v...), len(v)))
}

// finish makes output i of the node hold value v: the node that produced v
// is renamed to write the output, or an Identity copies it.
func (l *lowering) finish(i int, v string) {
	if i >= len(l.n.Outputs) || l.n.Outputs[i] == "" {
		return
	}
	out := l.n.Outputs[i]
	var producer *Node
	used := false
	for _, e := range l.b.Nodes {
		for _, in := range e.Inputs {
			used = used || in == v
		}
		if len(e.Outputs) == 1 && e.Outputs[0] == v {
			producer = e
		}
	}
	if producer != nil && !used {
		producer.Outputs[0] = out
		return
	}
	l.b.OpTo("Identity", []string{v}, []string{out})
}

// binary helpers.
func (l *lowering) add(a, b string) string { return l.op("Add", a, b) }
func (l *lowering) sub(a, b string) string { return l.op("Sub", a, b) }
func (l *lowering) mul(a, b string) string { return l.op("Mul", a, b) }
func (l *lowering) div(a, b string) string { return l.op("Div", a, b) }

// reshape reshapes x to a constant target.
func (l *lowering) reshape(x string, target ...int64) string {
	if l.opset() > 0 && l.opset() < 5 {
		return l.opAttrs("Reshape", []string{x}, IntsAttr("shape", target...))
	}
	return l.op("Reshape", x, l.int64s(target...))
}

// reshapeTo reshapes x to a run-time shape value.
func (l *lowering) reshapeTo(x, shape string) (string, error) {
	if l.opset() > 0 && l.opset() < 5 {
		return "", l.unsupported("Reshape takes its shape as an attribute before opset 5")
	}
	return l.op("Reshape", x, shape), nil
}

// slice1D takes elements [start, end) of a 1-D value.
func (l *lowering) slice1D(x string, start, end int64) string {
	if l.opset() > 0 && l.opset() < 10 {
		return l.opAttrs("Slice", []string{x}, IntsAttr("starts", start), IntsAttr("ends", end), IntsAttr("axes", 0))
	}
	return l.op("Slice", x, l.int64s(start), l.int64s(end), l.int64s(0))
}

// concat1D concatenates 1-D values.
func (l *lowering) concat1D(parts ...string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	return l.opAttrs("Concat", parts, IntAttr("axis", 0))
}

// reduceAxes says which axes a reduction covers: a constant list, a run-time
// input, or (neither) all of them.
type reduceAxes struct {
	list  []int64
	input string
	noop  bool
}

// reduce emits a ReduceSum/ReduceMean/ReduceMax in the form the opset
// wants: axes as an attribute or as an input.
func (l *lowering) reduce(op, x string, axes reduceAxes, keep bool) (string, error) {
	inputFrom := int64(18)
	if op == "ReduceSum" {
		inputFrom = 13
	}
	keepAttr := IntAttr("keepdims", b2i(keep))
	if l.opset() >= inputFrom || l.opset() == 0 {
		inputs := []string{x}
		switch {
		case axes.input != "":
			inputs = append(inputs, axes.input)
		case axes.list != nil:
			inputs = append(inputs, l.int64s(axes.list...))
		}
		attrs := []*Attr{keepAttr}
		if axes.noop {
			attrs = append(attrs, IntAttr("noop_with_empty_axes", 1))
		}
		return l.opAttrs(op, inputs, attrs...), nil
	}
	if axes.input != "" {
		t := l.constant(axes.input)
		if t == nil {
			return "", l.unsupported("axes computed at run time for %s at opset %d", op, l.opset())
		}
		axes.list = make([]int64, t.Size())
		for i := range axes.list {
			axes.list[i] = t.Int(i)
		}
	}
	attrs := []*Attr{keepAttr}
	switch {
	case len(axes.list) > 0:
		attrs = append(attrs, IntsAttr("axes", axes.list...))
	case axes.noop:
		// Empty axes with noop_with_empty_axes: the input unchanged.
		return l.op("Identity", x), nil
	}
	// No axes attribute reduces over every axis.
	return l.opAttrs(op, []string{x}, attrs...), nil
}

// sourceAxes reads the axes of a Reduce* node whose axes became an input at
// opset 18.
func (l *lowering) sourceAxes() reduceAxes {
	if l.opset() >= 18 || (l.in(1) != "" && !l.n.HasAttr("axes")) {
		return reduceAxes{input: l.in(1), noop: l.n.AttrInt("noop_with_empty_axes", 0) != 0}
	}
	if a := l.n.Attr("axes"); a != nil {
		return reduceAxes{list: append([]int64{}, a.Ints...)}
	}
	return reduceAxes{}
}

func (l *lowering) keepdims() bool { return l.n.AttrInt("keepdims", 1) != 0 }

// lessThanZero is x < 0.
func (l *lowering) lessThanZero(x string) string { return l.op("Less", x, l.scalar(x, 0)) }

// --- activations ---

func lowerGemm(l *lowering) error {
	// Before opset 7, C broadcasts only with broadcast=1 and must otherwise
	// have the output's shape: numpy broadcasting covers both.
	a, b := l.in(0), l.in(1)
	if l.n.AttrInt("transA", 0) != 0 {
		a = l.opAttrs("Transpose", []string{a}, IntsAttr("perm", 1, 0))
	}
	if l.n.AttrInt("transB", 0) != 0 {
		b = l.opAttrs("Transpose", []string{b}, IntsAttr("perm", 1, 0))
	}
	y := l.op("MatMul", a, b)
	if alpha := l.n.AttrFloat("alpha", 1); alpha != 1 {
		y = l.mul(y, l.scalar(l.in(0), float64(alpha)))
	}
	if c := l.in(2); c != "" {
		if beta := l.n.AttrFloat("beta", 1); beta != 0 {
			if beta != 1 {
				c = l.mul(c, l.scalar(l.in(0), float64(beta)))
			}
			y = l.add(y, c)
		}
	}
	l.finish(0, y)
	return nil
}

// softplus is max(x, 0) + log(1 + exp(-|x|)), which is log(1 + exp(x))
// without overflow.
func (l *lowering) softplus(x string) string {
	e := l.op("Exp", l.op("Neg", l.op("Abs", x)))
	return l.add(l.op("Relu", x), l.op("Log", l.add(e, l.scalar(x, 1))))
}

func lowerSoftplus(l *lowering) error {
	l.finish(0, l.softplus(l.in(0)))
	return nil
}

func lowerSoftsign(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.div(x, l.add(l.op("Abs", x), l.scalar(x, 1))))
	return nil
}

func lowerElu(l *lowering) error {
	x := l.in(0)
	alpha := float64(l.n.AttrFloat("alpha", 1))
	neg := l.mul(l.sub(l.op("Exp", x), l.scalar(x, 1)), l.scalar(x, alpha))
	l.finish(0, l.op("Where", l.lessThanZero(x), neg, x))
	return nil
}

func lowerSelu(l *lowering) error {
	x := l.in(0)
	alpha := float64(l.n.AttrFloat("alpha", 1.67326319217681884765625))
	gamma := float64(l.n.AttrFloat("gamma", 1.05070102214813232421875))
	a := l.scalar(x, alpha)
	neg := l.sub(l.mul(l.op("Exp", x), a), a)
	pos := l.op("Greater", x, l.scalar(x, 0))
	l.finish(0, l.mul(l.op("Where", pos, x, neg), l.scalar(x, gamma)))
	return nil
}

func lowerCelu(l *lowering) error {
	x := l.in(0)
	alpha := float64(l.n.AttrFloat("alpha", 1))
	a := l.scalar(x, alpha)
	neg := l.mul(l.sub(l.op("Exp", l.div(x, a)), l.scalar(x, 1)), a)
	l.finish(0, l.add(l.op("Relu", x), l.op("Min", neg, l.scalar(x, 0))))
	return nil
}

func lowerLeakyRelu(l *lowering) error {
	x := l.in(0)
	alpha := float64(l.n.AttrFloat("alpha", 0.01))
	l.finish(0, l.op("Where", l.lessThanZero(x), l.mul(x, l.scalar(x, alpha)), x))
	return nil
}

func lowerPRelu(l *lowering) error {
	x, slope := l.in(0), l.in(1)
	if l.opset() > 0 && l.opset() < 7 {
		// Before opset 7 a 1-D slope of C values applies along axis 1 (the
		// kernel's reading): view it as [C, 1, ..., 1].
		xs, ok := l.staticShape(x)
		ss, ok2 := l.staticShape(slope)
		if !ok || !ok2 {
			return l.unsupported("PRelu before opset 7 needs static shapes to place the slope")
		}
		if len(ss) == 1 && len(xs) > 2 && ss[0] == xs[1] && ss[0] != xs[len(xs)-1] {
			view := []int64{ss[0]}
			for len(view) < len(xs)-1 {
				view = append(view, 1)
			}
			slope = l.reshape(slope, view...)
		}
	}
	l.finish(0, l.op("Where", l.lessThanZero(x), l.mul(x, slope), x))
	return nil
}

// hardSigmoid is max(0, min(1, alpha*x + beta)).
func (l *lowering) hardSigmoid(x string, alpha, beta float64) string {
	y := l.add(l.mul(x, l.scalar(x, alpha)), l.scalar(x, beta))
	return l.op("Max", l.op("Min", y, l.scalar(x, 1)), l.scalar(x, 0))
}

func lowerHardSigmoid(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.hardSigmoid(x, float64(l.n.AttrFloat("alpha", 0.2)), float64(l.n.AttrFloat("beta", 0.5))))
	return nil
}

func lowerHardSwish(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.mul(x, l.hardSigmoid(x, 1.0/6, 0.5)))
	return nil
}

func lowerThresholdedRelu(l *lowering) error {
	x := l.in(0)
	alpha := float64(l.n.AttrFloat("alpha", 1))
	l.finish(0, l.op("Where", l.op("Greater", x, l.scalar(x, alpha)), x, l.scalar(x, 0)))
	return nil
}

func lowerShrink(l *lowering) error {
	x := l.in(0)
	lambd := float64(l.n.AttrFloat("lambd", 0.5))
	bias := float64(l.n.AttrFloat("bias", 0))
	if !(l.dtype(x).IsFloat() || l.dtype(x) == Undefined) {
		return l.unsupported("Shrink of %v", l.dtype(x))
	}
	below := l.op("Less", x, l.scalar(x, -lambd))
	above := l.op("Greater", x, l.scalar(x, lambd))
	hi := l.op("Where", above, l.sub(x, l.scalar(x, bias)), l.scalar(x, 0))
	l.finish(0, l.op("Where", below, l.add(x, l.scalar(x, bias)), hi))
	return nil
}

func lowerMish(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.mul(x, l.op("Tanh", l.softplus(x))))
	return nil
}

func lowerGelu(l *lowering) error {
	x := l.in(0)
	half := l.mul(x, l.scalar(x, 0.5))
	var inner string
	switch approx := l.n.AttrString("approximate", "none"); approx {
	case "none":
		inner = l.op("Erf", l.mul(x, l.scalar(x, 1/math.Sqrt2)))
	case "tanh":
		cube := l.mul(l.mul(x, x), x)
		arg := l.mul(l.add(x, l.mul(cube, l.scalar(x, 0.044715))), l.scalar(x, math.Sqrt(2/math.Pi)))
		inner = l.op("Tanh", arg)
	default:
		return l.unsupported("approximate=%q", approx)
	}
	l.finish(0, l.mul(half, l.add(inner, l.scalar(x, 1))))
	return nil
}

func lowerClip(l *lowering) error {
	x := l.in(0)
	var lo, hi string
	if l.opset() > 0 && l.opset() < 11 {
		if a := l.n.Attr("min"); a != nil {
			lo = l.scalar(x, float64(a.F))
		}
		if a := l.n.Attr("max"); a != nil {
			hi = l.scalar(x, float64(a.F))
		}
	} else {
		lo, hi = l.in(1), l.in(2)
	}
	y := x
	if lo != "" {
		y = l.op("Max", y, lo)
	}
	if hi != "" {
		y = l.op("Min", y, hi)
	}
	l.finish(0, y)
	return nil
}

// present lists the node's named inputs.
func (l *lowering) present() []string {
	var out []string
	for _, in := range l.n.Inputs {
		if in != "" {
			out = append(out, in)
		}
	}
	return out
}

func lowerSum(l *lowering) error {
	ins := l.present()
	if len(ins) == 0 {
		return l.unsupported("Sum of no inputs")
	}
	y := ins[0]
	for _, in := range ins[1:] {
		y = l.add(y, in)
	}
	l.finish(0, y)
	return nil
}

func lowerMean(l *lowering) error {
	ins := l.present()
	if len(ins) == 0 {
		return l.unsupported("Mean of no inputs")
	}
	y := ins[0]
	for _, in := range ins[1:] {
		y = l.add(y, in)
	}
	if len(ins) > 1 {
		y = l.div(y, l.scalar(ins[0], float64(len(ins))))
	}
	l.finish(0, y)
	return nil
}

func lowerSign(l *lowering) error {
	x := l.in(0)
	zero := l.scalar(x, 0)
	neg := l.op("Where", l.op("Less", x, zero), l.scalar(x, -1), zero)
	if !(l.dtype(x).IsSigned() || l.dtype(x) == Undefined) {
		neg = zero
	}
	l.finish(0, l.op("Where", l.op("Greater", x, zero), l.scalar(x, 1), neg))
	return nil
}

func lowerIsNaN(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.op("Not", l.op("Equal", x, x)))
	return nil
}

func lowerIsInf(l *lowering) error {
	x := l.in(0)
	pos := l.n.AttrInt("detect_positive", 1) != 0
	neg := l.n.AttrInt("detect_negative", 1) != 0
	var y string
	switch {
	case pos && neg:
		y = l.op("Equal", l.op("Abs", x), l.scalar(x, math.Inf(1)))
	case pos:
		y = l.op("Equal", x, l.scalar(x, math.Inf(1)))
	case neg:
		y = l.op("Equal", x, l.scalar(x, math.Inf(-1)))
	default:
		y = l.op("Equal", x, l.scalar(x, math.NaN())) // never true
	}
	l.finish(0, y)
	return nil
}

func lowerXor(l *lowering) error {
	a, b := l.in(0), l.in(1)
	l.finish(0, l.op("Or", l.op("And", a, l.op("Not", b)), l.op("And", l.op("Not", a), b)))
	return nil
}

// lowerOrEqual lowers LessOrEqual/GreaterOrEqual as strict-or-equal (which,
// unlike the negation of the opposite comparison, is false for NaN).
func lowerOrEqual(strict string) loweringFunc {
	return func(l *lowering) error {
		a, b := l.in(0), l.in(1)
		l.finish(0, l.op("Or", l.op(strict, a, b), l.op("Equal", a, b)))
		return nil
	}
}

func lowerTan(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.div(l.op("Sin", x), l.op("Cos", x)))
	return nil
}

func lowerSinh(l *lowering) error {
	x := l.in(0)
	d := l.sub(l.op("Exp", x), l.op("Exp", l.op("Neg", x)))
	l.finish(0, l.mul(d, l.scalar(x, 0.5)))
	return nil
}

func lowerCosh(l *lowering) error {
	x := l.in(0)
	s := l.add(l.op("Exp", x), l.op("Exp", l.op("Neg", x)))
	l.finish(0, l.mul(s, l.scalar(x, 0.5)))
	return nil
}

func lowerAsinh(l *lowering) error {
	x := l.in(0)
	r := l.op("Sqrt", l.add(l.mul(x, x), l.scalar(x, 1)))
	l.finish(0, l.op("Log", l.add(x, r)))
	return nil
}

func lowerAcosh(l *lowering) error {
	x := l.in(0)
	r := l.op("Sqrt", l.sub(l.mul(x, x), l.scalar(x, 1)))
	l.finish(0, l.op("Log", l.add(x, r)))
	return nil
}

func lowerAtanh(l *lowering) error {
	x := l.in(0)
	one := l.scalar(x, 1)
	q := l.div(l.add(one, x), l.sub(one, x))
	l.finish(0, l.mul(l.op("Log", q), l.scalar(x, 0.5)))
	return nil
}

// --- reductions ---

func lowerReduceL1(l *lowering) error {
	y, err := l.reduce("ReduceSum", l.op("Abs", l.in(0)), l.sourceAxes(), l.keepdims())
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func lowerReduceL2(l *lowering) error {
	x := l.in(0)
	y, err := l.reduce("ReduceSum", l.mul(x, x), l.sourceAxes(), l.keepdims())
	if err != nil {
		return err
	}
	l.finish(0, l.op("Sqrt", y))
	return nil
}

func lowerReduceSumSquare(l *lowering) error {
	x := l.in(0)
	y, err := l.reduce("ReduceSum", l.mul(x, x), l.sourceAxes(), l.keepdims())
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func lowerReduceLogSum(l *lowering) error {
	y, err := l.reduce("ReduceSum", l.in(0), l.sourceAxes(), l.keepdims())
	if err != nil {
		return err
	}
	l.finish(0, l.op("Log", y))
	return nil
}

// lowerReduceLogSumExp is max + log(sum(exp(x - max))), which does not
// overflow.
func lowerReduceLogSumExp(l *lowering) error {
	x := l.in(0)
	axes := l.sourceAxes()
	m, err := l.reduce("ReduceMax", x, axes, true)
	if err != nil {
		return err
	}
	s, err := l.reduce("ReduceSum", l.op("Exp", l.sub(x, m)), axes, l.keepdims())
	if err != nil {
		return err
	}
	ls := l.op("Log", s)
	if !l.keepdims() {
		if m, err = l.reshapeTo(m, l.op("Shape", ls)); err != nil {
			return err
		}
	}
	l.finish(0, l.add(ls, m))
	return nil
}

func lowerLpNormalization(l *lowering) error {
	x := l.in(0)
	axes := reduceAxes{list: []int64{l.n.AttrInt("axis", -1)}}
	var norm string
	switch p := l.n.AttrInt("p", 2); p {
	case 1:
		s, err := l.reduce("ReduceSum", l.op("Abs", x), axes, true)
		if err != nil {
			return err
		}
		norm = s
	case 2:
		s, err := l.reduce("ReduceSum", l.mul(x, x), axes, true)
		if err != nil {
			return err
		}
		norm = l.op("Sqrt", s)
	default:
		return l.unsupported("p=%d", p)
	}
	l.finish(0, l.div(x, norm))
	return nil
}

// --- normalisation ---

// cast converts v to dtype to.
func (l *lowering) cast(v string, to DType) string {
	return l.opAttrs("Cast", []string{v}, IntAttr("to", int64(to)))
}

func lowerLayerNorm(l *lowering) error {
	x, scale, bias := l.in(0), l.in(1), l.in(2)
	axis := l.n.AttrInt("axis", -1)
	eps := float64(l.n.AttrFloat("epsilon", 1e-5))
	stash := DType(l.n.AttrInt("stash_type", int64(Float32)))
	xt := l.dtype(x)
	// Compute in the stash type when the input's dtype is known to differ.
	xu, ut := x, xt
	castBack := xt != Undefined && xt.IsFloat() && stash.IsFloat() && xt != stash
	if castBack {
		xu, ut = l.cast(x, stash), stash
	}
	if r := l.rank(x); axis >= 0 && r >= 0 {
		axis -= int64(r)
	}
	// A non-negative axis of unknown rank: view x as [d0, ..., d(axis-1), rest]
	// and normalise over the last axis, then restore the shapes.
	var xShape string
	if axis >= 0 {
		xShape = l.op("Shape", x)
		target := l.concat1D(l.slice1D(xShape, 0, axis), l.int64s(-1))
		v, err := l.reshapeTo(xu, target)
		if err != nil {
			return err
		}
		xu = v
	}
	axes := []int64{-1}
	if axis < 0 {
		axes = nil
		for a := axis; a < 0; a++ {
			axes = append(axes, a)
		}
	}
	mean, err := l.reduce("ReduceMean", xu, reduceAxes{list: axes}, true)
	if err != nil {
		return err
	}
	d := l.sub(xu, mean)
	variance, err := l.reduce("ReduceMean", l.mul(d, d), reduceAxes{list: axes}, true)
	if err != nil {
		return err
	}
	inv := l.op("Reciprocal", l.op("Sqrt", l.add(variance, l.scalarOf(ut, eps))))
	normalized := l.mul(d, inv)
	if castBack {
		normalized = l.cast(normalized, xt)
	}
	if axis >= 0 {
		if normalized, err = l.reshapeTo(normalized, xShape); err != nil {
			return err
		}
	}
	y := l.mul(normalized, scale)
	if bias != "" {
		y = l.add(y, bias)
	}
	l.finish(0, y)
	if len(l.n.Outputs) > 1 && (l.n.Outputs[1] != "" || (len(l.n.Outputs) > 2 && l.n.Outputs[2] != "")) {
		if axis >= 0 {
			// Mean and InvStdDev have x's rank, with ones from axis on.
			tail := l.add(l.mul(l.sliceTail(xShape, axis), l.int64s(0)), l.int64s(1))
			statShape := l.concat1D(l.slice1D(xShape, 0, axis), tail)
			if mean, err = l.reshapeTo(mean, statShape); err != nil {
				return err
			}
			if inv, err = l.reshapeTo(inv, statShape); err != nil {
				return err
			}
		}
		l.finish(1, mean)
		l.finish(2, inv)
	}
	return nil
}

// sliceTail takes the elements of a 1-D value from start on.
func (l *lowering) sliceTail(x string, start int64) string {
	return l.slice1D(x, start, math.MaxInt64)
}

// batchNormTraining reports whether a BatchNormalization node asks for
// training-mode statistics.
func batchNormTraining(l *lowering) bool {
	if countNamed(l.n.Outputs) > 1 {
		return true
	}
	if l.opset() >= 14 && l.n.AttrInt("training_mode", 0) != 0 {
		return true
	}
	if l.opset() > 0 && l.opset() < 7 && l.n.HasAttr("is_test") && l.n.AttrInt("is_test", 0) == 0 {
		return true
	}
	return false
}

// channelView prepares per-channel parameters of shape [C] to broadcast
// against x: as [C, 1, ..., 1] when x's rank is known, otherwise x is viewed
// as [N, C, rest] and the parameters as [C, 1]. restore undoes the view.
func (l *lowering) channelView(x string) (view string, param func(string) string, restore func(string) (string, error)) {
	if r := l.rank(x); r >= 2 {
		target := []int64{-1}
		for i := 2; i < r; i++ {
			target = append(target, 1)
		}
		return x, func(p string) string {
				if r == 2 {
					return p
				}
				return l.reshape(p, target...)
			}, func(y string) (string, error) {
				return y, nil
			}
	}
	shape := l.op("Shape", x)
	return l.reshape(x, 0, 0, -1), func(p string) string {
			return l.reshape(p, -1, 1)
		}, func(y string) (string, error) {
			return l.reshapeTo(y, shape)
		}
}

// trainingBatchNorm lowers training-mode BatchNormalization
// (lowerings_bn.go).
var trainingBatchNorm loweringFunc

func lowerBatchNorm(l *lowering) error {
	if batchNormTraining(l) {
		if trainingBatchNorm == nil || l.typeOf == nil {
			return l.unsupported("BatchNormalization in training mode")
		}
		return trainingBatchNorm(l)
	}
	if l.opset() > 0 && l.opset() < 9 && l.n.HasAttr("spatial") && l.n.AttrInt("spatial", 1) == 0 {
		return l.unsupported("BatchNormalization with spatial=0")
	}
	x, scale, bias, mean, variance := l.in(0), l.in(1), l.in(2), l.in(3), l.in(4)
	eps := float64(l.n.AttrFloat("epsilon", 1e-5))
	// y = x*s + (b - mean*s) with s = scale / sqrt(var + eps); with constant
	// parameters everything but the two broadcasts folds.
	s := l.div(scale, l.op("Sqrt", l.add(variance, l.scalar(variance, eps))))
	shift := l.sub(bias, l.mul(mean, s))
	if xt, pt := l.dtype(x), l.dtype(scale); xt != Undefined && pt != Undefined && xt != pt {
		s, shift = l.cast(s, xt), l.cast(shift, xt)
	}
	view, param, restore := l.channelView(x)
	y := l.add(l.mul(view, param(s)), param(shift))
	y, err := restore(y)
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func lowerInstanceNorm(l *lowering) error {
	x, scale, bias := l.in(0), l.in(1), l.in(2)
	eps := float64(l.n.AttrFloat("epsilon", 1e-5))
	// Normalise each (n, c) over the spatial dims: view x as [N, C, rest].
	shape := l.op("Shape", x)
	view := l.reshape(x, 0, 0, -1)
	axes := reduceAxes{list: []int64{-1}}
	mean, err := l.reduce("ReduceMean", view, axes, true)
	if err != nil {
		return err
	}
	d := l.sub(view, mean)
	variance, err := l.reduce("ReduceMean", l.mul(d, d), axes, true)
	if err != nil {
		return err
	}
	normalized := l.div(d, l.op("Sqrt", l.add(variance, l.scalar(x, eps))))
	y := l.add(l.mul(normalized, l.reshape(scale, -1, 1)), l.reshape(bias, -1, 1))
	y, err = l.reshapeTo(y, shape)
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func lowerGlobalPool(op string) loweringFunc {
	return func(l *lowering) error {
		x := l.in(0)
		if r := l.rank(x); r >= 2 {
			var axes []int64
			for a := 2; a < r; a++ {
				axes = append(axes, int64(a))
			}
			if len(axes) == 0 {
				l.finish(0, x)
				return nil
			}
			y, err := l.reduce(op, x, reduceAxes{list: axes}, true)
			if err != nil {
				return err
			}
			l.finish(0, y)
			return nil
		}
		// Unknown rank: reduce a [N, C, rest] view, then reshape to
		// [N, C, 1, ..., 1] with as many ones as x has spatial dims.
		shape := l.op("Shape", x)
		y, err := l.reduce(op, l.reshape(x, 0, 0, -1), reduceAxes{list: []int64{-1}}, true)
		if err != nil {
			return err
		}
		ones := l.add(l.mul(l.sliceTail(shape, 2), l.int64s(0)), l.int64s(1))
		target := l.concat1D(l.slice1D(shape, 0, 2), ones)
		if y, err = l.reshapeTo(y, target); err != nil {
			return err
		}
		l.finish(0, y)
		return nil
	}
}

// --- shape ops ---

func lowerFlatten(l *lowering) error {
	x := l.in(0)
	axis := l.n.AttrInt("axis", 1)
	if r := l.rank(x); r >= 0 && axis < 0 {
		axis += int64(r)
	}
	switch {
	case axis == 0:
		l.finish(0, l.reshape(x, 1, -1))
		return nil
	case axis == 1:
		l.finish(0, l.reshape(x, 0, -1))
		return nil
	}
	if s, ok := l.staticShape(x); ok && axis >= 0 && axis <= int64(len(s)) {
		p := int64(1)
		for _, d := range s[:axis] {
			p *= d
		}
		l.finish(0, l.reshape(x, p, -1))
		return nil
	}
	// [d0, ..., d(axis-1), rest] first, then [-1, rest].
	first, err := l.reshapeTo(x, l.concat1D(l.slice1D(l.op("Shape", x), 0, axis), l.int64s(-1)))
	if err != nil {
		return err
	}
	rest := l.sliceTail(l.op("Shape", first), -1)
	y, err := l.reshapeTo(first, l.concat1D(l.int64s(-1), rest))
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

// axesOf returns the axes of Squeeze/Unsqueeze (an attribute before opset
// 13, an input from 13), which must be constants here.
func (l *lowering) axesOf() ([]int64, bool) {
	if l.opset() >= 13 || (l.in(1) != "" && !l.n.HasAttr("axes")) {
		if l.in(1) == "" {
			return nil, true
		}
		t := l.constant(l.in(1))
		if t == nil {
			return nil, false
		}
		out := make([]int64, t.Size())
		for i := range out {
			out[i] = t.Int(i)
		}
		return out, true
	}
	return l.n.AttrInts("axes", nil), true
}

func lowerSqueeze(l *lowering) error {
	x := l.in(0)
	axes, ok := l.axesOf()
	if !ok {
		return l.unsupported("axes computed at run time")
	}
	r := l.rank(x)
	if s, ok := l.staticShape(x); ok {
		drop := map[int]bool{}
		for _, a := range axes {
			ax, err := normAxis(a, len(s))
			if err != nil {
				return l.n.Errorf("%v", err)
			}
			drop[ax] = true
		}
		var target []int64
		for i, d := range s {
			if (axes == nil && d == 1) || drop[i] {
				continue
			}
			target = append(target, d)
		}
		l.finish(0, l.reshape(x, target...))
		return nil
	}
	if axes == nil {
		return l.unsupported("Squeeze without axes of an input of unknown shape")
	}
	norm := make([]int64, len(axes))
	for i, a := range axes {
		if a < 0 {
			if r < 0 {
				return l.unsupported("negative axes of an input of unknown rank")
			}
			a += int64(r)
		}
		norm[i] = a
	}
	sortInt64s(norm)
	shape := l.op("Shape", x)
	var parts []string
	prev := int64(0)
	for _, a := range norm {
		if a > prev {
			parts = append(parts, l.slice1D(shape, prev, a))
		}
		prev = a + 1
	}
	parts = append(parts, l.sliceTail(shape, prev))
	y, err := l.reshapeTo(x, l.concat1D(parts...))
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func lowerUnsqueeze(l *lowering) error {
	x := l.in(0)
	axes, ok := l.axesOf()
	if !ok || axes == nil {
		return l.unsupported("axes computed at run time")
	}
	r := l.rank(x)
	norm := make([]int64, len(axes))
	for i, a := range axes {
		if a < 0 {
			if r < 0 {
				return l.unsupported("negative axes of an input of unknown rank")
			}
			a += int64(r + len(axes))
		}
		norm[i] = a
	}
	sortInt64s(norm)
	if s, ok := l.staticShape(x); ok {
		outRank := len(s) + len(norm)
		target := make([]int64, 0, outRank)
		j := 0
		for i := 0; i < outRank; i++ {
			if len(norm) > 0 && norm[0] == int64(i) {
				target = append(target, 1)
				norm = norm[1:]
				continue
			}
			if j >= len(s) {
				return l.n.Errorf("axes %v do not fit an input of rank %d", axes, len(s))
			}
			target = append(target, s[j])
			j++
		}
		l.finish(0, l.reshape(x, target...))
		return nil
	}
	// Output dim i is 1 for i in axes; the others take x's dims in order.
	shape := l.op("Shape", x)
	var parts []string
	taken := int64(0)
	for k, a := range norm {
		// Output positions before a hold a - k input dims in all.
		if upto := a - int64(k); upto > taken {
			parts = append(parts, l.slice1D(shape, taken, upto))
			taken = upto
		}
		parts = append(parts, l.int64s(1))
	}
	parts = append(parts, l.sliceTail(shape, taken))
	y, err := l.reshapeTo(x, l.concat1D(parts...))
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func sortInt64s(v []int64) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// lowerDropout lowers inference-mode Dropout: Y is X, and the mask is all
// true.
func lowerDropout(l *lowering) error {
	x := l.in(0)
	// Before opset 12 (ratio and is_test attributes) and in inference
	// mode Dropout passes its input on, as the kernel does.
	training := false
	ratio := 0.5
	if l.opset() == 0 || l.opset() >= 12 {
		if v := l.in(2); v != "" {
			t := l.constant(v)
			if t == nil || t.Size() != 1 {
				return l.unsupported("Dropout with a training_mode input computed at run time")
			}
			training = t.Float(0) != 0
		}
		if v := l.in(1); v != "" && training {
			t := l.constant(v)
			if t == nil || t.Size() != 1 {
				return l.unsupported("Dropout in training mode with a ratio computed at run time")
			}
			ratio = t.Float(0)
		}
	}
	if training && ratio != 0 {
		return l.dropoutTraining(x, ratio)
	}
	l.finish(0, x)
	if len(l.n.Outputs) > 1 && l.n.Outputs[1] != "" {
		one := l.b.Const(FromBool([]bool{true}))
		if l.opset() > 0 && l.opset() < 10 {
			one = l.scalar(x, 1) // the mask has the input's dtype
		}
		l.finish(1, l.op("Expand", one, l.op("Shape", x)))
	}
	return nil
}

// dropoutTraining keeps each element where a uniform draw in [0, 1) is at
// least ratio, scaled by 1/(1-ratio): the kernel's rule, and its stream,
// since RandomUniformLike draws one float64 per element in row-major order
// from the same generator.
func (l *lowering) dropoutTraining(x string, ratio float64) error {
	if ratio < 0 || ratio >= 1 {
		return l.unsupported("ratio %g out of range [0, 1)", ratio)
	}
	dt := l.dtype(x)
	if !dt.IsFloat() {
		return l.unsupported("Dropout of %v", dt)
	}
	u := l.opAttrs("RandomUniformLike", []string{x}, IntAttr("dtype", int64(Float64)))
	keep := l.op("Equal", l.op("Less", u, l.scalarOf(Float64, ratio)), l.b.Const(FromBool([]bool{false})))
	work, xv := dt, x
	if dt != Float32 && dt != Float64 {
		work, xv = Float32, l.cast(x, Float32)
	}
	y := l.op("Where", keep, l.mul(xv, l.scalarOf(work, 1/(1-ratio))), l.scalarOf(work, 0))
	if work != dt {
		y = l.cast(y, dt)
	}
	l.finish(0, y)
	if len(l.n.Outputs) > 1 && l.n.Outputs[1] != "" {
		l.finish(1, keep)
	}
	return nil
}

func lowerConstantOfShape(l *lowering) error {
	v := Scalar(Float32, 0)
	if a := l.n.Attr("value"); a != nil && a.T != nil {
		if a.T.Size() != 1 {
			return l.n.Errorf("value must hold one element, has %d", a.T.Size())
		}
		v = &Tensor{DType: a.T.DType, Data: a.T.Data}
	}
	l.finish(0, l.op("Expand", l.b.Const(v), l.in(0)))
	return nil
}

func lowerCastLike(l *lowering) error {
	to := l.dtype(l.in(1))
	if to == Undefined {
		return l.unsupported("CastLike needs the dtype of its second input")
	}
	l.finish(0, l.cast(l.in(0), to))
	return nil
}
