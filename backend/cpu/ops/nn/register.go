package nn

import "github.com/onnxtrain/onnxtrain/backend/cpu/kern"

func init() {
	kern.Register("Conv", convKernel)
	kern.Register("ConvTranspose", convTransposeKernel)
	kern.Register("MaxPool", poolKernel(poolMax))
	kern.Register("AveragePool", poolKernel(poolAvg))
	kern.Register("LpPool", poolKernel(poolLp))
	kern.Register("GlobalMaxPool", globalPoolKernel(poolMax))
	kern.Register("GlobalAveragePool", globalPoolKernel(poolAvg))
	kern.Register("GlobalLpPool", globalPoolKernel(poolLp))
	kern.Register("MaxUnpool", maxUnpoolKernel)
	kern.Register("RoiAlign", roiAlignKernel)
	kern.Register("MaxRoiPool", maxRoiPoolKernel)
	kern.Register("NonMaxSuppression", nonMaxSuppressionKernel)
	kern.Register("Col2Im", col2imKernel)
	kern.Register("Resize", resizeKernel)
	kern.Register("Upsample", upsampleKernel)
	kern.Register("GridSample", gridSampleKernel)
}
