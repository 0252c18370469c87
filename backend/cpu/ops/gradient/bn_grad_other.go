//go:build !amd64 || purego

package gradient

// bnGradRowSums returns, with d = x - x0 and g = dy (masked by r > 0 when r
// is not nil), Σd, Σd², Σg and Σg·d over one row, in float64.
// (pf: bnGradRowSums's prefetch row on amd64; unused here.)
func bnGradRowSums(dy, r, x []float32, x0 float64, _ []float32) (sd, sdd, sg, sgd float64) {
	return bnGradRowSumsGo(dy, r, x, x0)
}

// bnGradRowApply writes float32(k1·g + k2·x + k0) into dx over one row,
// with g = dy masked by r > 0 when r is not nil.
// (ahead: bnGradRowApply's prefetch distance on amd64; unused here.)
func bnGradRowApply(dx, dy, r, x []float32, k1, k2, k0 float64, _ int) {
	bnGradRowApplyGo(dx, dy, r, x, k1, k2, k0)
}

// bnGradApplyCoef writes float32((k1[i]·g[i] + k2[i]·x[i]) + k0[i]) into
// dx[i], with g = dy masked by r > 0 when r is not nil.
func bnGradApplyCoef(dx, dy, r, x []float32, k1, k2, k0 []float64) {
	bnGradApplyCoefGo(dx, dy, r, x, k1, k2, k0)
}

// bnGradShortSums takes no rows here (bnBackwardShort sums them in Go).
func bnGradShortSums(dy, r, x []float32, w, nc int, x0, acc []float64, stride int) int {
	return 0
}
