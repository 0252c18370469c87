//go:build !amd64 || purego

package gemm

// usePairATransposed: pairATransposed is a constant here (no in-place
// pair kernel; the tests that call this skip).
func usePairATransposed(bool) (restore func()) { return func() {} }
