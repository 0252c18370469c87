package gemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// benchShape is one GEMM the training steps run: C (m×n) = op(A)·op(B) with
// k the shared dimension. compare_openblas.py keeps the same table and
// names so that the two sides can be matched.
type benchShape struct {
	m, n, k        int
	transA, transB bool
	what           string
}

func (s benchShape) name() string {
	t := "NN"
	switch {
	case s.transA && s.transB:
		t = "TT"
	case s.transA:
		t = "TN"
	case s.transB:
		t = "NT"
	}
	return fmt.Sprintf("M%dN%dK%d_%s", s.m, s.n, s.k, t)
}

// trainingShapes are the products of the MLP (784→512, batch 128) and ViT
// (4096 tokens, width 128, MLP 256) training steps: forward X·W, input
// gradient dY·Wᵀ and weight gradient Xᵀ·dY.
var trainingShapes = []benchShape{
	{128, 512, 784, false, false, "MLP forward X·W"},
	{128, 784, 512, false, true, "MLP input grad dY·Wᵀ"},
	{784, 512, 128, true, false, "MLP weight grad Xᵀ·dY"},
	// The MLP step as the training graph runs it (PyTorch layout: W is
	// out×in, so the forward pass reads B transposed).
	{128, 512, 784, false, true, "MLP step forward X·Wᵀ, layer 1"},
	{128, 512, 512, false, true, "MLP step forward X·Wᵀ, layer 2"},
	{128, 10, 512, false, true, "MLP step forward X·Wᵀ, head"},
	{512, 784, 128, true, false, "MLP step weight grad dYᵀ·X, layer 1"},
	{512, 512, 128, true, false, "MLP step weight grad dYᵀ·X, layer 2"},
	{10, 512, 128, true, false, "MLP step weight grad dYᵀ·X, head"},
	{128, 512, 512, false, false, "MLP step input grad dY·W"},
	{128, 512, 10, false, false, "MLP step input grad dY·W, head"},
	{4096, 128, 128, false, false, "ViT attention projection"},
	{4096, 256, 128, false, false, "ViT MLP up"},
	{4096, 128, 256, false, false, "ViT MLP down"},
	{4096, 128, 256, false, true, "ViT MLP up, input grad"},
	{256, 256, 4096, true, false, "ViT weight grad, 4096 tokens"},
	{128, 256, 4096, true, false, "ViT MLP up weight grad"},
}

func benchSgemm(b *testing.B, s benchShape) {
	r := rand.New(rand.NewPCG(5, 6))
	// Stored shapes: A is m×k (k×m when transposed), B is k×n (n×k).
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	x := randSlice(r, s.m*s.k)
	y := randSlice(r, s.k*s.n)
	z := make([]float32, s.m*s.n)
	benchProduct(b, s.m, s.n, s.k, func() {
		Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n)
	})
}

func BenchmarkSgemm1024(b *testing.B) { benchSgemm(b, benchShape{m: 1024, n: 1024, k: 1024}) }

func BenchmarkSgemm256(b *testing.B) { benchSgemm(b, benchShape{m: 256, n: 256, k: 256}) }

// BenchmarkSgemmTraining runs the skinny products of the training steps.
func BenchmarkSgemmTraining(b *testing.B) {
	for _, s := range trainingShapes {
		b.Run(s.name(), func(b *testing.B) { benchSgemm(b, s) })
	}
}

// BenchmarkSgemmGoKernel is BenchmarkSgemm1024's shape on the portable
// kernel, to show what the assembly buys.
func BenchmarkSgemmGoKernel(b *testing.B) {
	defer useKernel(goKernel2x4)()
	benchSgemm(b, benchShape{m: 512, n: 512, k: 512})
}

