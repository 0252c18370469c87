package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPackedProduct checks PackedProduct against the product summed in
// float64: plain operands and caller packers (which write the documented
// strip layouts from KernelShape), column blocks in C (a convolution's
// N×M×L output), beta 0 (C holds garbage) and 1, sizes that leave edge
// tiles, cross k blocks and split over goroutines, with both kernels.
func TestPackedProduct(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, mk := range []microKernel{goKernel2x4, kernel} {
		for _, tc := range []struct {
			m, n, k, block int
		}{
			{7, 9, 5, 0},
			{13, 50, 300, 0},
			{64, 300, 270, 20},
			{130, 96, 600, 16},
			{41, 1032, 77, 4},
			{41, 1030, 77, 0},
		} {
			for _, packA := range []bool{false, true} {
				for _, beta := range []float32{0, 1} {
					name := fmt.Sprintf("%s/%dx%dx%d/block%d/packA=%v/beta%v", mk.name, tc.m, tc.n, tc.k, tc.block, packA, beta)
					t.Run(name, func(t *testing.T) {
						saved := kernel
						kernel = mk
						defer func() { kernel = saved }()
						checkPackedProduct(t, rng, tc.m, tc.n, tc.k, tc.block, packA, beta)
					})
				}
			}
		}
	}
}

func checkPackedProduct(t *testing.T, rng *rand.Rand, m, n, k, block int, packA bool, beta float32) {
	a := make([]float32, m*k)
	b := make([]float32, k*n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	// C's element (i, j): plain row-major, or in column blocks laid out
	// like an (n/block, m, block) tensor.
	at := func(i, j int) int { return i*n + j }
	ldc, stride := n, 0
	if block > 0 {
		require.Zero(t, n%block)
		ldc, stride = block, m*block
		at = func(i, j int) int { return (j/block)*stride + i*block + j%block }
	}
	c := make([]float32, m*n)
	c0 := make([]float32, m*n)
	for i := range c {
		c0[i] = float32(rng.NormFloat64())
	}
	copy(c, c0)
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	mr, nr := KernelShape()
	pp := PackedProduct{M: m, N: n, K: k, C: c, LDC: ldc, ColBlock: block, ColStride: stride, Beta: beta}
	if packA {
		pp.PackA = func(dst []float32, i0, mc, p0, kc int) {
			for s := 0; s*mr < mc; s++ {
				strip := dst[s*mr*kc : (s+1)*mr*kc]
				rows := min(mr, mc-s*mr)
				PackRowsA(strip, 0, a[(i0+s*mr)*k+p0:], k, rows, kc)
			}
		}
		// B from its transpose, through PackTransposedB.
		bt := make([]float32, n*k)
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				bt[j*k+p] = b[p*n+j]
			}
		}
		pp.PackB = func(dst []float32, p0, kc, j0, nc int) {
			for s := 0; s*nr < nc; s++ {
				PackTransposedB(dst[s*nr*kc:(s+1)*nr*kc], bt[(j0+s*nr)*k+p0:], k, min(nr, nc-s*nr), kc)
			}
		}
	} else {
		pp.A, pp.LDA, pp.B, pp.LDB = a, k, b, n
	}
	pp.Run()
	bad := 0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var want float64
			for p := 0; p < k; p++ {
				want += float64(a[i*k+p]) * float64(b[p*n+j])
			}
			if beta == 1 {
				want += float64(c0[at(i, j)])
			}
			if got := float64(c[at(i, j)]); !(math.Abs(got-want) <= 1e-4*(1+math.Abs(want))) {
				if bad < 3 {
					t.Errorf("C[%d][%d] = %v, want %v", i, j, got, want)
				}
				bad++
			}
		}
	}
	require.Zero(t, bad, "%d of %d elements differ", bad, m*n)
}
