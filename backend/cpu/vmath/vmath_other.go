//go:build !amd64 || purego

package vmath

func expShift(dst, src []float32, m float64) float64 { return expShiftGo(dst, src, m) }

func erf(dst, src []float32) { erfGo(dst, src) }
