package graph

// The primitive set and the extended set.
//
// Primitives are the ops every backend implements: every other op of the
// model families onnxtrain trains (CNN, transformer, recurrent) and every
// gradient op autodiff emits lowers to them (lowerings.go,
// lowerings_prims.go, lowerings_grad.go). A primitive keeps the name,
// inputs, outputs and attributes of the ONNX op of the same name (the
// semantics of the model's opset), with the restrictions written beside it
// below; docs/primitives.md explains the choice.
//
// Extended ops cannot be written as a fixed graph of primitives: control
// flow, sequences and optionals, strings, ops whose output shape depends on
// input values, spectral ops, determinants, bitwise and quantised ops, and
// random ops whose stream a backend defines. A backend may implement them
// or report them unsupported; a model that needs one runs only where it is
// implemented.

// PrimitiveOp is one op of the primitive set with its exact semantics.
type PrimitiveOp struct {
	Name string
	// Class groups the op (elementwise, compare, reduce, product, window,
	// movement, random).
	Class string
	// Semantics is what a backend must compute, beyond the ONNX op's
	// definition, in one paragraph.
	Semantics string
}

// PrimitiveOps is the primitive set, in documentation order.
var PrimitiveOps = []PrimitiveOp{
	// Elementwise binary arithmetic, numpy broadcasting, same dtype in and out.
	{"Add", "elementwise", "a+b, numpy broadcasting; integers wrap."},
	{"Sub", "elementwise", "a-b, numpy broadcasting; integers wrap."},
	{"Mul", "elementwise", "a*b, numpy broadcasting; integers wrap. Mul(x, -1) is negation (IEEE: sign of zero flips)."},
	{"Div", "elementwise", "a/b, numpy broadcasting; IEEE division for floats (x/0 is ±Inf or NaN), truncation toward zero for integers (b=0 is an error)."},
	{"Pow", "elementwise", "a**b, numpy broadcasting; the exponent may have another numeric dtype; float result as C pow (pow(x, 0.5) equals sqrt(x) correctly rounded)."},
	{"Max", "elementwise", "elementwise maximum of two or more inputs, numpy broadcasting; NaN if any input is NaN."},
	{"Min", "elementwise", "elementwise minimum of two or more inputs, numpy broadcasting; NaN if any input is NaN."},
	// Elementwise unary math, floats only.
	{"Exp", "elementwise", "e**x."},
	{"Log", "elementwise", "natural logarithm; log(0) = -Inf, log(x<0) = NaN."},
	{"Sqrt", "elementwise", "square root, correctly rounded; sqrt(x<0) = NaN."},
	{"Tanh", "elementwise", "hyperbolic tangent, accurate to a few ulp near zero."},
	{"Erf", "elementwise", "the error function."},
	{"Sin", "elementwise", "sine of x in radians."},
	{"Cos", "elementwise", "cosine of x in radians."},
	{"Floor", "elementwise", "largest integer not above x; NaN and ±Inf unchanged."},
	// Comparison and selection.
	{"Equal", "compare", "a==b to bool, numpy broadcasting, any dtype including bool and string."},
	{"Less", "compare", "a<b to bool, numpy broadcasting; false when either is NaN."},
	{"Where", "compare", "cond ? a : b, three-way numpy broadcasting; the unselected side may hold NaN or Inf without effect."},
	{"Cast", "elementwise", "dtype conversion (attribute to): float to int truncates toward zero, to bool is x!=0, float32 to half rounds to nearest even; saturate (opset 19) ignored for non-float8 types."},
	// Reductions.
	{"ReduceSum", "reduce", "sum over axes (input from opset 13, attribute before), keepdims, noop_with_empty_axes; float sums accumulate in at least the input precision."},
	{"ReduceMax", "reduce", "maximum over axes (axes an input from opset 18), keepdims; NaN propagates; an empty reduction is an error."},
	{"ArgMax", "reduce", "int64 index of the maximum along axis, keepdims, select_last_index; ties resolve to the first (or last) index."},
	{"CumSum", "reduce", "inclusive (or exclusive) prefix sum along a run-time axis, optionally reversed."},
	// Products and windows.
	{"MatMul", "product", "numpy matmul: 1-D operands promoted and demoted, batch dims broadcast; float32 accumulates in float32 or wider."},
	{"Conv", "window", "N-d cross-correlation with group, strides, dilations, pads or auto_pad, optional bias."},
	{"ConvTranspose", "window", "transposed convolution (the input gradient of Conv), with group, strides, dilations, pads, output_padding, output_shape, auto_pad, optional bias."},
	{"MaxPool", "window", "max over windows with strides, dilations, pads (padding never wins), ceil_mode; the optional second output holds row-major flat indices (storage_order 0)."},
	{"AveragePool", "window", "mean over windows with strides, pads, ceil_mode, count_include_pad (dilations from opset 19)."},
	// Data movement.
	{"Reshape", "movement", "same elements, new shape from a run-time int64 vector (0 copies a dim unless allowzero, -1 infers one dim)."},
	{"Transpose", "movement", "permutes axes (perm; reversed when absent)."},
	{"Concat", "movement", "joins inputs along axis; inputs may be empty along it."},
	{"Slice", "movement", "starts, ends, axes, steps as run-time int64 vectors (attributes before opset 10); clamped like numpy, negative steps allowed."},
	{"Gather", "movement", "takes slices of data along axis at int32/int64 indices (negative indices count from the end); output shape data[:axis] + indices + data[axis+1:]."},
	{"GatherElements", "movement", "out[i][j]... = data[...index[i][j]... along axis...], indices with the data's rank."},
	{"ScatterElements", "movement", "copy of data with updates written at indices along axis; reduction none (last write wins), add, mul, max, min; duplicate indices accumulate for add."},
	{"Expand", "movement", "broadcasts x to a run-time shape (numpy rules, either side may have 1s)."},
	{"Pad", "movement", "pads with a constant (default 0), reflect, edge or wrap, pads as a run-time int64 vector (attribute before opset 11), negative pads crop."},
	{"Identity", "movement", "a copy (or alias) of its input, any type."},
	{"Shape", "movement", "the input's shape as an int64 vector, with start and end (opset 15)."},
	// Random.
	{"RandomUniformLike", "random", "uniform samples in [low, high) with the input's shape and dtype (or attribute dtype), drawn from the executable's seeded generator in row-major order."},
}

