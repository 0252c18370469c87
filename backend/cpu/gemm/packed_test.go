package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPackedProduct checks PackedProduct against the product summed in
// float64: plain operands and caller packers (which write the documented
// strip layouts from KernelShape), column blocks in C (a convolution's
// N×M×L output), beta 0 (C holds garbage), 1 and 0.5, sizes that leave edge
// tiles, cross k blocks and split over goroutines (by columns, rows or the
// shared dimension), with both kernels.
func TestPackedProduct(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		// The splits over goroutines need two of them.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
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
			// Column blocks of 48: a pair kernel runs two strips
			// in place where both stay in one block, and through
			// the scratch tile where they cross into the next.
			{50, 192, 300, 48},
			// At most rowACols columns: a plain A is read in place,
			// full strips through the kernel's rowA, tiles crossing
			// column blocks of 12 and a last 2-row strip packed.
			{20, 72, 200, 12},
			// Filter-gradient shapes (small M×N, long K): split over
			// the shared dimension, into plain C and, through the
			// plain detour, into column blocks of 8.
			{24, 40, 1100, 0},
			{24, 40, 1100, 8},
		} {
			for _, packA := range []bool{false, true} {
				for _, beta := range []float32{0, 1, 0.5} {
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
	pp := PackedProduct{M: m, N: n, K: k, C: c, LDC: ldc, ColBlock: block, ColStride: stride, Beta: beta}
	if packA {
		pp.APacker = &rowsPacker{a: a, k: k}
		// B from its transpose, through PackTransposedB.
		bt := make([]float32, n*k)
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				bt[j*k+p] = b[p*n+j]
			}
		}
		pp.BPacker = &transposedPacker{bt: bt, k: k}
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
			if beta != 0 {
				want += float64(beta) * float64(c0[at(i, j)])
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

// TestGatherRows checks GatherRows (assembly for runs of 16 and 8 where
// available) against copying each run by index, for unaligned offsets
// in any order and destination strides above the width, and that a run
// past either buffer panics instead of reading or writing out of range.
func TestGatherRows(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	src := randSlice(r, 500)
	for _, width := range []int{16, 8, 5, 1} {
		for _, n := range []int{1, 2, 7, 33} {
			ldd := width + r.IntN(4)
			base := r.IntN(20)
			offs := make([]int, n)
			for q := range offs {
				offs[q] = r.IntN(len(src) - base - width + 1)
			}
			got := make([]float32, (n-1)*ldd+width+3)
			for i := range got {
				got[i] = -1
			}
			want := append([]float32(nil), got...)
			for q, off := range offs {
				for j := 0; j < width; j++ {
					want[q*ldd+j] = src[base+off+j]
				}
			}
			GatherRows(got, ldd, src, base, offs, width)
			require.Equal(t, want, got, "width %d n %d ldd %d", width, n, ldd)
		}
	}
	dst := make([]float32, 64)
	require.Panics(t, func() { GatherRows(dst, 16, src, 0, []int{0, len(src) - 15}, 16) }, "source overrun")
	require.Panics(t, func() { GatherRows(dst, 16, src, 0, []int{0, 1, 2, 3, 4}, 16) }, "destination overrun")
	require.Panics(t, func() { GatherRows(dst, 16, src, 3, []int{0, -4}, 8) }, "negative offset")
	require.Panics(t, func() { GatherRows(dst, 16, src, 0, []int{0, 3, len(src) - 7}, 8) }, "source overrun on a later run")
	require.Panics(t, func() { GatherRows(dst, 16, src, len(src)-4, []int{0}, 8) }, "base past the end")
	require.NotPanics(t, func() { GatherRows(dst, 16, src, 0, nil, 16) })
}

// TestGatherTransposed checks GatherTransposed (assembly where available)
// against writing each element by index, for unaligned offsets in any
// order, and that offsets whose runs leave src panic before writing.
func TestGatherTransposed(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	src := randSlice(r, 700)
	for _, n := range []int{8, 16, 32, 48} {
		base := r.IntN(30)
		offs := make([]int, 16)
		for j := range offs {
			offs[j] = r.IntN(len(src) - base - n + 1)
		}
		got := make([]float32, 16*n+5)
		for i := range got {
			got[i] = -1
		}
		want := append([]float32(nil), got...)
		for p := 0; p < n; p++ {
			for j, off := range offs {
				want[p*16+j] = src[base+off+p]
			}
		}
		GatherTransposed(got, src, base, offs, n)
		require.Equal(t, want, got, "n %d", n)
	}
	dst := make([]float32, 16*16)
	bad := make([]int, 16)
	bad[9] = len(src) - 15
	require.Panics(t, func() { GatherTransposed(dst, src, 0, bad, 16) }, "run past src")
	bad[9] = -1
	require.Panics(t, func() { GatherTransposed(dst, src, 0, bad, 16) }, "negative offset")
	require.Panics(t, func() { GatherTransposed(dst, src, 0, make([]int, 16), 12) }, "n not a multiple of 8")
	require.Panics(t, func() { GatherTransposed(dst[:100], src, 0, make([]int, 16), 8) }, "dst too short")
	require.Panics(t, func() { GatherTransposed(dst, src, 0, make([]int, 15), 8) }, "not 16 offsets")
}

// TestPackPanelB checks PackPanelB (assembly where available) against
// the B strip layout written element by element, for depths that are and
// are not multiples of the assembly's 4 rows, and that it leaves what
// follows the strips alone.
func TestPackPanelB(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	_, nr := KernelShape()
	for _, tc := range []struct{ kc, strips, ld int }{{1, 1, 40}, {7, 3, 53}, {64, 2, 49}, {256, 4, 200}} {
		src := randSlice(r, (tc.kc-1)*tc.ld+tc.strips*nr)
		got := make([]float32, tc.strips*nr*tc.kc+3)
		for i := range got {
			got[i] = -1
		}
		want := append([]float32(nil), got...)
		for s := 0; s < tc.strips; s++ {
			for q := 0; q < tc.kc; q++ {
				for j := 0; j < nr; j++ {
					want[s*nr*tc.kc+q*nr+j] = src[q*tc.ld+s*nr+j]
				}
			}
		}
		PackPanelB(got, src, tc.ld, tc.kc, tc.strips)
		require.Equal(t, want, got, "kc %d strips %d", tc.kc, tc.strips)
	}
}

// TestPackedProductPairsAcrossBlocks: a product into column blocks whose
// strip pairs cross from one block to the next (a 1×1 convolution's
// images of 49 and 196 positions), which the pair kernel computes into
// its scratch tile, stores bit for bit what the same product stores into
// plain C (every pair in place), rearranged into the blocks: beta 0 and
// 1, a last partial row strip, one and two k blocks, on one goroutine and
// on two.
func TestPackedProductPairsAcrossBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(87, 88))
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		for _, sh := range []struct{ m, k, l, imgs int }{{64, 256, 49, 8}, {40, 300, 196, 3}, {13, 70, 49, 5}} {
			for _, beta := range []float32{0, 1} {
				n := sh.imgs * sh.l
				a := randSlice(r, sh.m*sh.k)
				x := randSlice(r, sh.imgs*sh.k*sh.l)
				// B as one matrix: B[q, img·l+p] = x[(img·k+q)·l+p].
				b := make([]float32, sh.k*n)
				for img := 0; img < sh.imgs; img++ {
					for q := 0; q < sh.k; q++ {
						copy(b[q*n+img*sh.l:], x[(img*sh.k+q)*sh.l:(img*sh.k+q+1)*sh.l])
					}
				}
				blocked := randSlice(r, sh.imgs*sh.m*sh.l)
				plain := make([]float32, sh.m*n)
				for img := 0; img < sh.imgs; img++ {
					for i := 0; i < sh.m; i++ {
						copy(plain[i*n+img*sh.l:], blocked[(img*sh.m+i)*sh.l:(img*sh.m+i+1)*sh.l])
					}
				}
				c0 := append([]float32(nil), blocked...)
				pb := PackedProduct{M: sh.m, N: n, K: sh.k, A: a, LDA: sh.k, BPacker: &planesPacker{x: x, c: sh.k, l: sh.l},
					C: blocked, LDC: sh.l, ColBlock: sh.l, ColStride: sh.m * sh.l, Beta: beta, NC: 256}
				pb.Run()
				pp := PackedProduct{M: sh.m, N: n, K: sh.k, A: a, LDA: sh.k, B: b, LDB: n, C: plain, LDC: n, Beta: beta, NC: 256}
				pp.Run()
				name := fmt.Sprintf("procs=%d %+v beta=%v", procs, sh, beta)
				for img := 0; img < sh.imgs; img++ {
					for i := 0; i < sh.m; i++ {
						for p := 0; p < sh.l; p++ {
							got, want := blocked[(img*sh.m+i)*sh.l+p], plain[i*n+img*sh.l+p]
							if math.Float32bits(got) != math.Float32bits(want) {
								s := float64(beta) * float64(c0[(img*sh.m+i)*sh.l+p])
								for q := 0; q < sh.k; q++ {
									s += float64(a[i*sh.k+q]) * float64(x[(img*sh.k+q)*sh.l+p])
								}
								t.Fatalf("%s: C[%d,%d,%d] = %v in blocks, %v in plain C (float64 %v)", name, img, i, p, got, want, s)
							}
						}
					}
				}
			}
		}
		runtime.GOMAXPROCS(prev)
	}
}
