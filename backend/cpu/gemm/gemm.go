// Package gemm is the CPU backend's float32 matrix multiply, shared by
// MatMul, Gemm, Conv and the recurrent layers.
package gemm

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where
// op(X) is X or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb
// and ldc are the row strides of A, B and C as stored. When beta is 0, C is
// overwritten without being read (NaNs in C do not propagate).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			for j := range row {
				row[j] = 0
			}
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if transB {
				for j := 0; j < n; j++ {
					row[j] += av * b[j*ldb+p]
				}
			} else {
				brow := b[p*ldb : p*ldb+n]
				for j, bv := range brow {
					row[j] += av * bv
				}
			}
		}
	}
}
