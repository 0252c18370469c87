package linalg

// PermutedFallbacks counts the PermutedMatMul calls that materialised
// their views (for the external tests).
var PermutedFallbacks = &permutedFallbacks

// CausalCuts counts the PermutedMatMul calls that followed a causal hint;
// FollowCausalHints switches the hints off (for the external tests).
// CausalTiles switches SgemmSerialTri off for the causal products' blocks.
var (
	CausalCuts        = &causalCuts
	FollowCausalHints = &followCausalHints
	CausalTiles       = &causalTiles
)

// PoisonAttentionBuffers sets every element of the kept attention head
// buffers to v (for the external tests: what the kernels read of a
// buffer without writing it first shows up in their results).
func PoisonAttentionBuffers(v float32) {
	attnBuffers.mu.Lock()
	defer attnBuffers.mu.Unlock()
	for _, b := range attnBuffers.free {
		b = b[:cap(b)]
		for i := range b {
			b[i] = v
		}
	}
}
