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

// Operands names the stored A and B of a product (as Sgemm takes them,
// with the same shapes as the current one) for SgemmSerialNext to
// prefetch.
type Operands struct {
	A   []float32
	LDA int
	B   []float32
	LDB int
}

// SgemmSerialNext is SgemmSerial that, while its last block computes,
// prefetches next's operands (a product of the same shape the caller
// runs next: the following head of a batch whose operands come from
// memory), so that the next product does not start by waiting for
// them. The result is SgemmSerial's, bit for bit.
func SgemmSerialNext(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, next *Operands) {
	if p, ok := newProblem(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); ok {
		if next != nil && next.A != nil && next.B != nil {
			q := p
			q.a, q.lda, q.b, q.ldb = next.A, next.LDA, next.B, next.LDB
			p.after[0] = q.aRegion(0, m, 0, k)
			p.after[1] = q.bRegion(0, k, 0, n)
		}
		p.blocked(kernel, 0, m, 0, n)
	}
}