// Primitives lists the names of the primitive set (PrimitiveOps).
var Primitives = func() []string {
	out := make([]string, len(PrimitiveOps))
	for i, p := range PrimitiveOps {
		out[i] = p.Name
	}
	return out
}()

// ExtendedOps is the extended set: ops a backend may implement or leave
// unsupported, with why they do not decompose into primitives.
var ExtendedOps = map[string]string{
	// Control flow: subgraphs run a data-dependent number of times.
	"If": "control flow", "Loop": "control flow", "Scan": "control flow",
	// Sequences and optionals: values that are not tensors.
	"SequenceAt": "sequence", "SequenceConstruct": "sequence", "SequenceEmpty": "sequence",
	"SequenceErase": "sequence", "SequenceInsert": "sequence", "SequenceLength": "sequence",
	"SequenceMap": "sequence", "SplitToSequence": "sequence", "ConcatFromSequence": "sequence",
	"Optional": "optional", "OptionalGetElement": "optional", "OptionalHasElement": "optional",
	// Strings.
	"StringNormalizer": "strings", "TfIdfVectorizer": "strings",
	// Output shapes that depend on input values.
	"NonZero": "data-dependent shape", "Unique": "data-dependent shape", "TopK": "data-dependent shape (k is a run-time value)",
	"NonMaxSuppression": "data-dependent shape", "Compress": "data-dependent shape",
	"Range":          "data-dependent shape (when its inputs are not constants)",
	"BlackmanWindow": "data-dependent shape (window size is a value)", "HammingWindow": "data-dependent shape (window size is a value)",
	"HannWindow": "data-dependent shape (window size is a value)", "MelWeightMatrix": "data-dependent shape (sizes are values)",
	// Spectral and linear algebra.
	"DFT": "spectral", "STFT": "spectral", "Det": "determinant (pivoting)",
	// Bitwise.
	"BitShift": "bitwise", "BitwiseAnd": "bitwise", "BitwiseOr": "bitwise", "BitwiseXor": "bitwise", "BitwiseNot": "bitwise",
	// Quantised.
	"QuantizeLinear": "quantised", "DequantizeLinear": "quantised", "DynamicQuantizeLinear": "quantised",
	"ConvInteger": "quantised", "MatMulInteger": "quantised", "QLinearConv": "quantised", "QLinearMatMul": "quantised",
	// Random streams other than the uniform one.
	"RandomNormal": "random stream", "RandomNormalLike": "random stream", "RandomUniform": "random stream",
	"Bernoulli": "random stream", "Multinomial": "random stream",
}

var primitiveNames = func() map[string]bool {
	m := make(map[string]bool, len(PrimitiveOps))
	for _, p := range PrimitiveOps {
		m[p.Name] = true
	}
	return m
}()

// IsPrimitive reports whether an op of domain (empty or ai.onnx) is in the
// primitive set.
func IsPrimitive(domain, op string) bool {
	return (domain == "" || domain == "ai.onnx") && primitiveNames[op]
}

// IsExtended reports whether an op of domain is in the extended set.
func IsExtended(domain, op string) bool {
	if domain != "" && domain != "ai.onnx" {
		return false
	}
	_, ok := ExtendedOps[op]
	return ok
}
