package gemm

// SgemmSerial is Sgemm computed entirely on the calling goroutine: a
// caller that already runs one product per core (the Winograd filter
// gradient's per-worker transform blocks) calls it from each of its
// workers, where Sgemm would split a product that is big enough across
// the cores a second time. The arguments and the result are Sgemm's.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if p, ok := newProblem(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); ok {
		p.blocked(kernel, 0, m, 0, n)
	}
}
