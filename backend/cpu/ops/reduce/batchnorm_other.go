//go:build !amd64 || purego

package reduce

// bnRowSums returns Σ(v-x0) and Σ(v-x0)² over x, in float64.
func bnRowSums(x []float32, x0 float64) (s, q float64) { return bnRowSumsGo(x, x0) }

// bnRowApply writes src·mul + add into dst (Relu'd when relu is set).
func bnRowApply(dst, src []float32, mul, add float32, relu bool) {
	bnRowApplyGo(dst, src, mul, add, relu)
}
