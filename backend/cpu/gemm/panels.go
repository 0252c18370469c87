package gemm

// PanelBytes is the size of one worker's packing buffers for a product
// whose result has n columns and whose shared dimension is k: a KC×NC
// panel of B (NC cut to n, rounded up to the kernel's strip width) and an
// MC×KC panel of A, KC cut to k. Memory estimates use it (backend/cpu
// memplan_shapes.go); the buffers come from a pool, one per worker in use.
func PanelBytes(n, k int) int64 {
	mk := kernel
	kc := min(k, mk.kc)
	nc := min((n+mk.nr-1)/mk.nr*mk.nr, mk.nc)
	if kc <= 0 || nc <= 0 {
		return 0
	}
	return 4 * int64(kc*nc+mk.mc*kc)
}
