//go:build !amd64 || purego

package reduce

// bnRowSums returns Σ(v-x0) and Σ(v-x0)² over x, in float64 (the
// prefetch rows of amd64's form are unused here).
func bnRowSums(x []float32, x0 float64, _, _ []float32) (s, q float64) { return bnRowSumsGo(x, x0) }

// bnRowApply writes src·mul + add into dst (Relu'd when relu is set).
func bnRowApply(dst, src []float32, mul, add float32, relu bool, _ []float32) {
	bnRowApplyGo(dst, src, mul, add, relu)
}

// bnShortSums sets, for each column j < len(s) of the rows o < rows that
// start stride elements apart in x, s[j] = Σ (x[o·stride+j] − x0[j]) and
// q[j] = Σ (x[o·stride+j] − x0[j])², in float64 and in row order.
func bnShortSums(x []float32, stride, rows int, x0, s, q []float64) {
	bnShortSumsGo(x, stride, rows, x0, s, q, 0)
}

// bnShortApply writes src·mul[j] + add[j] (Relu'd when relu is set, as
// bnRowApply) into column j < len(mul) of the rows o < rows that start
// stride elements apart in x and y.
func bnShortApply(y, x []float32, stride, rows int, mul, add []float32, relu bool) {
	bnShortApplyGo(y, x, stride, rows, mul, add, relu, 0)
}

// bnRowApplyAddRelu writes Relu(src·mul + add + res) into dst.
func bnRowApplyAddRelu(dst, src, res []float32, mul, add float32, _ []float32) {
	bnRowApplyAddReluGo(dst, src, res, mul, add)
}

// bnShortApplyAddRelu is bnShortApply with relu and the residual r (y's
// layout) added before the Relu.
func bnShortApplyAddRelu(y, x, r []float32, stride, rows int, mul, add []float32) {
	bnShortApplyAddReluGo(y, x, r, stride, rows, mul, add, 0)
}
