package nn

import "testing"

// TestDeinterleave2 checks the phase split of a padded row against its
// definition, ev[i] = image column 2i − left and od[i] = 2i + 1 − left
// (zero outside the image), for left pads, image widths and phase
// widths around the unrolled interior's edges and the assembly loop's
// blocks of 8 pairs.
func TestDeinterleave2(t *testing.T) {
	for left := 0; left <= 4; left++ {
		for n := 0; n <= 41; n++ {
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

// TestInterleave2 checks the pairing of two column phases into a row
// against its definition, d[2v] = ev[v], d[2v+1] = od[v], with ev as long
// as od or one longer, for lengths around the unrolled loop's edges and
// the assembly loop's blocks of 8 pairs; the values past the row stay
// untouched.
func TestInterleave2(t *testing.T) {
	for n := 0; n <= 37; n++ {
		for extra := 0; extra <= 1; extra++ {
			ev, od := make([]float32, n+extra), make([]float32, n)
			for i := range ev {
				ev[i] = float32(100 + i)
			}
			for i := range od {
				od[i] = float32(-1 - i)
			}
			d := make([]float32, 2*n+extra+2)
			for i := range d {
				d[i] = 7
			}
			interleave2(d[:2*n+extra], ev, od)
			for i, v := range d {
				want := float32(7)
				switch {
				case i >= 2*n+extra:
				case i%2 == 0:
					want = ev[i/2]
				default:
					want = od[i/2]
				}
				if v != want {
					t.Fatalf("length %d, ev one longer %v: d[%d] = %v, want %v", n, extra == 1, i, v, want)
				}
			}
		}
	}
}
