package reduce

// MaxRow32 returns the largest element of a non-empty float32 row (AVX2
// where available), for kernels of other packages that reduce rows.
func MaxRow32(x []float32) float32 { return maxRow32(x) }

// ScaleRow32 sets x[i] = float32(float64(x[i])·s), the product rounded
// once (AVX2 where available).
func ScaleRow32(x []float32, s float64) { scaleRow32(x, s) }
