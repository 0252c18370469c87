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
	fn     func(kc int, ap, bp, c []float32, ldc int)
}

// kernel is the micro-kernel Sgemm uses.
var kernel = goKernel4x4

// goKernel4x4 is the portable micro-kernel: a 4×4 tile whose 16 accumulators
// the Go compiler keeps in registers.
var goKernel4x4 = microKernel{name: "go4x4", mr: 4, nr: 4, fn: kernel4x4}

func kernel4x4(kc int, ap, bp, c []float32, ldc int) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	ap = ap[:kc*4]
	bp = bp[:kc*4]
	for p := 0; p < len(ap) && p < len(bp); p += 4 {
		a := ap[p : p+4 : p+4]
		b := bp[p : p+4 : p+4]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
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
	r = c[2*ldc : 2*ldc+4 : 2*ldc+4]
	r[0] += c20
	r[1] += c21
	r[2] += c22
	r[3] += c23
	r = c[3*ldc : 3*ldc+4 : 3*ldc+4]
	r[0] += c30
	r[1] += c31
	r[2] += c32
	r[3] += c33
}
