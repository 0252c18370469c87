//go:build amd64 && !purego

package nn

import "golang.org/x/sys/cpu"

// pairsAVX2 reports whether the CPU (and OS) support the pair loops in
// implicit_amd64.s.
var pairsAVX2 = cpu.X86.HasAVX2

// deinterleave2AVX2 splits blocks·16 consecutive values of s into their
// even (ev) and odd (od) positions, blocks·8 each.
//
//go:noescape
func deinterleave2AVX2(ev, od, s *float32, blocks int)

// interleave2AVX2 writes blocks·8 values of ev and of od alternately
// into d (d[2v] = ev[v], d[2v+1] = od[v]), blocks·16 values.
//
//go:noescape
func interleave2AVX2(d, ev, od *float32, blocks int)

// deinterleave2Blocks splits the first 16·(len(e)/8) values of s into e
// and o with the assembly loop (e and o at least as long as each other's
// blocks, s twice as long), and returns how many pairs it split: 0
// without AVX2.
func deinterleave2Blocks(e, o, s []float32) int {
	n := len(e) / 8
	if !pairsAVX2 || n == 0 {
		return 0
	}
	_, _ = o[8*n-1], s[16*n-1]
	deinterleave2AVX2(&e[0], &o[0], &s[0], n)
	return 8 * n
}

// interleave2Blocks writes the first 8·(len(e)/8) pairs of e and o into
// d with the assembly loop and returns how many pairs it wrote: 0
// without AVX2.
func interleave2Blocks(d, e, o []float32) int {
	n := len(e) / 8
	if !pairsAVX2 || n == 0 {
		return 0
	}
	_, _ = o[8*n-1], d[16*n-1]
	interleave2AVX2(&d[0], &e[0], &o[0], n)
	return 8 * n
}
