// Package importer reads ONNX models into onnxtrain's graph IR and writes
// graphs back to ONNX. Load reads a model file: the protobuf wire format
// through our own schema, every tensor dtype, sparse initializers (as dense
// tensors), external data (only inside the model's folder), model-local
// functions and the opset imports ("ai.onnx" read as ""). Save and Encode
// write a model, with its trained weights, as ONNX that onnxruntime,
// PyTorch and onnx.checker accept. Malformed input gets an error naming
// the field and node, never a panic (the decoder is fuzzed).
package importer
