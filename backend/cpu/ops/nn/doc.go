// Package nn holds the CPU kernels for convolution, pooling, resampling and
// the vision ops: Conv, ConvTranspose, the pooling family
// (MaxPool, AveragePool, LpPool and their Global forms), MaxUnpool,
// MaxRoiPool, RoiAlign, GridSample, Resize, Upsample, NonMaxSuppression and
// Col2Im. The kernels register themselves with kern from init.
//
// Conv picks one of these paths, in this order (convRun):
//
//   - Depthwise (one input channel per group, 1-D or 2-D): a direct loop
//     per channel (convDepthwise).
//   - Pointwise (a 1x1 window, unit strides, no padding): a plain GEMM over
//     the input, per image and group.
//   - Ungrouped 2-D float32, the main path: Conv2D (implicit.go), an
//     implicit GEMM over the whole batch. Its B panels are packed straight
//     from the padded NCHW image (gemm.PackedProduct with a column packer),
//     so no im2col matrix is written, and the batch's window positions form
//     one product that both cores share through gemm's own parallelism.
//     3x3 stride-1 layers go through Winograd F(2x2, 3x3) instead where the
//     policy says so (winograd*.go; WinogradAuto uses it for the shapes
//     where it measured faster; the compile option backend.Tuning.Winograd,
//     which the command maps from ONNXTRAIN_WINOGRAD, forces it on or off).
//   - Everything else (grouped, 1-D and 3-D, float64): im2col over tiles of
//     output rows, then gemm.Sgemm into y, with small batches' columns side
//     by side in one GEMM (convBatched).
//
// Conv2D also serves the training-op kernels of Conv's gradients: FilterGrad
// (implicit GEMM over every window position of the batch, or Winograd's
// filter transform) and, for unit strides and dilations, InputGrad (a
// correlation of dy with the flipped kernel, implicit or Winograd; other
// input gradients are GEMM then col2im). ConvTranspose is GEMM then col2im
// over tiles of input rows. Work is spread over images, groups and tiles
// with one goroutine per core (parallel.go) where a GEMM does not already
// split it.
package nn
