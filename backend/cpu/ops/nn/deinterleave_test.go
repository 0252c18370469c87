package nn

import (
	"math"
	"testing"
)

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

// TestDeinterleave2Rows checks the phase split of runs of image rows
// (deinterleave2Rows) against deinterleave2 row by row, bit for bit, with
// values around each row (its neighbours in x, which the vector loop
// reads where the pads are) that must not reach the output, for left pads
// 0-4, widths and phase widths around the loop's blocks of 8 pairs and
// its overlapping last block, runs that start at x's first row or end at
// its last; the rows it leaves and the gaps between the rows of dst stay
// untouched.
func TestDeinterleave2Rows(t *testing.T) {
	for left := 0; left <= 4; left++ {
		for w := 1; w <= 40; w++ {
			for pw := 8; pw <= (w+left)/2+3; pw++ {
				for rows := 1; rows <= 3; rows++ {
					for first := 0; first <= 1; first++ {
						checkDeinterleave2Rows(t, left, w, pw, rows, first)
					}
				}
			}
		}
	}
}

func checkDeinterleave2Rows(t *testing.T, left, w, pw, rows, first int) {
	t.Helper()
	const gap = 3
	wp := 2*pw + gap
	total := first + rows + 1 // image rows in x: the run and one after it
	x := make([]float32, total*w)
	for i := range x {
		x[i] = float32(1000 + i)
	}
	x = x[:(first+rows)*w] // the run ends at x's last row
	dst := make([]float32, rows*wp)
	for i := range dst {
		dst[i] = -7
	}
	done := deinterleave2Rows(dst, x, first*w, w, wp, pw, left, rows)
	if !pairsAVX2 {
		if done != 0 {
			t.Fatalf("without the vector loop deinterleave2Rows did %d rows", done)
		}
		return
	}
	if first*w < left && done != 0 {
		t.Fatalf("left %d, width %d: a run starting before x did %d rows", left, w, done)
	}
	for k := 0; k < rows; k++ {
		row := dst[k*wp : (k+1)*wp]
		if k >= done {
			for i, v := range row {
				if v != -7 {
					t.Fatalf("left %d, width %d, phase width %d: row %d (not done) element %d is %v", left, w, pw, k, i, v)
				}
			}
			continue
		}
		ev, od := make([]float32, pw), make([]float32, pw)
		in := x[(first+k)*w : (first+k+1)*w]
		deinterleave2(ev, od, in, left)
		for i := 0; i < pw; i++ {
			if math.Float32bits(row[i]) != math.Float32bits(ev[i]) || math.Float32bits(row[pw+i]) != math.Float32bits(od[i]) {
				t.Fatalf("left %d, width %d, phase width %d, rows %d, first %d: row %d pair %d is (%v, %v), want (%v, %v)",
					left, w, pw, rows, first, k, i, row[i], row[pw+i], ev[i], od[i])
			}
		}
		for i := 2 * pw; i < wp; i++ {
			if row[i] != -7 {
				t.Fatalf("left %d, width %d, phase width %d: row %d's gap element %d is %v", left, w, pw, k, i, row[i])
			}
		}
	}
	// The rows whose runs lie inside x, from the first while they do.
	want := 0
	for k := 0; k < rows && first*w >= left && (first+k)*w-left+2*pw <= len(x); k++ {
		want = k + 1
	}
	if done != want {
		t.Fatalf("left %d, width %d, phase width %d, rows %d, first %d: %d rows done, want %d", left, w, pw, rows, first, done, want)
	}
}
