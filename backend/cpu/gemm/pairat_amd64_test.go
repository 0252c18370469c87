//go:build amd64 && !purego

package gemm

// usePairATransposed sets pairATransposed until restore is called.
func usePairATransposed(on bool) (restore func()) {
	prev := pairATransposed
	pairATransposed = on
	return func() { pairATransposed = prev }
}
