package linalg

// PermutedFallbacks counts the PermutedMatMul calls that materialised
// their views (for the external tests).
var PermutedFallbacks = &permutedFallbacks