// BenchmarkMicroKernel runs the active micro-kernel alone on L1-resident
// panels (kc=256): its ceiling, without packing or cache misses.
func BenchmarkMicroKernel(b *testing.B) {
	mk := kernel
	const kc = 256
	r := rand.New(rand.NewPCG(1, 1))
	ap := randSlice(r, mk.mr*kc)
	bp := randSlice(r, mk.nr*kc)
	c := make([]float32, mk.mr*mk.nr)
	for i := 0; i < b.N; i++ {
		mk.fn(kc, ap, bp, c, mk.nr, 1, 1)
	}
	b.ReportMetric(2*float64(mk.mr*mk.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemmAttention runs the ViT's batched attention products (256
// heads×images, 65 tokens, head width 32): scores q·kᵀ (65×65×32, B
// transposed) and the weighted values p·v (65×32×65). With -cpu 1 it
// also reports the work per CPU second of the one thread.
func BenchmarkSgemmAttention(b *testing.B) {
	const batch, t, d = 256, 65, 32
	for _, s := range []benchShape{{t, t, d, false, true, "scores"}, {t, d, t, false, false, "values"}} {
		b.Run(s.name(), func(b *testing.B) {
			r := rand.New(rand.NewPCG(7, 8))
			ldb := s.n
			if s.transB {
				ldb = s.k
			}
			x := randSlice(r, batch*s.m*s.k)
			y := randSlice(r, batch*s.k*s.n)
			z := make([]float32, batch*s.m*s.n)
			oneThread := runtime.GOMAXPROCS(0) == 1
			if oneThread {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			run := func() {
				SgemmStrided(false, s.transB, s.m, s.n, s.k, 1, x, s.k, s.m*s.k, y, ldb, s.k*s.n, 0, z, s.n, s.m*s.n, batch)
			}
			run()
			b.ResetTimer()
			cpu0 := threadCPUTime()
			for i := 0; i < b.N; i++ {
				run()
			}
			cpu := threadCPUTime() - cpu0
			flop := 2 * float64(s.m*s.n*s.k) * batch * float64(b.N)
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if oneThread && cpu0 >= 0 && cpu > 0 {
				b.ReportMetric(flop/cpu.Seconds()/1e9, "cpu-GFLOP/s")
			}
		})
	}
}

// BenchmarkSgemmAttentionEdges compares, call by call on one thread, the
// ways the attention products can run their edges and A operand: the full
// 6×16 kernel for every edge strip with A packed ("full"), the half
// kernel on narrow edge strips ("half"), and half plus A read in place
// ("rowA", the default). Alternating the variants call by call and
// counting each one's thread CPU time makes the comparison hold on a busy
// machine; each variant reports GFLOP per CPU second.
func BenchmarkSgemmAttentionEdges(b *testing.B) {
	base := kernel
	if base.half == nil || base.rowA == nil {
		testutil.SkipHardware(b, "the CPU's GEMM kernel has no half or in-place A variants (they need AVX2)")
	}
	defer func() { kernel = base }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	half := base
	half.rowA, half.halfRowA = nil, nil
	full := half
	full.half = nil
	variants := []microKernel{full, half, base}
	names := []string{"full", "half", "rowA"}
	const batch, t, d = 256, 65, 32
	for _, s := range []benchShape{{t, t, d, false, true, "scores"}, {t, d, t, false, false, "values"}} {
		b.Run(s.name(), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := rand.New(rand.NewPCG(7, 8))
			ldb := s.n
			if s.transB {
				ldb = s.k
			}
			x := randSlice(r, batch*s.m*s.k)
			y := randSlice(r, batch*s.k*s.n)
			z := make([]float32, batch*s.m*s.n)
			total := make([]time.Duration, len(variants))
			for i := 0; i < b.N; i++ {
				for v, mk := range variants {
					kernel = mk
					c0 := threadCPUTime()
					SgemmStrided(false, s.transB, s.m, s.n, s.k, 1, x, s.k, s.m*s.k, y, ldb, s.k*s.n, 0, z, s.n, s.m*s.n, batch)
					total[v] += threadCPUTime() - c0
				}
			}
			kernel = base
			flop := 2 * float64(s.m*s.n*s.k) * batch * float64(b.N)
			for v, name := range names {
				if total[v] > 0 {
					b.ReportMetric(flop/total[v].Seconds()/1e9, name+"-cpu-GFLOP/s")
				}
			}
		})
	}
}

// largeShapes are the products of the GPT-2-small step at batch 4, T=128
// (512 tokens, width 768, 3072 hidden, 2304 = q,k,v, vocabulary 50257)
// and the 2048³ reference that issue 14 measures them against: forward
// x·Wᵀ, input gradient dY·W and weight gradient dYᵀ·x of each Linear.
var largeShapes = []benchShape{
	{2048, 2048, 2048, false, false, "reference 2048³"},
	{512, 2304, 768, false, true, "GPT in-proj x·Wᵀ"},
	{512, 768, 768, false, true, "GPT out-proj x·Wᵀ"},
	{512, 3072, 768, false, true, "GPT MLP up x·Wᵀ"},
	{512, 768, 3072, false, true, "GPT MLP down x·Wᵀ"},
	{512, 50257, 768, false, true, "GPT head x·Wᵀ"},
	{512, 768, 2304, false, false, "GPT in-proj dY·W"},
	{512, 768, 3072, false, false, "GPT MLP up dY·W"},
	{512, 3072, 768, false, false, "GPT MLP down dY·W"},
	{512, 768, 50257, false, false, "GPT head dY·W"},
	{2304, 768, 512, true, false, "GPT in-proj dYᵀ·x"},
	{3072, 768, 512, true, false, "GPT MLP up dYᵀ·x"},
	{768, 3072, 512, true, false, "GPT MLP down dYᵀ·x"},
	{50257, 768, 512, true, false, "GPT head dYᵀ·x"},
	// ViT-B/16 at 224 px, batch 4: 788 tokens (4×197), width 768, 3072 hidden.
	{788, 2304, 768, false, true, "ViT in-proj x·Wᵀ"},
	{788, 768, 768, false, true, "ViT out-proj x·Wᵀ"},
	{788, 3072, 768, false, true, "ViT MLP up x·Wᵀ"},
	{788, 768, 3072, false, true, "ViT MLP down x·Wᵀ"},
	{788, 768, 2304, false, false, "ViT in-proj dY·W"},
	{788, 768, 3072, false, false, "ViT MLP up dY·W"},
	{788, 3072, 768, false, false, "ViT MLP down dY·W"},
	{2304, 768, 788, true, false, "ViT in-proj dYᵀ·x"},
	{3072, 768, 788, true, false, "ViT MLP up dYᵀ·x"},
	{768, 3072, 788, true, false, "ViT MLP down dYᵀ·x"},
}

// BenchmarkSgemmLarge runs largeShapes; with -cpu 1 the work per CPU
// second of the one thread is the figure that other processes on the
// machine disturb least.
func BenchmarkSgemmLarge(b *testing.B) {
	for _, s := range largeShapes {
		b.Run(s.name(), func(b *testing.B) { benchSgemm(b, s) })
	}
}

// BenchmarkLargeVsReference runs each of largeShapes' step products
// interleaved with the 2048³ reference, call by call, and reports each
// one's rate and its ratio to the reference's in the same run (of-ref),
// which holds on a busy machine better than two separate figures. With
// -cpu 1 the rates are work per CPU second of the one locked thread
// (cpu-GFLOP/s); with more, wall-clock GFLOP/s of the split product.
func BenchmarkLargeVsReference(b *testing.B) {
	ref := largeShapes[0]
	r := rand.New(rand.NewPCG(5, 6))
	rx := randSlice(r, ref.m*ref.k)
	ry := randSlice(r, ref.k*ref.n)
	rz := make([]float32, ref.m*ref.n)
	for _, s := range largeShapes[1:] {
		b.Run(s.name(), func(b *testing.B) {
			oneThread := runtime.GOMAXPROCS(0) == 1
			if oneThread {
				runtime.LockOSThread() // sub-benchmarks run on their own goroutines
				defer runtime.UnlockOSThread()
			}
			clock := func() time.Duration {
				if oneThread {
					return threadCPUTime()
				}
				return time.Duration(time.Now().UnixNano())
			}
			lda, ldb := s.k, s.n
			if s.transA {
				lda = s.m
			}
			if s.transB {
				ldb = s.k
			}
			x := randSlice(r, s.m*s.k)
			y := randSlice(r, s.k*s.n)
			z := make([]float32, s.m*s.n)
			Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n) // warm the pools
			var t, tr time.Duration
			for i := 0; i < b.N; i++ {
				c0 := clock()
				Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n)
				c1 := clock()
				Sgemm(false, false, ref.m, ref.n, ref.k, 1, rx, ref.k, ry, ref.n, 0, rz, ref.n)
				t, tr = t+c1-c0, tr+clock()-c1
			}
			if t <= 0 || tr <= 0 {
				return
			}
			unit := "GFLOP/s"
			if oneThread {
				unit = "cpu-GFLOP/s"
			}
			rate := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N) / t.Seconds() / 1e9
			refRate := 2 * float64(ref.m) * float64(ref.n) * float64(ref.k) * float64(b.N) / tr.Seconds() / 1e9
			b.ReportMetric(rate, unit)
			b.ReportMetric(refRate, "ref-"+unit)
			b.ReportMetric(rate/refRate, "of-ref")
		})
	}
}
