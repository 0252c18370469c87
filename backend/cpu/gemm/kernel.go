package gemm

// microKernel computes one mr×nr tile of C. ap holds an A strip packed
// k-major (ap[p*mr+i] = alpha*A[i][p]) and bp a B strip packed k-major
// (bp[p*nr+j] = B[p][j]), both kc deep. fn adds their product to the tile
// whose top-left element is c[0] and whose row stride is ldc; the tile is
// always complete (edges are handled by the caller through a scratch tile).
//
// The packing and blocking code only depends on mr and nr, so an assembly
// kernel (for example 6×16 with AVX2/FMA) can replace the pure-Go one by
// assigning a different microKernel to kernel at init time.
type microKernel struct {
	name   string
	mr, nr int
	// mc, kc and nc are the cache blocks that suit this kernel: an mc×kc
	// A block stays in L2, a kc×nr B strip in L1 and the kc×nc B panel in
	// L3. mc must be a multiple of mr and nc of nr.
	mc, kc, nc int
	fn         func(kc int, ap, bp, c []float32, ldc int)
}

// kernel is the micro-kernel Sgemm uses.
var kernel = goKernel2x4

// goKernel2x4 is the portable micro-kernel. Without SIMD the limit is the
// number of float registers: the Go compiler schedules all products of a
// step before the additions, so a 2×4 tile (8 accumulators, 4 B values and
// 8 products) is the largest that stays in registers on amd64; larger tiles
// spill and measured slower. Unrolling k by 8 hides the loop overhead.
var goKernel2x4 = microKernel{name: "go2x4", mr: 2, nr: 4, mc: 128, kc: 256, nc: 2048, fn: kernel2x4}

func kernel2x4(kc int, ap, bp, c []float32, ldc int) {
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
	r := c[0:4:4]
	r[0] += c00
	r[1] += c01
	r[2] += c02
	r[3] += c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0] += c10
	r[1] += c11
	r[2] += c12
	r[3] += c13
}
