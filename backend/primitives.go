package backend

import "github.com/onnxtrain/onnxtrain/graph"

// Primitives is the primitive set a backend implements to run and train
// every model family onnxtrain supports: each op with its exact semantics
// (graph.PrimitiveOps; docs/primitives.md explains the choice). Every other
// op lowers to these in graph/, so a backend's kernels for bigger ops are
// optional fast paths. A backend may also implement ops of the extended set
// (ExtendedOps) or report them unsupported. CompileOptions.PrimitivesOnly
// restricts a backend to the two sets, to check that they are enough.
func Primitives() []graph.PrimitiveOp {
	return append([]graph.PrimitiveOp{}, graph.PrimitiveOps...)
}

// ExtendedOps is the extended set: control flow, sequences and optionals,
// strings, data-dependent shapes, spectral ops, Det, bitwise, quantised and
// random-stream ops, by op name with the reason it does not decompose.
func ExtendedOps() map[string]string {
	out := make(map[string]string, len(graph.ExtendedOps))
	for k, v := range graph.ExtendedOps {
		out[k] = v
	}
	return out
}
