package gemm

// microKernel computes one mr×nr tile of C. ap holds an A strip packed
// k-major (ap[p*mr+i] = A[i][p]) and bp a B strip packed k-major
// (bp[p*nr+j] = B[p][j]), both kc deep. fn stores
//
//	C = alpha*(A·B) + beta*C
//
// into the tile whose top-left element is c[0] and whose row stride is ldc.
// When beta is 0 the tile is written without being read, so it may hold
// garbage (or NaNs) beforehand. The tile is always complete: edges are
// handled by the caller through a scratch tile.
//
// The packing and blocking code only depends on mr and nr, so an assembly
// kernel (6×16 with AVX2/FMA on amd64, see kernel_amd64.go) replaces the
// pure-Go one at init time when the CPU supports it.
type microKernel struct {
	name   string
	mr, nr int
	// mc, kc and nc are the cache blocks that suit this kernel: an mc×kc
	// A block stays in L2, a kc×nr B strip in L1 and the kc×nc B panel in
	// L3. mc must be a multiple of mr and nc of nr.
	mc, kc, nc int
	fn         func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
	// half, if not nil, computes only the left nr/2 columns of fn's
	// tile (same arguments, B still packed nr wide), bit for bit as fn
	// does: the edge strips of C with at most nr/2 columns use it.
	half func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
	// rowA and halfRowA, if not nil, are fn and half reading A in place
	// (mr rows of a row-major matrix, lda apart, kc long) instead of a
	// packed strip, bit for bit as fn and half: products whose A block is
	// used by few B strips skip packing it.
	rowA, halfRowA func(kc int, a []float32, lda int, bp, c []float32, ldc int, alpha, beta float32)
	// pair, if not nil, computes two adjacent full tiles (mr×2nr) from
	// one A strip and two consecutive B strips (bp holds 2·nr·kc), bit
	// for bit as two calls of fn: with wider vectors (AVX-512) it runs
	// both tiles at the rate fn runs one.
	pair func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
	// pairS, if not nil, is pair with its two B strips apart: the first
	// tile's columns from b1, the second's from b2 (SgemmSerialTri starts
	// a tile's shared indices inside the packed strips).
	pairS func(kc int, ap, b1, b2, c []float32, ldc int, alpha, beta float32)
	// pairA, if not nil, is pair reading A in place instead of from a
	// packed strip, bit for bit as pair: element (i, q) of the mr×kc
	// strip at a[i*rs + q*ks] (a row-major A: rs = lda, ks = 1; a
	// transposed one: rs = 1, ks = lda). Products whose A block is used
	// by at most pairAMaxCols columns of B skip packing it.
	pairA func(kc int, a []float32, rs, ks int, bp, c []float32, ldc int, alpha, beta float32)
	// fnNT and pairNT, if not nil, are fn and pair with beta = 0 storing
	// C with non-temporal stores (no read for ownership, the lines go to
	// memory instead of the cache), bit for bit the same values. Every
	// row of their tile must start on a 64-byte boundary (streamable),
	// and storeFence must run before another goroutine reads C. A product
	// that writes a result far larger than the caches in one pass (one k
	// block, beta 0) uses them: see streamC.
	fnNT, pairNT func(kc int, ap, bp, c []float32, ldc int, alpha float32)
	// bIn, if not nil, computes an mr×bInCols tile (bInCols: 2nr, the
	// pair kernel's, or nr, fn's) reading its kc×bInCols B block in place
	// (row q at b[q*ldb]) instead of from packed strips, bit for bit as
	// pair or fn, prefetching with each row the lines pf elements on:
	// products whose B values each feed few rows of A skip packing B
	// (see PackedProduct's BViewer).
	bIn     func(kc int, ap, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, pf int)
	bInCols int
}

// kernel is the micro-kernel Sgemm uses. Architecture files replace it in
// init when a faster one is supported; tests swap it to cover both.
var kernel = goKernel2x4

// goKernel2x4 is the portable micro-kernel. Without SIMD the limit is the
// number of float registers: the Go compiler schedules all products of a
// step before the additions, so a 2×4 tile (8 accumulators, 4 B values and
// 8 products) is the largest that stays in registers on amd64; larger tiles
// spill and measured slower. Unrolling k by 8 hides the loop overhead.
var goKernel2x4 = microKernel{name: "go2x4", mr: 2, nr: 4, mc: 128, kc: 256, nc: 2048, fn: kernel2x4}

func kernel2x4(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	ap = ap[:kc*2]
	bp = bp[:kc*4]
	p := 0
	for ; p+8 <= kc; p += 8 {
		a := ap[p*2 : p*2+16 : p*2+16]
		b := bp[p*4 : p*4+32 : p*4+32]

		{
			a0, a1 := a[0], a[1]
			b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[2], a[3]
			b0, b1, b2, b3 := b[4], b[5], b[6], b[7]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[4], a[5]
			b0, b1, b2, b3 := b[8], b[9], b[10], b[11]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[6], a[7]
			b0, b1, b2, b3 := b[12], b[13], b[14], b[15]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[8], a[9]
			b0, b1, b2, b3 := b[16], b[17], b[18], b[19]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[10], a[11]
			b0, b1, b2, b3 := b[20], b[21], b[22], b[23]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[12], a[13]
			b0, b1, b2, b3 := b[24], b[25], b[26], b[27]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
		{
			a0, a1 := a[14], a[15]
			b0, b1, b2, b3 := b[28], b[29], b[30], b[31]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
		}
	}
	for ; p < kc; p++ {
		a := ap[p*2 : p*2+2 : p*2+2]
		b := bp[p*4 : p*4+4 : p*4+4]
		a0, a1 := a[0], a[1]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	r0 := c[0:4:4]
	r1 := c[ldc : ldc+4 : ldc+4]
	if beta == 0 {
		r0[0], r0[1], r0[2], r0[3] = alpha*c00, alpha*c01, alpha*c02, alpha*c03
		r1[0], r1[1], r1[2], r1[3] = alpha*c10, alpha*c11, alpha*c12, alpha*c13
		return
	}
	r0[0] = beta*r0[0] + alpha*c00
	r0[1] = beta*r0[1] + alpha*c01
	r0[2] = beta*r0[2] + alpha*c02
	r0[3] = beta*r0[3] + alpha*c03
	r1[0] = beta*r1[0] + alpha*c10
	r1[1] = beta*r1[1] + alpha*c11
	r1[2] = beta*r1[2] + alpha*c12
	r1[3] = beta*r1[3] + alpha*c13
}
