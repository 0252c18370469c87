// Package graph is onnxtrain's intermediate representation: tensors, dtypes,
// nodes and graphs, the op registry (shape inference and lowering to
// primitives) and the graph passes. It knows nothing of files, backends or
// networks.
package graph
