package gemm

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireStolen runs product (which must return want) until the first
// piece to open its tail in a run was held, by tailOpenHook, until the
// other goroutine had claimed units of it, and fails if that never
// happened in ten runs (each a second at most).
func requireStolen(t *testing.T, want []float32, product func() []float32) {
	t.Helper()
	defer func() { tailOpenHook = nil }()
	var first atomic.Bool
	var before int64
	tailOpenHook = func() {
		if !first.CompareAndSwap(false, true) {
			return
		}
		for end := time.Now().Add(time.Second); tailSteals.Load() == before && time.Now().Before(end); {
			runtime.Gosched()
		}
	}
	stolen := false
	for try := 0; try < 10 && !stolen; try++ {
		first.Store(false)
		before = tailSteals.Load()
		require.Equal(t, want, product(), "try %d", try)
		stolen = tailSteals.Load() > before
	}
	require.True(t, stolen, "no unit of a held piece's tail was claimed by the other goroutine")
}

// TestSplitTailsAreStolenBitForBit holds the first piece of split
// products whose tail opens (tailShare) until the other piece's goroutine,
// done with its own piece, has claimed units of it, and checks that the
// result is bit for bit the product computed without splitting (the row
// and column splits) or as the shared-dimension split's two partial
// products summed in order, and that units were stolen. A try whose
// other piece was not taken by a second goroutine within a second (a
// loaded machine) is run again.
func TestSplitTailsAreStolenBitForBit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		name           string
		transA, transB bool
		m, n, k        int
		shared         bool // the split runs over the shared dimension
		alpha, beta    float32
	}{
		{"rows", false, false, 2048, 64, 600, false, 1, 0},
		{"cols", false, true, 128, 1024, 784, false, 1, 0.5},
		{"cols_transA", true, false, 200, 1536, 520, false, 0.5, 0},
		{"shared", false, false, 384, 96, 4096, true, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lda, ldb := c.k, c.n
			if c.transA {
				lda = c.m
			}
			if c.transB {
				ldb = c.k
			}
			a, b := randSlice(r, c.m*c.k), randSlice(r, c.k*c.n)
			c0 := randSlice(r, c.m*c.n)
			want := append([]float32(nil), c0...)
			runtime.GOMAXPROCS(1)
			if !c.shared {
				Sgemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, want, c.n)
			} else {
				// splitK's order: the first slice into C (with beta),
				// the second into a partial product added row by row.
				var bounds [maxSplit + 1]int
				require.Equal(t, 2, splitRangeInto(bounds[:], c.k, kernel.kc, 2))
				k1 := bounds[1]
				Sgemm(false, false, c.m, c.n, k1, c.alpha, a, lda, b, ldb, c.beta, want, c.n)
				part := make([]float32, c.m*c.n)
				Sgemm(false, false, c.m, c.n, c.k-k1, c.alpha, a[k1:], lda, b[k1*ldb:], ldb, 0, part, c.n)
				for i, v := range part {
					want[i] += v
				}
			}
			runtime.GOMAXPROCS(2)
			requireStolen(t, want, func() []float32 {
				got := append([]float32(nil), c0...)
				Sgemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, got, c.n)
				return got
			})
		})
	}
}

// TestPackedTailsAreStolenBitForBit is TestSplitTailsAreStolenBitForBit
// for PackedProduct (a packer for A, plain B): the split pieces' tails
// claimed by the other goroutine give the bits of the product unsplit
// (columns, rows) or split without a held tail (the shared dimension).
func TestPackedTailsAreStolenBitForBit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := rand.New(rand.NewPCG(9, 10))
	for _, sh := range []struct {
		name    string
		m, n, k int
		shared  bool
	}{{"cols", 64, 1200, 300, false}, {"rows", 1500, 40, 300, false}, {"shared", 256, 40, 2000, true}} {
		t.Run(sh.name, func(t *testing.T) {
			m, n, k := sh.m, sh.n, sh.k
			a, b := randSlice(r, m*k), randSlice(r, k*n)
			product := func() []float32 {
				c := make([]float32, m*n)
				pp := PackedProduct{M: m, N: n, K: k, APacker: &rowsPacker{a: a, k: k}, B: b, LDB: n, C: c, LDC: n}
				pp.Run()
				return c
			}
			if !sh.shared {
				runtime.GOMAXPROCS(1)
			}
			want := product()
			runtime.GOMAXPROCS(2)
			requireStolen(t, want, product)
		})
	}
}
