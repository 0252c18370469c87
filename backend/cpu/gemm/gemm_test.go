package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refGemm is a float64 reference for Sgemm.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for q := 0; q < k; q++ {
				var av, bv float32
				if transA {
					av = a[q*lda+i]
				} else {
					av = a[i*lda+q]
				}
				if transB {
					bv = b[j*ldb+q]
				} else {
					bv = b[q*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			s *= float64(alpha)
			if beta != 0 {
				s += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*n+j] = s
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

func checkCase(t *testing.T, r *rand.Rand, transA, transB bool, m, n, k int, alpha, beta float32, pad int) {
	t.Helper()
	lda := k + pad
	arows := m
	if transA {
		lda, arows = m+pad, k
	}
	ldb := n + pad
	brows := k
	if transB {
		ldb, brows = k+pad, n
	}
	ldc := n + pad
	a := randSlice(r, arows*lda)
	b := randSlice(r, brows*ldb)
	c := randSlice(r, m*ldc)
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	want := refGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	require.NoError(t, Check(transA, transB, m, n, k, a, lda, b, ldb, c, ldc))
	Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	tol := 1e-5 * float64(k+1)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			got := float64(c[i*ldc+j])
			if math.Abs(got-want[i*n+j]) > tol {
				t.Fatalf("tA=%v tB=%v m=%d n=%d k=%d alpha=%v beta=%v pad=%d: C[%d][%d]=%v want %v",
					transA, transB, m, n, k, alpha, beta, pad, i, j, got, want[i*n+j])
			}
		}
		// The padding past n must be untouched.
		for j := n; j < ldc && i < m-1; j++ {
			assert.False(t, beta != 0 && math.IsNaN(float64(c[i*ldc+j])))
		}
	}
}

func TestSgemmRandomShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := [][3]int{
		{1, 1, 1}, {1, 7, 3}, {7, 1, 3}, {1, 100, 50}, {100, 1, 50}, {3, 5, 0},
		{4, 4, 4}, {5, 9, 13}, {17, 33, 65}, {31, 1, 300}, {64, 64, 64},
		{67, 131, 257}, {130, 70, 300}, {257, 9, 513}, {9, 300, 20}, {200, 200, 3},
		{129, 2050, 5},
	}
	for _, sz := range sizes {
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
					pad := r.IntN(3)
					checkCase(t, r, tA, tB, sz[0], sz[1], sz[2], ab[0], ab[1], pad)
				}
			}
		}
	}
}

func TestSgemmNaNPropagates(t *testing.T) {
	// 0 * NaN is NaN: a zero in A must not skip a NaN in B.
	for _, sz := range []int{2, 40} {
		a := make([]float32, sz*sz)
		b := make([]float32, sz*sz)
		b[0] = float32(math.NaN())
		c := make([]float32, sz*sz)
		Sgemm(false, false, sz, sz, sz, 1, a, sz, b, sz, 0, c, sz)
		for i := 0; i < sz; i++ {
			assert.True(t, math.IsNaN(float64(c[i*sz])), "size %d row %d", sz, i)
			assert.Equal(t, float32(0), c[i*sz+1])
		}
	}
}

func TestSgemmBetaZeroIgnoresC(t *testing.T) {
	c := []float32{float32(math.NaN()), float32(math.Inf(1))}
	Sgemm(false, false, 1, 2, 1, 1, []float32{2}, 1, []float32{3, 4}, 2, 0, c, 2)
	assert.Equal(t, []float32{6, 8}, c)
}

func TestSgemmStrided(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const batch, m, n, k = 5, 6, 7, 8
	a := randSlice(r, batch*m*k)
	b := randSlice(r, k*n) // broadcast: stride 0
	c := make([]float32, batch*m*n)
	SgemmStrided(false, false, m, n, k, 1, a, k, m*k, b, n, 0, 0, c, n, m*n, batch)
	for bi := 0; bi < batch; bi++ {
		want := refGemm(false, false, m, n, k, 1, a[bi*m*k:], k, b, n, 0, nil, n)
		for i, w := range want {
			assert.InDelta(t, w, float64(c[bi*m*n+i]), 1e-4)
		}
	}
}

func TestCheck(t *testing.T) {
	assert.Error(t, Check(false, false, 2, 2, 2, make([]float32, 3), 2, make([]float32, 4), 2, make([]float32, 4), 2))
	assert.Error(t, Check(false, false, 2, 2, 2, make([]float32, 4), 1, make([]float32, 4), 2, make([]float32, 4), 2))
	assert.NoError(t, Check(true, true, 2, 3, 4, make([]float32, 8), 2, make([]float32, 12), 4, make([]float32, 6), 3))
}

func benchSgemm(b *testing.B, m, n, k int) {
	r := rand.New(rand.NewPCG(5, 6))
	x := randSlice(r, m*k)
	y := randSlice(r, k*n)
	z := make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Sgemm(false, false, m, n, k, 1, x, k, y, n, 0, z, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkSgemm1024(b *testing.B) { benchSgemm(b, 1024, 1024, 1024) }

func BenchmarkSgemm256(b *testing.B) { benchSgemm(b, 256, 256, 256) }
