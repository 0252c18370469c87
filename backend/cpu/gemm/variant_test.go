package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// variantProduct is one product for comparing two ways of computing it:
// op(A)·op(B) with leading dimensions wider than their rows, and C
// pre-filled (with NaN where beta is 0, so that a read of C shows) with
// padding columns past n that nothing may write.
type variantProduct struct {
	m, n, k       int
	tA, tB        bool
	alpha, beta   float32
	a, b, c0      []float32
	lda, ldb, ldc int
}

func newVariantProduct(r *rand.Rand, m, n, k int, tA, tB bool, alpha, beta float32) variantProduct {
	p := variantProduct{m: m, n: n, k: k, tA: tA, tB: tB, alpha: alpha, beta: beta, lda: k + 1, ldb: n + 3, ldc: n + 2}
	arows, brows := m, k
	if tA {
		p.lda, arows = m+2, k
	}
	if tB {
		p.ldb, brows = k+1, n
	}
	p.a, p.b, p.c0 = randSlice(r, arows*p.lda), randSlice(r, brows*p.ldb), randSlice(r, m*p.ldc)
	if beta == 0 {
		for i := range p.c0 {
			p.c0[i] = float32(math.NaN())
		}
	}
	return p
}

func (p variantProduct) String() string {
	return fmt.Sprintf("%d×%d×%d tA=%v tB=%v alpha=%v beta=%v", p.m, p.n, p.k, p.tA, p.tB, p.alpha, p.beta)
}

// run computes the product into a copy of C on one goroutine (SgemmSerial)
// or split over the workers (Sgemm).
func (p variantProduct) run(serial bool) []float32 {
	c := append([]float32(nil), p.c0...)
	if serial {
		SgemmSerial(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
	} else {
		Sgemm(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
	}
	return c
}

// requireSame checks got against want bit for bit, the padding columns
// untouched, and got within rounding of a float64 reference.
func (p variantProduct) requireSame(t *testing.T, got, want []float32, what string) {
	t.Helper()
	ref := refGemm(p.tA, p.tB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c0, p.ldc)
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.ldc; j++ {
			g := got[i*p.ldc+j]
			if j >= p.n {
				require.Equal(t, math.Float32bits(p.c0[i*p.ldc+j]), math.Float32bits(g), "%v: C[%d][%d] past n written", p, i, j)
				continue
			}
			require.Equal(t, math.Float32bits(want[i*p.ldc+j]), math.Float32bits(g), "%v, %s: C[%d][%d] differs", p, what, i, j)
			require.InDelta(t, ref[i*p.n+j], float64(g), 1e-5*float64(p.k+1), "%v: C[%d][%d]", p, i, j)
		}
	}
}
