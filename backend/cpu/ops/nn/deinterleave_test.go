package nn

import "testing"

// TestDeinterleave2 checks the phase split of a padded row against its
// definition, ev[i] = image column 2i − left and od[i] = 2i + 1 − left
// (zero outside the image), for left pads, image widths and phase
// widths around the unrolled interior's edges.
func TestDeinterleave2(t *testing.T) {
	for left := 0; left <= 4; left++ {
		for n := 0; n <= 21; n++ {
			in := make([]float32, n)
			for i := range in {
				in[i] = float32(i + 1)
			}
			for pw := 0; pw <= (n+left)/2+3; pw++ {
				ev, od := make([]float32, pw), make([]float32, pw)
				for i := range ev {
					ev[i], od[i] = -1, -1
				}
				deinterleave2(ev, od, in, left)
				at := func(c int) float32 {
					if c < 0 || c >= n {
						return 0
					}
					return in[c]
				}
				for i := 0; i < pw; i++ {
					if ev[i] != at(2*i-left) || od[i] != at(2*i+1-left) {
						t.Fatalf("left %d, width %d, phase width %d: pair %d is (%v, %v), want (%v, %v)",
							left, n, pw, i, ev[i], od[i], at(2*i-left), at(2*i+1-left))
					}
				}
			}
		}
	}
}
