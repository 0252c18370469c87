package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSgemmSerialNextMatchesSerial: naming the next product's operands
// only adds prefetches; every shape and layout stores SgemmSerial's
// result bit for bit, including products of several k slices and row
// blocks (where the hint applies to the last block only), edges of 197
// (attention's heads) and operands whose rows lie far apart.
func TestSgemmSerialNextMatchesSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := []struct{ m, n, k, pad int }{
		{197, 197, 64, 3008}, {197, 64, 197, 0}, {128, 128, 64, 0},
		{300, 70, 600, 5}, {13, 29, 7, 0}, {6, 16, 1, 0},
		{1, 197, 64, 3008}, {1, 64, 197, 0}, // one row: thin or blocked
	}
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				ar, ac := s.m, s.k
				if ta {
					ar, ac = s.k, s.m
				}
				br, bc := s.k, s.n
				if tb {
					br, bc = s.n, s.k
				}
				lda, ldb := ac+s.pad, bc+s.pad
				a := randSlice(r, 2*ar*lda)
				b := randSlice(r, 2*br*ldb)
				want := make([]float32, s.m*s.n)
				got := make([]float32, s.m*s.n)
				for i := range got {
					got[i] = float32(math.NaN()) // beta 0 must not read C
				}
				SgemmSerial(ta, tb, s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0, want, s.n)
				next := &Operands{A: a[ar*lda:], LDA: lda, B: b[br*ldb:], LDB: ldb}
				SgemmSerialNext(ta, tb, s.m, s.n, s.k, 0.5, a, lda, b, ldb, 0, got, s.n, next)
				require.Equal(t, want, got, "m=%d n=%d k=%d ta=%v tb=%v", s.m, s.n, s.k, ta, tb)
				// beta 1 accumulates as SgemmSerial does; no hint at all
				// is SgemmSerial.
				SgemmSerial(ta, tb, s.m, s.n, s.k, 1, a, lda, b, ldb, 1, want, s.n)
				SgemmSerialNext(ta, tb, s.m, s.n, s.k, 1, a, lda, b, ldb, 1, got, s.n, nil)
				require.Equal(t, want, got, "beta 1: m=%d n=%d k=%d ta=%v tb=%v", s.m, s.n, s.k, ta, tb)
			}
		}
	}
}

// TestSgemmSerialNextOtherShape: the next product may have another shape
// and other transposes (attention's scores, then P·V) and may name only
// one operand (the other already in the cache); its operands are sized
// exactly for that shape, so a prefetch over the current product's shape
// would run past them (and panic on the bounds check). The result is
// still SgemmSerial's, bit for bit.
func TestSgemmSerialNextOtherShape(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, k = 197, 64
	for _, m := range []int{197, 1} { // blocked; the thin path of one row
		a, b := randSlice(r, m*k), randSlice(r, k*n)
		want := make([]float32, m*n)
		SgemmSerial(false, true, m, n, k, 0.125, a, k, b, k, 0, want, n)
		const nm, nn, nk = 64, 32, 16
		na, nb := randSlice(r, nk*nm), randSlice(r, nk*nn) // op(A) = Aᵀ: stored nk×nm
		for _, next := range []*Operands{
			{A: na, LDA: nm, B: nb, LDB: nn, TransA: true, M: nm, N: nn, K: nk},
			{A: na, LDA: nm, TransA: true, M: nm, N: nn, K: nk},
			{B: nb, LDB: nn, TransA: true, M: nm, N: nn, K: nk},
			{},
		} {
			got := make([]float32, m*n)
			SgemmSerialNext(false, true, m, n, k, 0.125, a, k, b, k, 0, got, n, next)
			require.Equal(t, want, got, "m %d next %+v", m, next.M)
		}
	}
}
