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

// Operands names the stored A and B of a product (as Sgemm takes them)
// for SgemmSerialNext to prefetch: with M zero the product has the
// current one's shape and transposes, else op(A) is M×K and op(B) K×N.
type Operands struct {
	A              []float32
	LDA            int
	B              []float32
	LDB            int
	TransA, TransB bool
	M, N, K        int
}

// SgemmSerialNext is SgemmSerial that, while its last block computes,
// prefetches next's operands (the product the caller runs next: the
// following head of a batch whose operands come from memory), so that
// the next product does not start by waiting for them; a nil A or B (an
// operand already in the cache) is not prefetched. The result is SgemmSerial's, bit for bit.
func SgemmSerialNext(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, next *Operands) {
	if p, ok := newProblem(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); ok {
		if next != nil {
			p.after = nextRegions(&p, next)
		}
		p.blocked(kernel, 0, m, 0, n)
	}
}

// nextRegions is what p's last block prefetches for next (a product of
// p's shape and layout unless next names its own).
func nextRegions(p *problem, next *Operands) (after [2]Region) {
	q := *p
	q.a, q.lda, q.b, q.ldb = next.A, next.LDA, next.B, next.LDB
	nm, nn, nk := p.m, p.n, p.k
	if next.M > 0 {
		q.transA, q.transB = next.TransA, next.TransB
		nm, nn, nk = next.M, next.N, next.K
	}
	if next.A != nil {
		after[0] = q.aRegion(0, nm, 0, nk)
	}
	if next.B != nil {
		after[1] = q.bRegion(0, nk, 0, nn)
	}
	return after
}
