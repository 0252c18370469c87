//go:build !linux

package benchlib

// hugeFloats returns n zero values on the Go heap (huge pages are asked
// for on Linux only) and a function that does nothing.
func hugeFloats[T float32 | float64](n int) ([]T, func()) { return make([]T, n), func() {} }
