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

// alignedNaNs returns n NaNs starting on a 64-byte boundary.
func alignedNaNs(n int) []float32 {
	s := grow(nil, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

// TestStreamKernels: the non-temporal kernels (the AVX-512 pair kernel's
// and the AVX2 6×16 kernel's) store bit for bit what the cached kernels
// store with beta 0, never read C (it holds NaNs), stay within rounding of
// a float64 product, and write nothing outside their tile, for depths
// that are and are not multiples of the 8-step unroll and several alphas.
func TestStreamKernels(t *testing.T) {
	mk := kernel
	if mk.fnNT == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no non-temporal variant (it needs AVX2)", mk.name)
	}
	type variant struct {
		name  string
		width int
		nt    func(kc int, ap, bp, c []float32, ldc int, alpha float32)
		ref   func(kc int, ap, bp, c []float32, ldc int, alpha, beta float32)
	}
	variants := []variant{{"6x16", mk.nr, mk.fnNT, mk.fn}}
	if mk.pairNT != nil {
		variants = append(variants, variant{"6x32pair", 2 * mk.nr, mk.pairNT, mk.pair})
	}
	mr, nr := mk.mr, mk.nr
	r := rand.New(rand.NewPCG(51, 52))
	for _, v := range variants {
		for _, kc := range []int{1, 2, 7, 8, 9, 16, 37, 63, 64, 65, 200, 256} {
			for _, alpha := range []float32{1, 0.5, -2} {
				ap := randSlice(r, mr*kc)
				bp := randSlice(r, v.width*kc)
				ldc := v.width + 16 // rows stay 64-byte aligned; 16 columns beside the tile
				got := alignedNaNs(mr * ldc)
				for i := range got {
					if i%ldc >= v.width {
						got[i] = float32(i) // sentinels outside the tile
					}
				}
				want := append([]float32(nil), got...)
				v.ref(kc, ap, bp, want, ldc, alpha, 0)
				v.nt(kc, ap, bp, got, ldc, alpha)
				storeFence()
				for i := 0; i < mr; i++ {
					for j := 0; j < ldc; j++ {
						g := got[i*ldc+j]
						require.Equal(t, math.Float32bits(want[i*ldc+j]), math.Float32bits(g),
							"%s kc=%d alpha=%v: C[%d][%d]", v.name, kc, alpha, i, j)
						if j >= v.width {
							continue
						}
						strip, col := j/nr, j%nr
						var s float64
						for p := 0; p < kc; p++ {
							s += float64(ap[p*mr+i]) * float64(bp[strip*nr*kc+p*nr+col])
						}
						require.InDelta(t, float64(alpha)*s, float64(g), 1e-5*float64(kc+1), "%s kc=%d C[%d][%d]", v.name, kc, i, j)
					}
				}
			}
		}
	}
}

// TestPackedProductStreams: products that take the non-temporal stores
// (beta 0, one k block, the size threshold lowered to 0) store bit for bit
// what the cached stores give, with the AVX-512 pair kernel and with the
// AVX2 kernel alone, on odd M and N (edge tiles through scratch), depths
// not a multiple of the unroll, column blocks of C (a convolution's
// output: blocks of 784, whose pairs of strips cross block ends), caller packers, split over two goroutines; beta 1 and a
// depth above kc do not stream and must match too. Each case is also
// checked against a float64 product (checkPackedProduct).
func TestPackedProductStreams(t *testing.T) {
	if kernel.fnNT == nil {
		testutil.SkipHardware(t, "the CPU's GEMM kernel %s has no non-temporal variant (it needs AVX2)", kernel.name)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	savedMin := streamMinBytes
	defer func() { streamMinBytes = savedMin }()
	kernels := []microKernel{kernel}
	if kernel.pair != nil {
		single := kernel
		single.pair, single.pairNT = nil, nil
		single.name += "-nopair"
		kernels = append(kernels, single)
	}
	rng := rand.New(rand.NewPCG(53, 54))
	for _, mk := range kernels {
		for _, tc := range []struct {
			m, n, k, block int
			beta           float32
			streams        bool
		}{
			{37, 400, 64, 0, 0, true},
			{6, 32, 1, 0, 0, true},
			{13, 96, 7, 0, 0, true},
			{50, 192, 65, 48, 0, true},
			{16, 2352, 64, 784, 0, true}, // blocks of 49 strips: pairs cross their ends
			{64, 784, 64, 196, 0, false}, // LDC 196: rows not 64-byte aligned
			{130, 1024, 128, 0, 0, true},
			{130, 1024, 256, 0, 0, false}, // k above streamMaxK
			{37, 400, 64, 0, 1, false},
			{24, 160, 300, 0, 0, false},
			{20, 50, 64, 0, 0, false}, // LDC 50: rows not 64-byte aligned
		} {
			for _, packA := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dx%dx%d/block%d/beta%v/packA=%v", mk.name, tc.m, tc.n, tc.k, tc.block, tc.beta, packA)
				t.Run(name, func(t *testing.T) {
					saved := kernel
					kernel = mk
					defer func() { kernel = saved }()
					streamMinBytes = 0
					got, pp := runStreamCase(rng, tc.m, tc.n, tc.k, tc.block, tc.beta, packA, true)
					kc := blockSize(tc.k, mk.kc, 1)
					require.Equal(t, tc.streams, pp.streams(mk, kc), "whether the product streams")
					want := rerunWithoutStream(pp, got.c0)
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.c[i]), "element %d", i)
					}
					checkPackedProduct(t, rng, tc.m, tc.n, tc.k, tc.block, packA, tc.beta)
				})
			}
		}
	}
}

