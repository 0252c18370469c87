package linalg

import (
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkAttentionGPT times the four kinds of attention product of
// nn.MultiheadAttention at the GPT-2-small shape (T=128, batch 4 × 12
// heads of 64): q, k, v are [T, B·H, D] tensors viewed as [B·H, T, D].
// The report is GFLOP/s of the products.
func BenchmarkAttentionGPT(b *testing.B) { benchAttention(b, 128, 48, 64) }

// BenchmarkAttentionViT is BenchmarkAttentionGPT at ViT-B/16's shapes (224
// px, batch 4): 197 tokens, 4×12 heads of 64.
func BenchmarkAttentionViT(b *testing.B) { benchAttention(b, 197, 48, 64) }

// benchAttention times attention's products over T tokens and BH heads of
// D, read as PermutedMatMul reads them, beside two references.
func benchAttention(b *testing.B, T, BH, D int) {
	r := rand.New(rand.NewPCG(1, 2))
	q, k := randF32(r, T, BH, D), randF32(r, T, BH, D)
	p := randF32(r, BH, T, T)
	ctx := &kern.Context{Opset: 17}
	heads := viewSteps{perm: []int64{1, 0, 2}}
	headsT := viewSteps{perm: []int64{1, 0, 2}, swap: true}
	flop := float64(2 * BH * T * T * D)
	cases := []struct {
		name  string
		grad  int64
		bases []*graph.Tensor
		steps []viewSteps
	}{
		{"qkT", 0, []*graph.Tensor{q, k}, []viewSteps{heads, headsT}},
		{"pv", 0, []*graph.Tensor{p, k}, []viewSteps{{}, heads}},
		{"gradA_pv", 1, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
		{"gradB_pv", 2, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
	}
	b.Run("ref_gemm1024", func(b *testing.B) {
		const M = 1024
		x, y, z := randF32(r, M, M), randF32(r, M, M), make([]float32, M*M)
		cpu := cpuTime()
		for i := 0; i < b.N; i++ {
			gemm.Sgemm(false, false, M, M, M, 1, x.Float32s(), M, y.Float32s(), M, 0, z, M)
		}
		f := float64(2 * M * M * M)
		b.ReportMetric(f*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(f*float64(b.N)/(cpuTime()-cpu).Seconds()/1e9, "GFLOP/cpu-s")
	})
	b.Run("ref_contiguous", func(b *testing.B) {
		x, y, z := randF32(r, BH, T, D), randF32(r, BH, T, D), make([]float32, BH*T*T)
		cpu := cpuTime()
		for i := 0; i < b.N; i++ {
			gemm.SgemmStrided(false, true, T, T, D, 1, x.Float32s(), D, T*D, y.Float32s(), D, T*D, 0, z, T, T*T, BH)
		}
		b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(flop*float64(b.N)/(cpuTime()-cpu).Seconds()/1e9, "GFLOP/cpu-s")
	})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			n := permutedNode(c.grad, nil, c.bases, c.steps)
			in := c.bases
			if c.grad != 0 {
				// dY first, then A and B of the forward product.
				in = c.bases
			}
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := permutedMatMulKernel(ctx, n, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flop*float64(b.N)/(cpuTime()-cpu).Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}

// cpuTime is the process's CPU time (user + system, all threads).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reuseAlloc serves a node's output from the same storage every call, as
// the executor's memory plan does, so that a benchmark times the product
// and not the allocation of a fresh output (and its page faults).
type reuseAlloc struct{ t *graph.Tensor }

// bindReuse binds n to a reuseAlloc until tb ends. kern.Bind holds its
// Binding weakly (an executor keeps its own alive), so the cleanup holds
// this one: a Binding that nothing references is collected at the next
// GC, and the node's outputs would then be allocated afresh, and zeroed,
// on every call (the products' benchmarks timed ~0.3 ms of it a call).
func bindReuse(tb testing.TB, n *graph.Node) {
	bind := &kern.Binding{Allocator: &reuseAlloc{}}
	kern.Bind(n, bind)
	tb.Cleanup(func() {
		kern.Unbind(n)
		runtime.KeepAlive(bind)
	})
}

func (r *reuseAlloc) Alloc(n *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	return r.AllocUninit(n, d, shape, elems)
}

func (r *reuseAlloc) AllocUninit(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	if r.t == nil || r.t.Size() != elems || r.t.DType != d {
		t, err := graph.NewTensor(d, shape)
		if err != nil {
			return nil
		}
		r.t = t
	}
	r.t.Shape = append(r.t.Shape[:0], shape...)
	return r.t
}

// BenchmarkAttentionVsGEMMViT times attention's six product kinds at
// ViT-B/16's shapes (197 tokens, 4×12 heads of 64: QKᵀ, P·V, P·V with its
// result permuted back to [T, B·H, D], and the gradients of both
// products with respect to each operand) as PermutedMatMul runs them in
// a step (output storage reused, as the memory plan does), on one locked
// thread, each call timed by the thread's CPU time (which other processes
// disturb least) and interleaved with the 2048³ GEMM, so that the ratio
// to the reference holds on a busy machine. "nohint" is the same product
// without the prefetch of the next head's operands.
// Run with -cpu 1.
func BenchmarkAttentionVsGEMMViT(b *testing.B) { benchAttentionVsGEMM(b, 197, 48, 64) }

// BenchmarkAttentionVsGEMMGPT is BenchmarkAttentionVsGEMMViT at the GPT's
// shapes (T=128, batch 4 × 12 heads of 64).
func BenchmarkAttentionVsGEMMGPT(b *testing.B) { benchAttentionVsGEMM(b, 128, 48, 64) }

func benchAttentionVsGEMM(b *testing.B, T, BH, D int) {
	r := rand.New(rand.NewPCG(1, 2))
	q, k := randF32(r, T, BH, D), randF32(r, T, BH, D)
	p := randF32(r, BH, T, T)
	ctx := &kern.Context{Opset: 17}
	heads := viewSteps{perm: []int64{1, 0, 2}}
	headsT := viewSteps{perm: []int64{1, 0, 2}, swap: true}
	flop := float64(2 * BH * T * T * D)
	cases := []struct {
		name  string
		grad  int64
		permY []int64
		bases []*graph.Tensor
		steps []viewSteps
	}{
		{"qkT", 0, nil, []*graph.Tensor{q, k}, []viewSteps{heads, headsT}},
		{"pv", 0, nil, []*graph.Tensor{p, k}, []viewSteps{{}, heads}},
		{"pv_permY", 0, []int64{1, 0, 2}, []*graph.Tensor{p, k}, []viewSteps{{}, heads}},
		{"gradA_pv", 1, nil, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
		{"gradB_pv", 2, nil, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
		{"gradA_qkT", 1, nil, []*graph.Tensor{p, q, k}, []viewSteps{{}, heads, headsT}},
		{"gradB_qkT", 2, nil, []*graph.Tensor{p, q, k}, []viewSteps{{}, heads, headsT}},
	}
	const M = 2048
	x, y, z := randF32(r, M, M), randF32(r, M, M), make([]float32, M*M)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread() // each sub-benchmark runs on its own goroutine
			defer runtime.UnlockOSThread()
			n := permutedNode(c.grad, c.permY, c.bases, c.steps)
			bindReuse(b, n)
			defer func(was bool) { prefetchNextProduct = was }(prefetchNextProduct)
			var on, off, ref time.Duration
			refRuns := 0
			for i := 0; i < b.N; i++ {
				for _, hint := range []bool{false, true} {
					prefetchNextProduct = hint
					c0 := threadCPU()
					if _, err := permutedMatMulKernel(ctx, n, c.bases); err != nil {
						b.Fatal(err)
					}
					d := threadCPU() - c0
					if hint {
						on += d
					} else {
						off += d
					}
				}
				if i%8 == 0 {
					c0 := threadCPU()
					gemm.Sgemm(false, false, M, M, M, 1, x.Float32s(), M, y.Float32s(), M, 0, z, M)
					ref += threadCPU() - c0
					refRuns++
				}
			}
			if on <= 0 || off <= 0 || ref <= 0 {
				return // no thread CPU clock
			}
			refRate := float64(2*M*M*M) * float64(refRuns) / ref.Seconds() / 1e9
			rate := flop * float64(b.N) / on.Seconds() / 1e9
			b.ReportMetric(rate, "GFLOP/cpu-s")
			b.ReportMetric(flop*float64(b.N)/off.Seconds()/1e9, "nohint-GFLOP/cpu-s")
			b.ReportMetric(refRate, "ref2048-GFLOP/cpu-s")
			b.ReportMetric(rate/refRate, "of-ref")
		})
	}
}

// threadCPU is the calling OS thread's CPU time (0 where it cannot be
// read).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkAttentionWallViT times attention's six product kinds at
// ViT-B/16's shapes as PermutedMatMul runs them in a step (output storage
// reused, as the memory plan does), in wall-clock time with the kernel
// pool's GOMAXPROCS workers, interleaved with the 2048³ GEMM (also wall
// time, also split over the cores; one call per 32 products, so both
// sample the same minutes of the machine's load): "of-ref" is the step's
// ratio (`--op-profile`'s GFLOP/s over `bench --gemm`'s). The same ratio
// in CPU time ("cpu-of-ref": the thread's at -cpu 1, the process's at
// more), which other processes on a busy machine disturb less, beside it.
func BenchmarkAttentionWallViT(b *testing.B) { benchAttentionWall(b, 197, 48, 64) }

// BenchmarkAttentionWallGPT is BenchmarkAttentionWallViT at the GPT's
// shapes (T=128, batch 4 × 12 heads of 64).
func BenchmarkAttentionWallGPT(b *testing.B) { benchAttentionWall(b, 128, 48, 64) }

// attentionProduct is one of attention's six products as the step lays
// it out: PermutedMatMul's grad, permY, operands and their views.
type attentionProduct struct {
	name  string
	grad  int64
	permY []int64
	bases []*graph.Tensor
	steps []viewSteps
}

// attentionProducts are attention's six products (the scores, P·V and the
// four gradients) over q and k (also standing for v and dO) as [T, B·H,
// D], qc as [B·H, T, D] (q after its scaling) and p as [B·H, T, T] (the
// scores, their gradient).
func attentionProducts(q, k, qc, p *graph.Tensor) []attentionProduct {
	heads := viewSteps{perm: []int64{1, 0, 2}}
	headsT := viewSteps{perm: []int64{1, 2, 0}}
	return []attentionProduct{
		{"qkT", 0, nil, []*graph.Tensor{qc, k}, []viewSteps{{}, headsT}},
		{"pv_permY", 0, []int64{1, 0, 2}, []*graph.Tensor{p, k}, []viewSteps{{}, heads}},
		{"dP", 1, nil, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
		{"dV_permY", 2, []int64{1, 0, 2}, []*graph.Tensor{q, p, k}, []viewSteps{heads, {}, heads}},
		{"dQ", 1, nil, []*graph.Tensor{p, qc, k}, []viewSteps{{}, {}, headsT}},
		{"dK_permY", 2, []int64{2, 0, 1}, []*graph.Tensor{p, qc, k}, []viewSteps{{}, {}, headsT}},
	}
}

func benchAttentionWall(b *testing.B, T, BH, D int) {
	// The CPU time that other processes disturb least: the locked
	// thread's on one core, the process's (every worker's, their spinning
	// included) on more.
	cpuClock := threadCPU
	if runtime.GOMAXPROCS(0) > 1 {
		cpuClock = cpuTime
	}
	r := rand.New(rand.NewPCG(1, 2))
	// The step's layouts (`--op-profile-by-shape` of ViT-B/16): q, k, v
	// and dO as [T, B·H, D] (q also as [B·H, T, D] after its scaling),
	// the scores and their gradient as [B·H, T, T].
	q, k := randF32(r, T, BH, D), randF32(r, T, BH, D)
	qc := randF32(r, BH, T, D)
	p := randF32(r, BH, T, T)
	ctx := &kern.Context{Opset: 17}
	flop := float64(2 * BH * T * T * D)
	cases := attentionProducts(q, k, qc, p)
	const M = 2048
	x, y, z := randF32(r, M, M), randF32(r, M, M), make([]float32, M*M)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if runtime.GOMAXPROCS(0) == 1 { // for the thread's CPU time
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			n := permutedNode(c.grad, c.permY, c.bases, c.steps)
			bindReuse(b, n)
			before := permutedFallbacks.Load()
			var on, ref, onCPU, refCPU time.Duration
			refRuns := 0
			for i := 0; i < b.N; i++ {
				t0, c0 := time.Now(), cpuClock()
				if _, err := permutedMatMulKernel(ctx, n, c.bases); err != nil {
					b.Fatal(err)
				}
				on += time.Since(t0)
				onCPU += cpuClock() - c0
				if i%32 == 0 {
					t0, c0 := time.Now(), cpuClock()
					gemm.Sgemm(false, false, M, M, M, 1, x.Float32s(), M, y.Float32s(), M, 0, z, M)
					ref += time.Since(t0)
					refCPU += cpuClock() - c0
					refRuns++
				}
			}
			if permutedFallbacks.Load() != before {
				b.Fatal("the materialising fallback ran")
			}
			refRate := float64(2*M*M*M) * float64(refRuns) / ref.Seconds() / 1e9
			rate := flop * float64(b.N) / on.Seconds() / 1e9
			b.ReportMetric(rate, "GFLOP/s")
			b.ReportMetric(refRate, "ref2048-GFLOP/s")
			b.ReportMetric(rate/refRate, "of-ref")
			if onCPU > 0 && refCPU > 0 {
				cpuRate := flop * float64(b.N) / onCPU.Seconds() / 1e9
				b.ReportMetric(cpuRate, "GFLOP/cpu-s")
				b.ReportMetric(cpuRate/(float64(2*M*M*M)*float64(refRuns)/refCPU.Seconds()/1e9), "cpu-of-ref")
			}
		})
	}
}

// TestBindReuseSurvivesGC: the benchmarks' bound allocator still serves
// the node after collections (kern.Bind alone holds it weakly), so that
// every call writes the same output storage.
func TestBindReuseSurvivesGC(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	q, k := randF32(r, 8, 4, 16), randF32(r, 8, 4, 16)
	c := attentionProducts(q, k, randF32(r, 4, 8, 16), randF32(r, 4, 8, 8))[0]
	n := permutedNode(c.grad, c.permY, c.bases, c.steps)
	bindReuse(t, n)
	ctx := &kern.Context{Opset: 17}
	var first *float32
	for i := range 3 {
		runtime.GC()
		runtime.GC()
		out, err := permutedMatMulKernel(ctx, n, c.bases)
		if err != nil {
			t.Fatal(err)
		}
		p := &out[0].Float32s()[0]
		if i == 0 {
			first = p
		} else if p != first {
			t.Fatalf("call %d wrote a fresh output: the binding was collected", i)
		}
	}
}
