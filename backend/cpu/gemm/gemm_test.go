package gemm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
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
		{1, 197, 64}, {1, 64, 197}, {1, 777, 768}, // single rows on the kernels
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

// useKernel makes Sgemm use mk until the returned function restores the
// previous kernel. Tests using it must not run in parallel.
func useKernel(mk microKernel) (restore func()) {
	old := kernel
	kernel = mk
	return func() { kernel = old }
}

// TestSgemmGoKernel runs the correctness tests on the portable kernel,
// which amd64 machines with AVX2 never select on their own.
func TestSgemmGoKernel(t *testing.T) {
	defer useKernel(goKernel2x4)()
	t.Run("RandomShapes", TestSgemmRandomShapes)
	t.Run("NaN", TestSgemmNaNPropagates)
	t.Run("Large", TestSgemmLarge)
}

// TestSgemmLarge covers the parallel cuts (rows, columns, shared
// dimension), several k blocks and edge tiles on every side.
func TestSgemmLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sizes := [][3]int{
		{500, 130, 200}, // rows
		{60, 700, 200},  // columns
		{70, 50, 1100},  // shared dimension
		{131, 67, 1500}, // shared dimension, uneven
	}
	for _, sz := range sizes {
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, ab := range [][2]float32{{1, 0}, {-0.5, 0.75}} {
					checkCase(t, r, tA, tB, sz[0], sz[1], sz[2], ab[0], ab[1], r.IntN(3))
				}
			}
		}
	}
}

// TestSgemmSmallBlocks shrinks the cache blocks of the active kernel so
// that modest shapes run many mc, kc and nc blocks (and the first-block
// beta logic) through the packing code.
func TestSgemmSmallBlocks(t *testing.T) {
	for _, base := range []microKernel{kernel, goKernel2x4} {
		mk := base
		mk.mc, mk.kc, mk.nc = 2*mk.mr, 7, 3*mk.nr
		t.Run(mk.name, func(t *testing.T) {
			defer useKernel(mk)()
			r := rand.New(rand.NewPCG(9, 10))
			for _, sz := range [][3]int{{37, 101, 45}, {100, 35, 30}, {13, 200, 64}} {
				for _, tA := range []bool{false, true} {
					for _, tB := range []bool{false, true} {
						checkCase(t, r, tA, tB, sz[0], sz[1], sz[2], 1.5, 0, r.IntN(3))
						checkCase(t, r, tA, tB, sz[0], sz[1], sz[2], -1, 0.5, r.IntN(3))
					}
				}
			}
		})
	}
}

// TestMicroKernels checks each available micro-kernel on its own against a
// float64 reference for depths around its unrolling, including beta 0
// over NaNs (never read) and NaN inputs (propagated).
func TestMicroKernels(t *testing.T) {
	kernels := []microKernel{goKernel2x4}
	if kernel.name != goKernel2x4.name {
		kernels = append(kernels, kernel)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, mk := range kernels {
		for kc := 1; kc <= 35; kc++ {
			for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
				alpha, beta := ab[0], ab[1]
				ap := randSlice(r, mk.mr*kc)
				bp := randSlice(r, mk.nr*kc)
				ldc := mk.nr + 3
				c := randSlice(r, mk.mr*ldc)
				if beta == 0 {
					for i := range c {
						c[i] = float32(math.NaN())
					}
				}
				want := make([]float64, mk.mr*mk.nr)
				for i := 0; i < mk.mr; i++ {
					for j := 0; j < mk.nr; j++ {
						var s float64
						for p := 0; p < kc; p++ {
							s += float64(ap[p*mk.mr+i]) * float64(bp[p*mk.nr+j])
						}
						s *= float64(alpha)
						if beta != 0 {
							s += float64(beta) * float64(c[i*ldc+j])
						}
						want[i*mk.nr+j] = s
					}
				}
				pad := c[mk.nr] // a column outside the tile
				mk.fn(kc, ap, bp, c, ldc, alpha, beta)
				for i := 0; i < mk.mr; i++ {
					for j := 0; j < mk.nr; j++ {
						require.InDelta(t, want[i*mk.nr+j], float64(c[i*ldc+j]), 1e-5*float64(kc+1),
							"%s kc=%d alpha=%v beta=%v C[%d][%d]", mk.name, kc, alpha, beta, i, j)
					}
				}
				if beta != 0 {
					require.Equal(t, pad, c[mk.nr], "%s wrote outside its tile", mk.name)
				}
			}
		}
		// A NaN in B reaches every row even where A is zero.
		ap := make([]float32, mk.mr*3)
		bp := make([]float32, mk.nr*3)
		bp[mk.nr+1] = float32(math.NaN())
		c := make([]float32, mk.mr*mk.nr)
		mk.fn(3, ap, bp, c, mk.nr, 1, 0)
		for i := 0; i < mk.mr; i++ {
			assert.True(t, math.IsNaN(float64(c[i*mk.nr+1])), "%s row %d", mk.name, i)
			assert.Equal(t, float32(0), c[i*mk.nr])
		}
	}
}