// streamRun is one product's C after Run and before it (c0).
type streamRun struct{ c, c0 []float32 }

// runStreamCase runs an m×n×k PackedProduct into a 64-byte aligned C
// (plain, or in column blocks of block), with caller packers when packA,
// the non-temporal stores on or off (stream).
func runStreamCase(rng *rand.Rand, m, n, k, block int, beta float32, packA, stream bool) (streamRun, *PackedProduct) {
	a := make([]float32, m*k)
	b := make([]float32, k*n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	ldc, stride := n, 0
	if block > 0 {
		ldc, stride = block, m*block
	}
	c := alignedNaNs(m * n)
	if beta != 0 {
		for i := range c {
			c[i] = float32(rng.NormFloat64())
		}
	}
	c0 := append([]float32(nil), c...)
	pp := &PackedProduct{M: m, N: n, K: k, C: c, LDC: ldc, ColBlock: block, ColStride: stride, Beta: beta}
	if packA {
		pp.APacker = &rowsPacker{a: a, k: k}
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
	savedStream := streamC
	streamC = stream
	pp.Run()
	streamC = savedStream
	return streamRun{c: c, c0: c0}, pp
}

// rerunWithoutStream runs pp again from C's starting values c0 into a
// fresh aligned C, with the non-temporal stores off, and returns it.
func rerunWithoutStream(pp *PackedProduct, c0 []float32) []float32 {
	c := grow(nil, len(c0))
	copy(c, c0)
	again := *pp
	again.C = c
	savedStream := streamC
	streamC = false
	again.Run()
	streamC = savedStream
	return c
}

// TestPrefetchRows: the hint reads nothing it may not (a region past the
// slice's end panics before any prefetch, as an index would), writes
// nothing, and takes an empty region of an empty slice.
func TestPrefetchRows(t *testing.T) {
	src := make([]float32, 10*112)
	for i := range src {
		src[i] = float32(i)
	}
	PrefetchRows(src, 112, 10, 112)
	PrefetchRows(src[5*112:], 112, 5, 112)
	PrefetchRows(src[3:], 112, 9, 100) // rows of 100 of 112, the last ending 9 before the end
	for i, v := range src {
		require.Equal(t, float32(i), v, "element %d", i)
	}
	PrefetchRows(nil, 112, 0, 112)
	PrefetchRows(nil, 112, 3, 0)
	require.Panics(t, func() { PrefetchRows(src, 112, 11, 112) }, "an 11th row")
	require.Panics(t, func() { PrefetchRows(src[1:], 112, 10, 112) }, "the last row one element short")
}
