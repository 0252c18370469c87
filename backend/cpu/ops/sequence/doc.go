// Package sequence holds the CPU kernels for ONNX sequence, optional and
// string ops: SequenceEmpty, SequenceConstruct, SequenceInsert,
// SequenceErase, SequenceAt, SequenceLength, SplitToSequence,
// ConcatFromSequence and SequenceMap; Optional, OptionalHasElement and
// OptionalGetElement; StringNormalizer and TfIdfVectorizer. Sequence and
// optional values are graph.Tensors of DType graph.SequenceOf and
// graph.OptionalOf. The kernels register themselves with kern from init
// (with kern.RegisterHalf: they handle every element type themselves).
package sequence
