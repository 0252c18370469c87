//go:build !amd64 || purego

package elementwise

// reluVecPrefix does nothing without the assembly loops.
func reluVecPrefix(dst, src []float32) int { return 0 }

// reluGradVecPrefix does nothing without the assembly loops.
func reluGradVecPrefix(d, g, x []float32) int { return 0 }

// addReluGradVecPrefix does nothing without the assembly loops.
func addReluGradVecPrefix(d, a, b, x []float32) int { return 0 }

// reluGradPlanesVec does nothing without the assembly loops.
func reluGradPlanesVec(d, g, x []float32, inner int) bool { return false }
