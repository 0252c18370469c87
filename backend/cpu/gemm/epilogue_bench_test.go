package gemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

// benchGelu is the transformer MLP's GELU epilogue as the linalg kernels
// run it (MatMulAddGeluErf: y = GeluErf(C + bias); MatMulGeluErfGrad:
// C = GeluErfGradX(C, x), y = GeluErf(x)), one vmath call per row of a
// block.
type benchGelu struct {
	grad       bool
	y, x, bias []float32
}

func (e *benchGelu) ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		lo, hi := i*ldc+j0, i*ldc+j1
		if e.grad {
			vmath.GeluErfGradX32(c[lo:hi], e.y[lo:hi], c[lo:hi], e.x[lo:hi], 1.4142135, 1, 0.5, 1.1283792)
			continue
		}
		vmath.GeluErfBias32(e.y[lo:hi], c[lo:hi], e.bias[j0:j1], 1.4142135, 1, 0.5)
	}
}

// BenchmarkGeluEpilogue times the GPT's (512 rows) and ViT-B/16's (788
// rows) MLP up-projection, forward with its bias+GELU epilogue (B
// transposed, as the exports store the weight) and its input gradient with
// the GELU-gradient epilogue, beside the same products without an
// epilogue: the difference is what the epilogue costs inside the GEMM.
// (Applying the epilogue in 256-column chunks of a block's last k slice,
// while each chunk is in L1/L2, measured 2-8% slower than after the whole
// block at -cpu 1, thread CPU time, AVX2: the row passes of the GELU are
// compute-bound, not waiting for C.)
func BenchmarkGeluEpilogue(b *testing.B) {
	for _, m := range []int{512, 788} {
		n, k := 3072, 768
		r := rand.New(rand.NewPCG(7, 8))
		a, w := randSlice(r, m*k), randSlice(r, k*n)
		c, y, x, bias := make([]float32, m*n), make([]float32, m*n), randSlice(r, m*n), randSlice(r, n)
		for _, v := range []struct {
			name string
			tb   bool
			ep   BlockEpilogue
		}{
			{"forward_plain", true, nil},
			{"forward_gelu", true, &benchGelu{y: y, bias: bias}},
			{"grad_plain", false, nil},
			{"grad_gelu", false, &benchGelu{grad: true, y: y, x: x}},
		} {
			ldb := n
			if v.tb {
				ldb = k
			}
			b.Run(fmt.Sprintf("M%dN%dK%d_%s", m, n, k, v.name), func(b *testing.B) {
				run := func() {
					SgemmEpilogue(false, v.tb, m, n, k, 1, a, k, w, ldb, 0, c, n, Epilogue{Block: v.ep})
				}
				benchProduct(b, m, n, k, run)
			})
		}
	}
}

// BenchmarkRowC times the attention out-projection's Gemm (B transposed,
// a bias row as C) of the GPT (512 rows) and ViT-B/16 (788): SgemmRowC,
// which writes the bias into each block of C just before the kernel reads
// it, against the broadcast pass over C followed by SgemmEpilogue with
// beta 1 (what the Gemm kernel ran before), and the product without C.
func BenchmarkRowC(b *testing.B) {
	for _, m := range []int{512, 788} {
		n, k := 768, 768
		r := rand.New(rand.NewPCG(9, 10))
		a, w, row := randSlice(r, m*k), randSlice(r, n*k), randSlice(r, n)
		c := make([]float32, m*n)
		for _, v := range []struct {
			name string
			run  func()
		}{
			{"plain", func() { Sgemm(false, true, m, n, k, 1, a, k, w, k, 0, c, n) }},
			{"fill_then_beta1", func() {
				for i := 0; i < m; i++ {
					copy(c[i*n:(i+1)*n], row)
				}
				SgemmEpilogue(false, true, m, n, k, 1, a, k, w, k, 1, c, n, Epilogue{})
			}},
			{"rowc", func() { SgemmRowC(false, true, m, n, k, 1, a, k, w, k, 1, row, c, n, Epilogue{}) }},
		} {
			b.Run(fmt.Sprintf("M%dN%dK%d_%s", m, n, k, v.name), func(b *testing.B) {
				benchProduct(b, m, n, k, v.run)
			})
		}
	}
}

// benchProduct times run, an m×n×k product, after one untimed call
// (which warms the pools): GFLOP/s of the wall, and of the thread's CPU
// time on one core (the product runs on this locked OS thread, so the
// figure ignores time stolen by other processes) or of the process's
// over all threads on more (work per CPU second: the product's parallel
// efficiency, fan-out overheads included; times GOMAXPROCS gives what an
// idle machine would reach).
func benchProduct(b *testing.B, m, n, k int, run func()) {
	oneThread := runtime.GOMAXPROCS(0) == 1
	if oneThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	run()
	b.ResetTimer()
	cpu0, proc0 := threadCPUTime(), processCPUTime()
	for i := 0; i < b.N; i++ {
		run()
	}
	cpu, proc := threadCPUTime()-cpu0, processCPUTime()-proc0
	flop := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if oneThread && cpu0 >= 0 && cpu > 0 {
		b.ReportMetric(flop/cpu.Seconds()/1e9, "cpu-GFLOP/s")
	}
	if !oneThread && proc0 >= 0 && proc > 0 {
		b.ReportMetric(flop/proc.Seconds()/1e9, "proc-cpu-GFLOP/s")
	}
}
