package nn

import (
	"math"
	"testing"
)

// TestPoolStreamCopy checks the non-temporal copy against copy at every
// alignment of dst within a 32-byte block and lengths around the 32-float
// loop's steps (0, under one step, whole steps, a head and a tail), and
// that nothing past len(src) is written.
func TestPoolStreamCopy(t *testing.T) {
	for _, n := range []int{0, 1, 7, 31, 32, 33, 63, 64, 95, 100, 257, 1031} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i) + 0.5
		}
		for off := 0; off < 8; off++ {
			buf := make([]float32, n+off+9)
			for i := range buf {
				buf[i] = float32(math.NaN())
			}
			dst := buf[off : off+n+1]
			if !PoolStreamCopy(dst, src) {
				t.Skip("no non-temporal loop on this build")
			}
			for i := range src {
				if dst[i] != src[i] {
					t.Fatalf("n=%d off=%d: dst[%d] = %v, want %v", n, off, i, dst[i], src[i])
				}
			}
			if v := dst[n]; v == v {
				t.Fatalf("n=%d off=%d: dst[%d] past the copy was written (%v)", n, off, n, v)
			}
		}
	}
}
