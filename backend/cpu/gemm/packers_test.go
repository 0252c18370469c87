package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// rowsPacker packs A (m×k row-major) as a PackedProduct.APacker.
type rowsPacker struct {
	a []float32
	k int
}

func (p *rowsPacker) PackA(dst []float32, i0, mc, p0, kc int) {
	mr, _ := KernelShape()
	for s := 0; s*mr < mc; s++ {
		PackRowsA(dst[s*mr*kc:(s+1)*mr*kc], 0, p.a[(i0+s*mr)*p.k+p0:], p.k, min(mr, mc-s*mr), kc)
	}
}

// transposedPacker packs B from its transpose bt (n×k row-major) as a
// PackedProduct.BPacker.
type transposedPacker struct {
	bt []float32
	k  int
}

func (p *transposedPacker) PackB(dst []float32, p0, kc, j0, nc int) {
	_, nr := KernelShape()
	for s := 0; s*nr < nc; s++ {
		PackTransposedB(dst[s*nr*kc:(s+1)*nr*kc], p.bt[(j0+s*nr)*p.k+p0:], p.k, min(nr, nc-s*nr), kc)
	}
}

// TestPackedProductPackers: APacker and BPacker (alone, together, and next
// to a plain operand) give C within rounding of a float64 product, on
// shapes that run in one block, over several k blocks, and split over the
// cores (columns, rows or the shared dimension).
func TestPackedProductPackers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ m, n, k int }{{5, 7, 3}, {37, 70, 300}, {64, 1200, 96}, {256, 40, 2000}} {
		m, n, k := sh.m, sh.n, sh.k
		a := make([]float32, m*k)
		b := make([]float32, k*n)
		bt := make([]float32, n*k)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				b[p*n+j] = float32(rng.NormFloat64())
				bt[j*k+p] = b[p*n+j]
			}
		}
		ap, bp := &rowsPacker{a: a, k: k}, &transposedPacker{bt: bt, k: k}
		run := func(set func(pp *PackedProduct)) []float32 {
			c := make([]float32, m*n)
			pp := PackedProduct{M: m, N: n, K: k, A: a, LDA: k, B: b, LDB: n, C: c, LDC: n}
			set(&pp)
			pp.Run()
			return c
		}
		for _, side := range []string{"A", "B", "both"} {
			viaPackers := run(func(pp *PackedProduct) {
				if side != "B" {
					pp.APacker, pp.A = ap, nil
				}
				if side != "A" {
					pp.BPacker, pp.B = bp, nil
				}
			})
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var want float64
					for p := 0; p < k; p++ {
						want += float64(a[i*k+p]) * float64(b[p*n+j])
					}
					got := float64(viaPackers[i*n+j])
					require.LessOrEqual(t, math.Abs(got-want), 1e-4*(1+math.Abs(want))*math.Sqrt(float64(k)), "%v C[%d][%d]", sh, i, j)
				}
			}
		}
	}
}
