package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// TestSgemmRowsMatchesSgemm: where RowsExact says so, SgemmRows gives any
// block of rows the bits Sgemm gives those rows of the whole product —
// blocks of 1, 5 and 64 rows and a short last one, A as stored and
// transposed, beta 0 and 1, a product small enough for one goroutine and
// ones Sgemm splits by rows and by columns — and a product Sgemm splits
// along its shared dimension, or runs in the direct loops, is not.
func TestSgemmRowsMatchesSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		m, n, k int
		transA  bool
		beta    float32
	}{
		{37, 11, 12, false, 0},
		{37, 11, 12, true, 0},
		{2000, 64, 256, true, 0},  // split by rows
		{700, 300, 16, true, 1},   // split by rows, beta 1
		{12, 700, 300, false, 0},  // split by columns
		{1365, 96, 512, true, 0},  // the GPT head's shape, narrower
		{1365, 96, 2048, true, 0}, // whose blocks Sgemm alone would split along k
	} {
		require.True(t, RowsExact(c.m, c.n, c.k), "%v", c)
		lda := c.k
		if c.transA {
			lda = c.m
		}
		a, b := randSlice(r, c.m*c.k), randSlice(r, c.k*c.n)
		c0 := randSlice(r, c.m*c.n)
		whole := append([]float32(nil), c0...)
		Sgemm(c.transA, false, c.m, c.n, c.k, 1, a, lda, b, c.n, c.beta, whole, c.n)
		for _, block := range []int{1, 5, 64, c.m} {
			got := append([]float32(nil), c0...)
			for i0 := 0; i0 < c.m; i0 += block {
				i1 := min(i0+block, c.m)
				SgemmRows(c.transA, false, c.m, c.n, c.k, i0, i1, 1, a, lda, b, c.n, c.beta, got[i0*c.n:], c.n)
			}
			for i := range whole {
				if math.Float32bits(whole[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%v, blocks of %d rows: element %d (row %d) %v, Sgemm %v", c, block, i, i/c.n, got[i], whole[i])
				}
			}
		}
	}
	if kern.Workers() > 1 {
		assert.False(t, RowsExact(40, 40, 4096), "split along the shared dimension")
	}
	assert.False(t, RowsExact(4, 4, 4), "the direct loops")
}