// TestHalfKernel: a kernel's half variant stores exactly the left nr/2
// columns of the full kernel's tile (bit for bit, so edge strips agree with
// full ones), within rounding of a float64 reference, leaves the right half
// untouched, and never reads C when beta is 0.
func TestHalfKernel(t *testing.T) {
	mk := kernel
	if mk.half == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no half kernel (the AVX2 kernels have one)", mk.name)
	}
	r := rand.New(rand.NewPCG(31, 32))
	half := mk.nr / 2
	for kc := 1; kc <= 19; kc++ {
		for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
			alpha, beta := ab[0], ab[1]
			ap := randSlice(r, mk.mr*kc)
			bp := randSlice(r, mk.nr*kc)
			ldc := mk.nr + 3
			full := randSlice(r, mk.mr*ldc)
			if beta == 0 {
				for i := range full {
					full[i] = float32(math.NaN())
				}
			}
			got := append([]float32(nil), full...)
			mk.fn(kc, ap, bp, full, ldc, alpha, beta)
			before := append([]float32(nil), got...)
			mk.half(kc, ap, bp, got, ldc, alpha, beta)
			for i := 0; i < mk.mr; i++ {
				for j := 0; j < ldc; j++ {
					g := got[i*ldc+j]
					if j >= half {
						require.Equal(t, math.Float32bits(before[i*ldc+j]), math.Float32bits(g),
							"kc=%d: C[%d][%d] outside the half tile was written", kc, i, j)
						continue
					}
					require.Equal(t, math.Float32bits(full[i*ldc+j]), math.Float32bits(g),
						"kc=%d alpha=%v beta=%v: C[%d][%d] differs from the full kernel", kc, alpha, beta, i, j)
					var s float64
					for p := 0; p < kc; p++ {
						s += float64(ap[p*mk.mr+i]) * float64(bp[p*mk.nr+j])
					}
					s *= float64(alpha)
					if beta != 0 {
						s += float64(beta) * float64(before[i*ldc+j])
					}
					require.InDelta(t, s, float64(g), 1e-5*float64(kc+1), "kc=%d C[%d][%d]", kc, i, j)
				}
			}
		}
	}
}

// TestRowAKernels: the kernels that read A in place store bit for bit what
// their packed-A counterparts store from the same rows, for both beta
// cases, and touch nothing outside their tile.
func TestRowAKernels(t *testing.T) {
	mk := kernel
	if mk.rowA == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no in-place A kernels (the AVX2 kernels have them)", mk.name)
	}
	r := rand.New(rand.NewPCG(35, 36))
	for kc := 1; kc <= 37; kc++ {
		lda := kc + 3
		a := randSlice(r, mk.mr*lda)
		ap := make([]float32, mk.mr*kc)
		for i := 0; i < mk.mr; i++ {
			for p := 0; p < kc; p++ {
				ap[p*mk.mr+i] = a[i*lda+p]
			}
		}
		bp := randSlice(r, mk.nr*kc)
		for _, ab := range [][2]float32{{1, 0}, {-0.5, 1.5}} {
			ldc := mk.nr + 5
			c0 := randSlice(r, mk.mr*ldc)
			for _, pair := range []struct {
				name     string
				packed   func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
				unpacked func(kc int, a []float32, lda int, bp, c []float32, ldc int, alpha, beta float32)
			}{{"full", mk.fn, mk.rowA}, {"half", mk.half, mk.halfRowA}} {
				want := append([]float32(nil), c0...)
				got := append([]float32(nil), c0...)
				pair.packed(kc, ap, bp, want, ldc, ab[0], ab[1])
				pair.unpacked(kc, a, lda, bp, got, ldc, ab[0], ab[1])
				changed := false
				for i := range want {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]),
						"%s kc=%d alpha=%v beta=%v element %d", pair.name, kc, ab[0], ab[1], i)
					changed = changed || got[i] != c0[i]
				}
				require.True(t, changed, "%s kc=%d stored nothing", pair.name, kc)
			}
		}
	}
}

