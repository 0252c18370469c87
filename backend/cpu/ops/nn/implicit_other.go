//go:build !amd64 || purego

package nn

// Without the assembly loops the pairs are all split and joined in Go.

func deinterleave2Blocks(e, o, s []float32) int { return 0 }

func deinterleave2RowsVec(dst, src []float32, rows, dstStride, srcStride, pw int) bool { return false }

// pairsAVX2: no pair loops here.
const pairsAVX2 = false

func interleave2Blocks(d, e, o []float32) int { return 0 }

func evens2Blocks(d, s []float32) int { return 0 }

func spread2Blocks(d, s []float32) int { return 0 }
