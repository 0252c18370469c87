// Package gradient holds the CPU kernels of onnxtrain's own op domain,
// "onnxtrain" (graph.InternalDomain): the ops graph's autodiff emits. They
// are the backward kernels of the primitives whose gradients are not
// compositions of other ops (ConvGrad, pooling, BatchNorm, LayerNorm and
// Softmax gradients, PadGrad and the other shape gradients, MatMulGradA/B)
// and their helpers (SumToShape, Unreduce). The kernels register
// themselves with kern from init; backend/cpu/ops links them in.
package gradient