// TestSgemmNarrowEdges: products whose last column strip is 1..nr-1 wide
// (the half kernel's and the full edge tile's cases) against a float64
// reference, in every orientation, on one goroutine and split.
func TestSgemmNarrowEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		for _, n := range []int{17, 18, 20, 23, 24, 25, 31, 33, 65} {
			for _, sz := range [][2]int{{65, 32}, {13, 7}, {130, 129}} {
				for _, tA := range []bool{false, true} {
					for _, tB := range []bool{false, true} {
						checkCase(t, r, tA, tB, sz[0], n, sz[1], 1, 0, 0)
						checkCase(t, r, tA, tB, sz[0], n, sz[1], 0.5, -1, 1)
					}
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}

// TestKernelSelection checks that amd64 machines with AVX2 and FMA use the
// assembly kernel.
func TestKernelSelection(t *testing.T) {
	t.Logf("micro-kernel: %s (%d×%d, mc=%d kc=%d nc=%d)", kernel.name, kernel.mr, kernel.nr, kernel.mc, kernel.kc, kernel.nc)
	if wantAsmKernel() {
		assert.NotEqual(t, goKernel2x4.name, kernel.name)
	} else {
		assert.Equal(t, goKernel2x4.name, kernel.name)
	}
}

// TestSgemmNoAllocations: on one goroutine (AllocsPerRun sets GOMAXPROCS
// to 1) Sgemm allocates nothing once its pools are warm, so training steps
// that run many products stay allocation-free.
func TestSgemmNoAllocations(t *testing.T) {
	if raceEnabled {
		testutil.Skip(t, "sync.Pool drops items under the race detector")
	}
	r := rand.New(rand.NewPCG(15, 16))
	for _, sz := range [][3]int{{3, 3, 3}, {8, 512, 784}, {100, 37, 300}, {784, 512, 8}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		for _, tB := range []bool{false, true} {
			ldb := n
			if tB {
				ldb = k
			}
			run := func() { Sgemm(false, tB, m, n, k, 1, a, k, b, ldb, 0, c, n) }
			run()
			assert.Zero(t, testing.AllocsPerRun(20, run), "%d×%d×%d transB=%v", m, n, k, tB)
		}
	}
}

// TestSgemmEpilogue: SgemmEpilogue gives bit for bit what Sgemm followed by
// a bias pass and a Relu pass gives, on shapes that take the direct path,
// the blocked path, and the row, column and shared-dimension splits over
// goroutines, with both operands in either orientation.
func TestSgemmEpilogue(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	rng := rand.New(rand.NewPCG(21, 22))
	fill := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	for _, sh := range [][3]int{{5, 7, 3}, {1, 9, 4}, {37, 50, 20}, {128, 512, 784}, {784, 512, 128}, {64, 48, 4096}, {300, 20, 64}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			ta, tb := tr[0], tr[1]
			a, b, bias := fill(m*k), fill(k*n), fill(n)
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			for _, relu := range []bool{false, true} {
				want := fill(m * n) // garbage: beta 0 must not read it
				Sgemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0, want, n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						v := want[i*n+j] + bias[j]
						if relu && v < 0 {
							v = 0
						}
						want[i*n+j] = v
					}
				}
				got := fill(m * n)
				SgemmEpilogue(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0, got, n, Epilogue{Bias: bias, Relu: relu})
				require.Equal(t, want, got, "m=%d n=%d k=%d transA=%v transB=%v relu=%v", m, n, k, ta, tb, relu)
			}
		}
	}
	// Relu alone, without a bias.
	a, b := fill(6*5), fill(5*4)
	want, got := make([]float32, 24), make([]float32, 24)
	Sgemm(false, false, 6, 4, 5, 1, a, 5, b, 4, 0, want, 4)
	for i, v := range want {
		if v < 0 {
			want[i] = 0
		}
	}
	SgemmEpilogue(false, false, 6, 4, 5, 1, a, 5, b, 4, 0, got, 4, Epilogue{Relu: true})
	assert.Equal(t, want, got)
	// With beta: C = relu(A·B + 0.5·C), on a blocked shape.
	m, n, k := 130, 70, 300
	a, b = fill(m*k), fill(k*n)
	c0 := fill(m * n)
	want, got = append([]float32{}, c0...), append([]float32{}, c0...)
	Sgemm(false, false, m, n, k, 1, a, k, b, n, 0.5, want, n)
	for i, v := range want {
		if v < 0 {
			want[i] = 0
		}
	}
	SgemmEpilogue(false, false, m, n, k, 1, a, k, b, n, 0.5, got, n, Epilogue{Relu: true})
	assert.Equal(t, want, got)
}

