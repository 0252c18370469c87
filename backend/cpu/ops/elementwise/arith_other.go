//go:build !amd64 || purego

package elementwise

// vvPrefix does nothing without the assembly loops.
func vvPrefix(op arithOp, dst, a, b []float32) int { return 0 }

// scalarPrefix does nothing without the assembly loops.
func scalarPrefix(op arithOp, sv bool, dst, x []float32, s float32) int { return 0 }
