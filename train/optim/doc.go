// Package optim holds the optimizers (SGD, Adam, AdamW), the learning-rate
// schedules and the gradient clipping of onnxtrain's training loop.
//
// An optimizer step is a compiled program of one backend op over every
// parameter (program.go); the element-wise arithmetic is the backend's.
//
// The optimizers follow PyTorch 1.13's single-tensor (non-foreach) code paths
// of torch.optim operation by operation on float32 parameters: scalars such as
// the learning rate, 1-β and the bias corrections are computed in float64 and
// rounded to float32 where ATen converts them, and each tensor operation
// rounds the way ATen's CPU kernels do (Tensor.add with alpha and addcmul are
// fused multiply-adds, addcdiv computes (value*t1)/t2 without fusion). On the
// golden tests the parameters match PyTorch bit for bit; elsewhere they agree
// to within an ulp or so (ATen's results depend on the CPU's vector unit).
package optim
