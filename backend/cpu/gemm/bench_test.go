package gemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
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
	// On one goroutine the product runs on this OS thread, so its CPU time
	// gives a second figure that ignores time stolen by other processes.
	oneThread := runtime.GOMAXPROCS(0) == 1
	if oneThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n) // warm the pools
	b.ResetTimer()
	cpu0 := threadCPUTime()
	for i := 0; i < b.N; i++ {
		Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n)
	}
	cpu := threadCPUTime() - cpu0
	flop := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if oneThread && cpu0 >= 0 && cpu > 0 {
		b.ReportMetric(flop/cpu.Seconds()/1e9, "cpu-GFLOP/s")
	}
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
