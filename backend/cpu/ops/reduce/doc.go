// Package reduce holds the CPU kernels that reduce along axes or normalise
// over them: the Reduce* family, ArgMax/ArgMin, CumSum, TopK, the softmax
// family (Softmax, LogSoftmax, Hardmax), the normalisations (BatchNormalization,
// InstanceNormalization, LayerNormalization, GroupNormalization, LRN,
// MeanVarianceNormalization, LpNormalization), the losses
// (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) and Dropout. The
// kernels register themselves with kern from init.
//
// Every kernel views its input as blocks of shape (outer, r, inner), where r
// is the extent of the reduced axes and inner the contiguous stride between
// two reduced elements, and runs tight loops over typed slices. float32 sums
// accumulate in float64.
package reduce
