package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestPackedBlockPair: PackedBlock stores bit for bit the same C with and
// without the pair kernel (which it runs on pairs of B strips when the
// shared dimension is one k block), within rounding of a float64 product,
// for odd strip counts, depths not a multiple of the unroll and above kc,
// and beta 0 (C holds NaNs), 1 and 0.5.
func TestPackedBlockPair(t *testing.T) {
	if kernel.pair == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no pair kernel (it needs AVX-512F)", kernel.name)
	}
	single := kernel
	single.pair = nil
	mr, nr := kernel.mr, kernel.nr
	r := rand.New(rand.NewPCG(55, 56))
	for _, ms := range []int{1, 3} {
		for _, ns := range []int{1, 2, 3, 5} {
			for _, k := range []int{1, 7, 64, 65, 256, 300} {
				for _, beta := range []float32{0, 1, 0.5} {
					ap := randSlice(r, ms*mr*k)
					bp := randSlice(r, ns*nr*k)
					ldc := ns*nr + 5
					c0 := randSlice(r, ms*mr*ldc)
					if beta == 0 {
						for i := range c0 {
							if i%ldc < ns*nr {
								c0[i] = float32(math.NaN())
							}
						}
					}
					got := append([]float32(nil), c0...)
					PackedBlock(ms, ns, k, ap, bp, got, ldc, beta)
					restore := useKernel(single)
					want := append([]float32(nil), c0...)
					PackedBlock(ms, ns, k, ap, bp, want, ldc, beta)
					restore()
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]),
							"ms=%d ns=%d k=%d beta=%v element %d", ms, ns, k, beta, i)
					}
					for i := 0; i < ms*mr; i++ {
						for j := 0; j < ns*nr; j++ {
							s, js, jc := 0.0, j/nr, j%nr
							is, ic := i/mr, i%mr
							for p := 0; p < k; p++ {
								s += float64(ap[is*mr*k+p*mr+ic]) * float64(bp[js*nr*k+p*nr+jc])
							}
							if beta != 0 {
								s += float64(beta) * float64(c0[i*ldc+j])
							}
							require.InDelta(t, s, float64(got[i*ldc+j]), 1e-5*float64(k+1), "ms=%d ns=%d k=%d C[%d][%d]", ms, ns, k, i, j)
						}
						for j := ns * nr; j < ldc; j++ {
							require.Equal(t, math.Float32bits(c0[i*ldc+j]), math.Float32bits(got[i*ldc+j]), "C[%d][%d] beside the block was written", i, j)
						}
					}
				}
			}
		}
	}
}
