//go:build !amd64 || purego

package elementwise

// divVVVecPrefix does nothing without the assembly loops.
func divVVVecPrefix(dst, a, b []float32) int { return 0 }

// divVSVecPrefix does nothing without the assembly loops.
func divVSVecPrefix(dst, a []float32, b float32) int { return 0 }
