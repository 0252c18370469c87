package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestBInKernel: the micro-kernels reading B in place (the AVX-512 pair
// kernel's 32 columns, the AVX2 kernel's 16) store bit for bit what the
// kernel they stand in for stores from the same block packed, at depths
// that are and are not multiples of their 4-step unroll, alpha and beta 0,
// 1 and others, with no prefetch, the next columns' and rows ahead;
// within rounding of float64; nothing beside their tile written, and C
// never read when beta is 0 (NaN there does not show).
func TestBInKernel(t *testing.T) {
	ks := bInKernels()
	if len(ks) == 0 {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no kernel reading B in place (it needs AVX2)", kernel.name)
	}
	r := rand.New(rand.NewPCG(81, 82))
	for _, mk := range ks {
		mr, nr, w := mk.mr, mk.nr, mk.bInCols
		for _, kc := range []int{1, 2, 3, 4, 5, 8, 63, 64, 65, 197, 256} {
			ldb := w + 7
			for _, pf := range []int{0, w, 16 * ldb} {
				for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 1}, {-2, 0.25}} {
					alpha, beta := ab[0], ab[1]
					// B in place: a block of a wider matrix, so that
					// the columns beside it are there to be misread.
					b := randSlice(r, (kc+1)*ldb)
					off := ldb + 3
					bp := make([]float32, w*kc) // the same block packed
					for q := 0; q < kc; q++ {
						for j := 0; j < w; j++ {
							bp[(j/nr)*nr*kc+q*nr+j%nr] = b[off+q*ldb+j]
						}
					}
					ap := randSlice(r, mr*kc)
					ldc := w + 5
					c0 := randSlice(r, (mr+1)*ldc)
					if beta == 0 {
						for i := range c0 {
							if i%ldc < w && i < mr*ldc {
								c0[i] = float32(math.NaN())
							}
						}
					}
					want := append([]float32(nil), c0...)
					if w == 2*nr {
						mk.pair(kc, ap, bp, want, ldc, alpha, beta)
					} else {
						mk.fn(kc, ap, bp, want, ldc, alpha, beta)
					}
					got := append([]float32(nil), c0...)
					mk.bIn(kc, ap, b[off:], ldb, got, ldc, alpha, beta, pf)
					what := fmt.Sprintf("%d columns kc=%d pf=%d alpha=%v beta=%v", w, kc, pf, alpha, beta)
					for i := 0; i < len(got)/ldc; i++ {
						for j := 0; j < ldc; j++ {
							g := got[i*ldc+j]
							if i >= mr || j >= w {
								require.Equal(t, math.Float32bits(c0[i*ldc+j]), math.Float32bits(g), "%s: C[%d][%d] outside the tile was written", what, i, j)
								continue
							}
							require.Equal(t, math.Float32bits(want[i*ldc+j]), math.Float32bits(g), "%s: C[%d][%d] differs from the packed kernel's", what, i, j)
							var s float64
							for q := 0; q < kc; q++ {
								s += float64(ap[q*mr+i]) * float64(b[off+q*ldb+j])
							}
							s *= float64(alpha)
							if beta != 0 {
								s += float64(beta) * float64(c0[i*ldc+j])
							}
							require.InDelta(t, s, float64(g), 1e-5*float64(kc+1), "%s: C[%d][%d]", what, i, j)
						}
					}
				}
			}
		}
	}
}

// planesPacker packs B from images of c channel planes of l positions,
// B[ch, i·l+p] = x[(i·c+ch)·l+p] (a 1×1 convolution's input over the
// batch), element by element, and shows a block in place when its columns
// stay in one image (BViewer); views counts the blocks it showed (the
// product's goroutines call it concurrently).
type planesPacker struct {
	x     []float32
	c, l  int
	views atomic.Int64
}

func (pk *planesPacker) PackB(dst []float32, p0, kc, j0, nc int) {
	_, nr := KernelShape()
	clear(dst[:(nc+nr-1)/nr*nr*kc])
	for j := 0; j < nc; j++ {
		img, pos := (j0+j)/pk.l, (j0+j)%pk.l
		for q := 0; q < kc; q++ {
			dst[(j/nr)*nr*kc+q*nr+j%nr] = pk.x[(img*pk.c+p0+q)*pk.l+pos]
		}
	}
}

func (pk *planesPacker) ViewB(p0, kc, j0, n int) ([]float32, int, bool) {
	img, pos := j0/pk.l, j0%pk.l
	if pos+n > pk.l {
		return nil, 0, false
	}
	pk.views.Add(1)
	return pk.x[(img*pk.c+p0)*pk.l+pos:], pk.l, true
}

