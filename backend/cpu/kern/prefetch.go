package kern

// PrefetchAddr is the address of pf's first element, for an assembly
// loop that prefetches as many elements of pf as it reads of its own
// operand (n), or nil, which such loops take as "prefetch nothing new",
// where pf holds fewer than n elements or n is 0.
func PrefetchAddr(pf []float32, n int) *float32 {
	if len(pf) < n || n == 0 {
		return nil
	}
	return &pf[0]
}