// TestEpilogueRows: the active row epilogue (assembly where available)
// against the plain definition, bit for bit, on widths around the vector
// length, with NaN, infinities and signed zeros in C and the bias, and
// leaving the row padding alone.
func TestEpilogueRows(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	special := []float32{nan, inf, -inf, 0, negZero, -1e-30, 1e-30, -3, 3}
	for n := 1; n <= 35; n++ {
		for _, hasBias := range []bool{false, true} {
			for _, relu := range []bool{false, true} {
				rows, ldc := 3, n+5
				c := randSlice(r, rows*ldc)
				var bias []float32
				if hasBias {
					bias = randSlice(r, n)
					bias[r.IntN(n)] = special[r.IntN(len(special))]
				}
				for i := range c {
					if r.IntN(4) == 0 {
						c[i] = special[r.IntN(len(special))]
					}
				}
				want := append([]float32(nil), c...)
				for i := 0; i < rows; i++ {
					for j := 0; j < n; j++ {
						v := want[i*ldc+j]
						if hasBias {
							v += bias[j]
						}
						if relu && v < 0 {
							v = 0
						}
						want[i*ldc+j] = v
					}
				}
				epilogueRowsFn(c, ldc, rows, n, bias, relu)
				for i := range c {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(c[i]),
						"n=%d bias=%v relu=%v element %d: %v want %v", n, hasBias, relu, i, c[i], want[i])
				}
			}
		}
	}
}

// TestSgemmSplitNoAllocations: products split over two workers by rows or
// by columns (kern's persistent pool, pooled task state), with and without
// an epilogue, allocate nothing once warm, so a training step's fan-outs
// stay allocation-free.
func TestSgemmSplitNoAllocations(t *testing.T) {
	if raceEnabled {
		testutil.Skip(t, "pools drop items under the race detector")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	// No collection while the windows run: a cycle empties the pools, and
	// their refill counted as the product's allocation (one in the last
	// window, in one of six fresh-clone CI runs, 7 December).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := rand.New(rand.NewPCG(43, 44))
	// 128×512×784 splits the columns, 2048×64×128 the rows.
	for _, sz := range [][3]int{{128, 512, 784}, {2048, 64, 128}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		bias := randSlice(r, n)
		run := func() {
			Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
			SgemmEpilogue(false, false, m, n, k, 1, a, k, b, n, 0, c, n, Epilogue{Bias: bias, Relu: true})
		}
		// Pooled packing buffers left small by earlier tests surface in
		// any order and grow once each, so a few windows of ten runs
		// are allowed to warm them; a product that allocates every time
		// fails them all.
		var mallocs uint64
		for window := 0; window < 5; window++ {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < 10; i++ {
				run()
			}
			runtime.ReadMemStats(&after)
			if mallocs = after.Mallocs - before.Mallocs; mallocs == 0 {
				break
			}
		}
		assert.Zero(t, mallocs, "%d×%d×%d: allocations in 10 split products", m, n, k)
	}
}
