package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestPairAKernel: the pair kernel reading A in place stores bit for bit
// what the pair kernel stores from the same strip packed, for a row-major
// A (rs = lda, ks = 1) and a transposed one (rs = 1, ks = lda), at depths
// that are and are not multiples of its 8-step unroll, alpha and beta 0,
// 1 and others; within rounding of float64; nothing beside its 6×32 tile
// written, and C never read when beta is 0 (NaN there does not show).
func TestPairAKernel(t *testing.T) {
	mk := kernel
	if mk.pairA == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no in-place pair kernel (it needs AVX-512F)", mk.name)
	}
	mr, nr := mk.mr, mk.nr
	r := rand.New(rand.NewPCG(71, 72))
	for _, kc := range []int{1, 2, 7, 8, 9, 16, 63, 64, 65, 197, 256} {
		for _, transposed := range []bool{false, true} {
			for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 1}, {-2, 0.25}} {
				alpha, beta := ab[0], ab[1]
				// A in place: a strip of a larger matrix, so that rows
				// (or columns) beside it are there to be misread.
				var a []float32
				var rs, ks, off int
				if transposed {
					lda := mr + 5
					a, rs, ks, off = randSlice(r, (kc+1)*lda), 1, lda, lda+2
				} else {
					lda := kc + 3
					a, rs, ks, off = randSlice(r, (mr+2)*lda), lda, 1, lda+1
				}
				ap := make([]float32, mr*kc) // the same strip packed
				for i := 0; i < mr; i++ {
					for q := 0; q < kc; q++ {
						ap[q*mr+i] = a[off+i*rs+q*ks]
					}
				}
				bp := randSlice(r, 2*nr*kc)
				ldc := 2*nr + 5
				c0 := randSlice(r, (mr+1)*ldc)
				if beta == 0 {
					for i := range c0 {
						if i%ldc < 2*nr && i < mr*ldc {
							c0[i] = float32(math.NaN())
						}
					}
				}
				want := append([]float32(nil), c0...)
				mk.pair(kc, ap, bp, want, ldc, alpha, beta)
				got := append([]float32(nil), c0...)
				mk.pairA(kc, a[off:], rs, ks, bp, got, ldc, alpha, beta)
				requirePairTile(t, mk, kc, ldc, func(i, q int) float32 { return a[off+i*rs+q*ks] }, bp, c0, want, got, alpha, beta,
					fmt.Sprintf("kc=%d transposed=%v", kc, transposed), "the packed pair kernel")
			}
		}
	}
}

// TestSgemmPairAMatchesPacked: whole products whose column blocks are one
// or two strip pairs (attention's P·V and dS·K: 197×64×197) read their
// row-major A in place and store bit for bit what the same products store
// with A packed: odd row counts (a last, partial strip packed), shared
// dimensions that are not multiples of the unroll, B transposed or not,
// alpha and beta 0, 1 and others, on one goroutine (SgemmSerial, as
// attention's heads run) and split over two (Sgemm); within rounding of
// float64. Products with a transposed A read it in place the same way
// (rs = 1, ks = lda); wider column blocks take the packed path and are
// compared the same way.
func TestSgemmPairAMatchesPacked(t *testing.T) {
	if kernel.pairA == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no in-place pair kernel (it needs AVX-512F)", kernel.name)
	}
	packed := kernel
	packed.pairA = nil
	defer usePairATransposed(true)()
	r := rand.New(rand.NewPCG(73, 74))
	shapes := [][3]int{{197, 64, 197}, {197, 32, 64}, {13, 64, 9}, {300, 64, 65}, {128, 64, 128}, {197, 96, 30}, {61, 33, 17}}
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		for _, sz := range shapes {
			m, n, k := sz[0], sz[1], sz[2]
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 1}, {-2, 0.25}} {
						p := newVariantProduct(r, m, n, k, tA, tB, ab[0], ab[1])
						for _, serial := range []bool{true, false} {
							got := p.run(serial)
							restore := useKernel(packed)
							want := p.run(serial)
							restore()
							p.requireSame(t, got, want, fmt.Sprintf("procs=%d serial=%v, A in place against A packed", procs, serial))
						}
					}
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}

// TestPairAPathTaken: the in-place path runs for a row-major or a
// transposed A under column blocks of one or two pairs, and not otherwise (a counting pairA
// in place of the kernel's).
func TestPairAPathTaken(t *testing.T) {
	if kernel.pairA == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no in-place pair kernel (it needs AVX-512F)", kernel.name)
	}
	counting, inPlace := kernel, kernel.pairA
	calls := 0
	counting.pairA = func(kc int, a []float32, rs, ks int, bp, c []float32, ldc int, alpha, beta float32) {
		calls++
		inPlace(kc, a, rs, ks, bp, c, ldc, alpha, beta)
	}
	defer useKernel(counting)()
	r := rand.New(rand.NewPCG(75, 76))
	count := func(tA bool, m, n, k int) int {
		calls = 0
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		lda := k
		if tA {
			lda = m
		}
		SgemmSerial(tA, false, m, n, k, 1, a, lda, b, n, 0, c, n)
		return calls
	}
	require.Equal(t, 32*2, count(false, 197, 64, 197), "P·V: 32 full strips × 2 pairs in place")
	require.Equal(t, 32, count(false, 197, 32, 64), "one pair")
	restore := usePairATransposed(true)
	require.Equal(t, 32*2, count(true, 197, 64, 197), "Pᵀ·dO, A transposed: 32 full strips × 2 pairs in place")
	require.Zero(t, count(true, 197, 96, 64), "A transposed, three pairs: packed")
	restore()
	restore = usePairATransposed(false)
	defer restore()
	require.Zero(t, count(true, 197, 64, 197), "A transposed, pairATransposed off: packed")
	require.Zero(t, count(false, 197, 96, 64), "three pairs: packed")
	require.Zero(t, count(false, 197, 48, 64), "a pair and a single strip: packed")
}
