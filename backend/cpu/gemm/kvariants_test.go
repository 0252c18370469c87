package gemm

import "testing"

func kernel3x4(kc int, ap, bp, c []float32, ldc int) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	ap = ap[:kc*3]
	bp = bp[:kc*4]
	for p := 0; p < kc; p++ {
		a := ap[p*3 : p*3+3 : p*3+3]
		b := bp[p*4 : p*4+4 : p*4+4]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0 := a[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := a[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := a[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
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
}

func kernel2x4(kc int, ap, bp, c []float32, ldc int) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	ap = ap[:kc*2]
	bp = bp[:kc*4]
	for p := 0; p < kc; p++ {
		a := ap[p*2 : p*2+2 : p*2+2]
		b := bp[p*4 : p*4+4 : p*4+4]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0 := a[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := a[1]
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

func benchKernel(b *testing.B, mk microKernel) {
	saved := kernel
	kernel = mk
	defer func() { kernel = saved }()
	benchSgemm(b, 1024, 1024, 1024)
}

func BenchmarkK4x4(b *testing.B) { benchKernel(b, goKernel4x4) }
func BenchmarkK3x4(b *testing.B) { benchKernel(b, microKernel{"3x4", 3, 4, kernel3x4}) }
func BenchmarkK2x4(b *testing.B) { benchKernel(b, microKernel{"2x4", 2, 4, kernel2x4}) }
