// Package repodata finds data committed in the onnxtrain repository (the ONNX
// conformance cases under testdata/onnx) from a working directory inside it.
// It is a leaf package: library code (the conformance command's default) and
// tests of any package, importer included, may import it.
package repodata