// TestPackedProductViewB: products whose BPacker shows B in place
// (BViewer) store bit for bit what they store with B packed, with each
// kernel that reads B in place: planes whose
// column pairs all stay in one image (64 positions) and planes where some
// cross (48, 50), row counts that are and are not whole strips, one and
// two k blocks, beta 0 and 1, C in column blocks, on one goroutine and
// split over two (the split's shared last blocks pack); within rounding of
// float64; and the view path is taken (the packer showed blocks).
func TestPackedProductViewB(t *testing.T) {
	ks := bInKernels()
	if len(ks) == 0 {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no kernel reading B in place (it needs AVX2)", kernel.name)
	}
	defer func(was bool) { viewBPays = was }(viewBPays)
	viewBPays = true // the path under test, whichever CPU runs it
	r := rand.New(rand.NewPCG(83, 84))
	for _, mkIn := range ks {
		packed := mkIn
		packed.bIn = nil
		for _, procs := range []int{1, 2} {
			prev := runtime.GOMAXPROCS(procs)
			for _, sh := range []struct{ m, k, l, imgs int }{{64, 256, 64, 9}, {13, 40, 48, 5}, {128, 300, 50, 6}, {6, 7, 64, 3}, {70, 512, 96, 4}} {
				for _, beta := range []float32{0, 1} {
					n := sh.imgs * sh.l
					a := randSlice(r, sh.m*sh.k)
					x := randSlice(r, sh.imgs*sh.k*sh.l)
					c0 := randSlice(r, sh.imgs*sh.m*sh.l)
					run := func(mk microKernel, pk *planesPacker) []float32 {
						c := append([]float32(nil), c0...)
						restore := useKernel(mk)
						defer restore()
						pp := PackedProduct{M: sh.m, N: n, K: sh.k, A: a, LDA: sh.k, BPacker: pk,
							C: c, LDC: sh.l, ColBlock: sh.l, ColStride: sh.m * sh.l, Beta: beta, NC: 256}
						pp.Run()
						return c
					}
					viewed := &planesPacker{x: x, c: sh.k, l: sh.l}
					got := run(mkIn, viewed)
					want := run(packed, &planesPacker{x: x, c: sh.k, l: sh.l})
					name := fmt.Sprintf("%s/%d procs=%d %+v beta=%v", mkIn.name, mkIn.bInCols, procs, sh, beta)
					require.Equal(t, want, got, "%s: B in place against packed", name)
					require.Positive(t, viewed.views.Load(), "%s: no block read in place", name)
					for img := 0; img < sh.imgs; img++ {
						for i := 0; i < sh.m; i++ {
							for p := 0; p < sh.l; p++ {
								s := float64(beta) * float64(c0[(img*sh.m+i)*sh.l+p])
								for q := 0; q < sh.k; q++ {
									s += float64(a[i*sh.k+q]) * float64(x[(img*sh.k+q)*sh.l+p])
								}
								require.InDelta(t, s, float64(got[(img*sh.m+i)*sh.l+p]), 1e-3*(1+math.Abs(s)), "%s: C[%d,%d,%d]", name, img, i, p)
							}
						}
					}
				}
			}
			runtime.GOMAXPROCS(prev)
		}
	}
}

// TestPackedProductViewBOff: where reading B in place does not pay
// (viewBPays false: the Xeon), a BViewer's blocks are packed, never
// shown, and C is the same bit for bit.
func TestPackedProductViewBOff(t *testing.T) {
	ks := bInKernels()
	if len(ks) == 0 {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no kernel reading B in place (it needs AVX2)", kernel.name)
	}
	defer func(was bool) { viewBPays = was }(viewBPays)
	r := rand.New(rand.NewPCG(85, 86))
	const m, k, l, imgs = 64, 256, 64, 9
	a := randSlice(r, m*k)
	x := randSlice(r, imgs*k*l)
	run := func(pays bool) ([]float32, int64) {
		viewBPays = pays
		restore := useKernel(ks[0])
		defer restore()
		pk := &planesPacker{x: x, c: k, l: l}
		c := make([]float32, imgs*m*l)
		pp := PackedProduct{M: m, N: imgs * l, K: k, A: a, LDA: k, BPacker: pk,
			C: c, LDC: l, ColBlock: l, ColStride: m * l, NC: 256}
		pp.Run()
		return c, pk.views.Load()
	}
	on, onViews := run(true)
	off, offViews := run(false)
	require.Positive(t, onViews, "viewBPays on: no block read in place")
	require.Zero(t, offViews, "viewBPays off: a block was read in place")
	require.Equal(t, on, off, "B packed against B in place")
}
