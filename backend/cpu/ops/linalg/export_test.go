package linalg

// PermutedFallbacks counts the PermutedMatMul calls that materialised
// their views (for the external tests).
var PermutedFallbacks = &permutedFallbacks

// CausalCuts counts the PermutedMatMul calls that followed a causal hint;
// FollowCausalHints switches the hints off (for the external tests).
var (
	CausalCuts        = &causalCuts
	FollowCausalHints = &followCausalHints
)
