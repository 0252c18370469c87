package gemm

import (
	"fmt"
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
					p := newVariantProduct(r, m, n, k, tA, tB, ab[0], ab[1])
					for _, serial := range []bool{true, false} {
						run := func(limit int) []float32 {
							defer func(was int) { oneBlockABytes = was }(oneBlockABytes)
							oneBlockABytes = limit
							return p.run(serial)
						}
						blocks, one := run(0), run(oneBlockABytes)
						p.requireSame(t, one, blocks, fmt.Sprintf("serial=%v, one A block against the mc blocks", serial))
					}
				}
			}
		}
	}
}
