// Package conformance runs the ONNX backend test cases (a folder per case
// with model.onnx and test_data_set_N/{input_K.pb,output_K.pb}) against any
// backend. A backend's own tests call Run with itself; the CLI's
// `onnxtrain conformance` prints the same results.
package conformance
