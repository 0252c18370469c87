//go:build !amd64 || purego

package elementwise

// vvPrefix does nothing without the assembly loops.
func vvPrefix(op arithOp, dst, a, b []float32) int { return 0 }

// vsPrefix does nothing without the assembly loops.
func vsPrefix(op arithOp, dst, a []float32, s float32) int { return 0 }

// svPrefix does nothing without the assembly loops.
func svPrefix(op arithOp, dst []float32, s float32, b []float32) int { return 0 }
