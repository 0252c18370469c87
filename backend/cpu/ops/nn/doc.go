// Package nn holds the CPU kernels for convolution, pooling, resampling and
// the vision ops: Conv, ConvTranspose, the pooling family
// (MaxPool, AveragePool, LpPool and their Global forms), MaxUnpool,
// MaxRoiPool, RoiAlign, GridSample, Resize, Upsample, NonMaxSuppression and
// Col2Im. The kernels register themselves with kern from init.
//
// Conv lowers to im2col + gemm.Sgemm, tiled over output rows so the column
// buffer stays small, with direct paths for 1x1 stride-1 convolutions (a
// plain GEMM over the input) and for depthwise convolutions. ConvTranspose is
// GEMM + col2im. Work is spread over images, groups and tiles with one
// goroutine per core.
package nn
