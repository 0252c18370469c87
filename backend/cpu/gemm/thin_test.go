package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// TestThinMatchesBlocked checks that the thin path (products of 1 to mr-1
// rows, B transposed) stores the bits blocked stores, with A either way,
// k within one block and across several, a last group of fewer than six
// of B's rows, every kind of beta, leading dimensions wider than the
// matrices, SgemmRowC's row of C and an epilogue; that it ran where the
// kernel has its kernels; and that B as stored k×n is left to blocked
// (the same comparison, on the same path).
func TestThinMatchesBlocked(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct{ m, n, k int }{{2, 64, 1}, {2, 1200, 1}, {4, 197, 64}, {5, 300, 300}, {3, 777, 768}, {4, 768, 3072}, {2, 95, 513}, {1, 197, 64}, {1, 3072, 768}, {1, 65, 40}} {
		for _, transA := range []bool{false, true} {
			for _, transB := range []bool{false, true} {
				for _, beta := range []float32{0, 1, 0.5} {
					name := fmt.Sprintf("%dx%dx%d_tA%v_tB%v_beta%v", tc.m, tc.n, tc.k, transA, transB, beta)
					t.Run(name, func(t *testing.T) { thinCase(t, r, tc.m, tc.n, tc.k, transA, transB, beta) })
				}
			}
		}
	}
}

func thinCase(t *testing.T, r *rand.Rand, m, n, k int, transA, transB bool, beta float32) {
	const pad = 3
	lda, ldb, ldc := k+pad, n+pad, n+pad
	if transA {
		lda = m + pad
	}
	if transB {
		ldb = k + pad
	}
	aRows, bRows := m, k
	if transA {
		aRows = k
	}
	if transB {
		bRows = n
	}
	a, b := randSlice(r, aRows*lda), randSlice(r, bRows*ldb)
	c0 := randSlice(r, m*ldc)
	row, bias := randSlice(r, n), randSlice(r, n)
	const alpha = 0.75
	run := func(thin bool) (plain, rowC, ep []float32) {
		defer func(was bool) { thinPath = was }(thinPath)
		thinPath = thin
		plain, rowC, ep = append([]float32(nil), c0...), append([]float32(nil), c0...), append([]float32(nil), c0...)
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, plain, ldc)
		SgemmRowC(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, row, rowC, ldc, Epilogue{})
		SgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, ep, ldc, Epilogue{Bias: bias, Relu: true})
		return plain, rowC, ep
	}
	wants := [3][]float32{}
	wants[0], wants[1], wants[2] = run(false)
	var calls atomic.Int32
	thinHook = func() { calls.Add(1) }
	defer func() { thinHook = nil }()
	gots := [3][]float32{}
	gots[0], gots[1], gots[2] = run(true)
	for v, what := range []string{"Sgemm", "SgemmRowC", "SgemmEpilogue"} {
		for i, w := range wants[v] {
			if g := gots[v][i]; math.Float32bits(g) != math.Float32bits(w) {
				t.Fatalf("%s: C[%d][%d] = %v on the thin path, %v on blocked", what, i/ldc, i%ldc, g, w)
			}
		}
	}
	switch {
	case transB && hasThinKernels(kernel) && !DirectLoops(m, n, k) && calls.Load() < 3:
		t.Fatalf("the thin path ran %d times for the three products, want 3 or more", calls.Load())
	case !transB && calls.Load() > 0:
		t.Fatalf("the thin path ran %d times with B stored k×n", calls.Load())
	}
}

// BenchmarkThin times the thin path against blocked (thin=false) on ViT-B/16's
// class-token products (4 rows against a weight stored n×k), with the
// weight in cache (hot: one weight) and from memory (cold: a different one
// of enough copies to outgrow the caches each call); GB/s counts the
// weight's bytes.
func BenchmarkThin(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct{ m, n, k int }{{4, 3072, 768}, {4, 768, 3072}} {
		a := randSlice(r, s.m*s.k)
		c := make([]float32, s.m*s.n)
		const cold = 80 // × 9.4 MB: past this host's 480 MiB L3
		var ws [][]float32
		for _, copies := range []int{1, cold} {
			for _, thin := range []bool{false, true} {
				name := fmt.Sprintf("%dx%dx%d/hot/thin=%v", s.m, s.n, s.k, thin)
				if copies > 1 {
					name = fmt.Sprintf("%dx%dx%d/cold/thin=%v", s.m, s.n, s.k, thin)
				}
				b.Run(name, func(b *testing.B) {
					for len(ws) < copies { // made when a case first needs them
						ws = append(ws, randSlice(r, s.n*s.k))
					}
					defer func(was bool) { thinPath = was }(thinPath)
					thinPath = thin
					i := 0
					for b.Loop() {
						Sgemm(false, true, s.m, s.n, s.k, 1, a, s.k, ws[i%copies], s.k, 0, c, s.n)
						i++
					}
					b.ReportMetric(float64(4*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkOneRow times single-row products on the direct loops (what
// every one-row product ran before 7 December) against the path Sgemm
// takes now (the thin path for B stored n×k, blocked for k×n): a sample
// through a dense layer (1×3072×768, 1×768×3072, weight in cache) and
// ViT-B/16's class token against one head's keys and values (1×197×64,
// 1×64×197).
func BenchmarkOneRow(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct {
		n, k   int
		transB bool
	}{{3072, 768, true}, {768, 3072, true}, {3072, 768, false}, {197, 64, true}, {64, 197, false}} {
		a, w, c := randSlice(r, s.k), randSlice(r, s.k*s.n), make([]float32, s.n)
		ldb := s.n
		if s.transB {
			ldb = s.k
		}
		for _, direct := range []bool{true, false} {
			b.Run(fmt.Sprintf("1x%dx%d_tB%v/direct=%v", s.n, s.k, s.transB, direct), func(b *testing.B) {
				for b.Loop() {
					if direct {
						clear(c)
						p := problem{transB: s.transB, m: 1, n: s.n, k: s.k, alpha: 1, a: a, lda: s.k, b: w, ldb: ldb, c: c, ldc: s.n}
						p.direct(0, 1, 0, s.n)
						continue
					}
					Sgemm(false, s.transB, 1, s.n, s.k, 1, a, s.k, w, ldb, 0, c, s.n)
				}
				b.ReportMetric(2*float64(s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
