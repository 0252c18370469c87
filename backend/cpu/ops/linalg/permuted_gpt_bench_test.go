package linalg

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

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
