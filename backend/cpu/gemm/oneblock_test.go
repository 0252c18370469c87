package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestABlockRows: rows a little above mc whose packed A fits in
// oneBlockABytes make one block (attention's 197-row heads at k = 64 and
// 197), taller or deeper ones keep the evened-out mc blocks.
func TestABlockRows(t *testing.T) {
	mk := microKernel{mr: 6, mc: 144}
	assert.Equal(t, 198, aBlockRows(mk, 197, 64))
	assert.Equal(t, 198, aBlockRows(mk, 197, 197))
	assert.Equal(t, 144, aBlockRows(mk, 100, 256), "fewer rows than mc: mc")
	assert.Equal(t, 102, aBlockRows(mk, 300, 256), "300×256 packs to 300 KiB: above the limit, three even blocks")
	assert.Equal(t, 132, aBlockRows(mk, 788, 256), "a large product: even mc blocks")
	assert.Equal(t, 252, aBlockRows(mk, 250, 256), "250×256 packs to 250,000 bytes")
}

// TestSgemmOneABlock: products computed with one A block for all their
// rows (aBlockRows) store bit for bit what the same products store in mc
// blocks (each element is the same sums in the same order), and are within
// rounding of float64: odd row and column counts (edge strips and tiles),
// shared dimensions that are not multiples of the kernel's unroll, A and
// B transposed, alpha and beta 0, 1 and others, on one goroutine
// (SgemmSerial, as attention's heads run) and split over two (Sgemm).
func TestSgemmOneABlock(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	shapes := [][3]int{{197, 197, 64}, {197, 64, 197}, {151, 37, 100}, {250, 33, 255}, {145, 16, 1}, {197, 5, 7}, {300, 20, 65}}
	for _, sz := range shapes {
		m, n, k := sz[0], sz[1], sz[2]
		require.Greater(t, aBlockRows(kernel, m, k), kernel.mc, "shape %v must take one block", sz)
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 1}, {-2, 0.25}} {
					for _, serial := range []bool{true, false} {
						alpha, beta := ab[0], ab[1]
						lda, arows := k+1, m
						if tA {
							lda, arows = m+2, k
						}
						ldb, brows := n+3, k
						if tB {
							ldb, brows = k, n
						}
						ldc := n + 1
						a, b := randSlice(r, arows*lda), randSlice(r, brows*ldb)
						c0 := randSlice(r, m*ldc)
						if beta == 0 {
							for i := range c0 {
								c0[i] = float32(math.NaN())
							}
						}
						run := func(limit int) []float32 {
							defer func(was int) { oneBlockABytes = was }(oneBlockABytes)
							oneBlockABytes = limit
							c := append([]float32(nil), c0...)
							if serial {
								SgemmSerial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
							} else {
								Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
							}
							return c
						}
						blocks, one := run(0), run(oneBlockABytes)
						want := refGemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc)
						for i := 0; i < m; i++ {
							for j := 0; j < ldc; j++ {
								g := one[i*ldc+j]
								if j >= n {
									require.Equal(t, math.Float32bits(c0[i*ldc+j]), math.Float32bits(g), "%v: C[%d][%d] past n written", sz, i, j)
									continue
								}
								require.Equal(t, math.Float32bits(blocks[i*ldc+j]), math.Float32bits(g),
									"%v tA=%v tB=%v alpha=%v beta=%v serial=%v: C[%d][%d] differs from the mc blocks' result", sz, tA, tB, alpha, beta, serial, i, j)
								require.InDelta(t, want[i*n+j], float64(g), 1e-5*float64(k+1), "%v: C[%d][%d]", sz, i, j)
							}
						}
					}
				}
			}
		}
	}
}
