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

// TestPairKernel: the pair kernel stores bit for bit what two calls of the
// single-tile kernel store for the same A strip and the two B strips, is
// within rounding of a float64 reference, touches nothing outside its
// mr×2nr tile and never reads C when beta is 0.
func TestPairKernel(t *testing.T) {
	mk := kernel
	if mk.pair == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no pair kernel (it needs AVX-512F)", mk.name)
	}
	mr, nr := mk.mr, mk.nr
	r := rand.New(rand.NewPCG(41, 42))
	for kc := 1; kc <= 37; kc++ {
		for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
			alpha, beta := ab[0], ab[1]
			ap := randSlice(r, mr*kc)
			bp := randSlice(r, 2*nr*kc)
			ldc := 2*nr + 3
			c0 := randSlice(r, mr*ldc)
			if beta == 0 {
				for i := range c0 {
					if i%ldc < 2*nr {
						c0[i] = float32(math.NaN())
					}
				}
			}
			want := append([]float32(nil), c0...)
			mk.fn(kc, ap, bp[:nr*kc], want, ldc, alpha, beta)
			mk.fn(kc, ap, bp[nr*kc:], want[nr:], ldc, alpha, beta)
			got := append([]float32(nil), c0...)
			mk.pair(kc, ap, bp, got, ldc, alpha, beta)
			requirePairTile(t, mk, kc, ldc, func(i, q int) float32 { return ap[q*mr+i] }, bp, c0, want, got, alpha, beta,
				fmt.Sprintf("kc=%d", kc), "two single tiles")
		}
	}
}

// requirePairTile checks a pair kernel's mr×2nr tile stored at got (rows
// ldc apart, C before it at c0, every row past mr and column past 2nr
// outside the tile): bit for bit want inside the tile, untouched outside
// it, and within rounding of a float64 reference from the A strip (its
// element (i, q) aAt(i, q)) and the two packed B strips bp. what names
// the case, against what want came from.
func requirePairTile(t *testing.T, mk microKernel, kc, ldc int, aAt func(i, q int) float32, bp, c0, want, got []float32, alpha, beta float32, what, against string) {
	t.Helper()
	mr, nr := mk.mr, mk.nr
	for i := 0; i < len(got)/ldc; i++ {
		for j := 0; j < ldc; j++ {
			g := got[i*ldc+j]
			if i >= mr || j >= 2*nr {
				require.Equal(t, math.Float32bits(c0[i*ldc+j]), math.Float32bits(g),
					"%s: C[%d][%d] outside the tile was written", what, i, j)
				continue
			}
			require.Equal(t, math.Float32bits(want[i*ldc+j]), math.Float32bits(g),
				"%s alpha=%v beta=%v: C[%d][%d] differs from %s", what, alpha, beta, i, j, against)
			strip, col := j/nr, j%nr
			var s float64
			for q := 0; q < kc; q++ {
				s += float64(aAt(i, q)) * float64(bp[strip*nr*kc+q*nr+col])
			}
			s *= float64(alpha)
			if beta != 0 {
				s += float64(beta) * float64(c0[i*ldc+j])
			}
			require.InDelta(t, s, float64(g), 1e-5*float64(kc+1), "%s C[%d][%d]", what, i, j)
		}
	}
}

// TestSgemmPairMatchesSingle: whole products (the MLP step's shapes, edge
// strips on both sides, one goroutine and split) store bit for bit the
// same C with and without the pair kernel, and stay within rounding of a
// float64 reference.
func TestSgemmPairMatchesSingle(t *testing.T) {
	if kernel.pair == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no pair kernel (it needs AVX-512F)", kernel.name)
	}
	single := kernel
	single.pair = nil
	r := rand.New(rand.NewPCG(43, 44))
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		for _, sz := range [][3]int{{128, 512, 784}, {512, 784, 128}, {128, 512, 512}, {37, 101, 45}, {130, 88, 300}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					a, b := randSlice(r, m*k), randSlice(r, k*n)
					lda, ldb := k, n
					if tA {
						lda = m
					}
					if tB {
						ldb = k
					}
					c0 := randSlice(r, m*n)
					got := append([]float32(nil), c0...)
					Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, -1, got, n)
					restore := useKernel(single)
					want := append([]float32(nil), c0...)
					Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, -1, want, n)
					restore()
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]),
							"procs=%d %d×%d×%d tA=%v tB=%v element %d", procs, m, n, k, tA, tB, i)
					}
					ref := refGemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, -1, c0, n)
					for i, v := range ref {
						require.InDelta(t, v, float64(got[i]), 1e-5*float64(k+1), "%d×%d×%d element %d", m, n, k, i)
					}
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}
