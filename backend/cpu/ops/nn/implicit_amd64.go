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

// deinterleave2RowsAVX2 splits rows runs of 2·pw values (src, srcStride
// apart) into their even and odd positions, dst[0:pw] and dst[pw:2pw] of
// each row (dstStride apart), eight pairs a block, the last block at
// pair pw − 8 (pw ≥ 8).
//
//go:noescape
func deinterleave2RowsAVX2(dst, src *float32, rows, dstStride, srcStride, pw int)

// deinterleave2RowsVec runs deinterleave2RowsAVX2 over dst and src (which
// hold the rows' outputs and runs), or reports false without AVX2.
func deinterleave2RowsVec(dst, src []float32, rows, dstStride, srcStride, pw int) bool {
	if !pairsAVX2 || pw < 8 || rows < 1 {
		return false
	}
	_, _ = dst[(rows-1)*dstStride+2*pw-1], src[(rows-1)*srcStride+2*pw-1]
	deinterleave2RowsAVX2(&dst[0], &src[0], rows, dstStride, srcStride, pw)
	return true
}

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

// evens2AVX2 writes d[v] = s[2v] for blocks·8 values.
//
//go:noescape
func evens2AVX2(d, s *float32, blocks int)

// spread2AVX2 writes d[2v] = s[v] and d[2v+1] = 0 for blocks·8 values
// of s.
//
//go:noescape
func spread2AVX2(d, s *float32, blocks int)

// evens2Blocks writes d[v] = s[2v] for the first 8·k values of d with
// the assembly loop, k the whole blocks of 8 that d holds and s holds
// twice (s is read in blocks of 16), and returns 8·k: 0 without AVX2.
func evens2Blocks(d, s []float32) int {
	n := min(len(d)/8, len(s)/16)
	if !pairsAVX2 || n == 0 {
		return 0
	}
	_ = s[16*n-1]
	evens2AVX2(&d[0], &s[0], n)
	return 8 * n
}

// spread2Blocks writes d[2v] = s[v], d[2v+1] = 0 for the first 8·k
// values of s with the assembly loop, k the whole blocks of 8 that s
// holds and d holds twice, and returns 8·k: 0 without AVX2.
func spread2Blocks(d, s []float32) int {
	n := min(len(s)/8, len(d)/16)
	if !pairsAVX2 || n == 0 {
		return 0
	}
	_ = d[16*n-1]
	spread2AVX2(&d[0], &s[0], n)
	return 8 * n
}
