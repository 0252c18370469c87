package linalg_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkAttentionSoftmaxViT times attention's core and its gradient at
// ViT-B/16's shapes (batch 4, 197 tokens, 12 heads of 64) as the exporter
// writes them (attentionGraph), fused (AttentionSoftmax,
// AttentionSoftmaxGrad) and as PermutedMatMul, Softmax, SoftmaxGrad and
// Mul nodes, the two alternating; each reports the wall time of those
// nodes per run and their products' GFLOP/s (six products of
// 2·48·197·197·64 flops).
func BenchmarkAttentionSoftmaxViT(b *testing.B) {
	const B, N, H, D = 4, 197, 12, 64
	var t testing.T
	m := attentionGraph(&t, B, N, H, D, false)
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := attentionInputs(rng, B, N, H, D)
	fusedExe, err := (&cpu.Backend{}).Compile(m, backend.CompileOptions{})
	require.NoError(b, err)
	plainExe, err := withoutAttentionSoftmax().Compile(m, backend.CompileOptions{})
	require.NoError(b, err)
	attention := map[string]bool{graph.AttentionSoftmax: true, graph.AttentionSoftmaxGrad: true, graph.PermutedMatMul: true,
		"Softmax": true, "SoftmaxGrad": true, "Mul": true}
	var times [2]time.Duration
	for i := 0; i < b.N+1; i++ {
		for j, exe := range []backend.Executable{fusedExe, plainExe} {
			var d time.Duration
			ctx := backend.WithNodeTimer(context.Background(), func(n *graph.Node, t time.Duration) {
				if attention[n.OpType] {
					d += t
				}
			})
			_, err := exe.Run(ctx, inputs)
			require.NoError(b, err)
			if i > 0 {
				times[j] += d
			}
		}
	}
	flop := 6 * 2 * float64(B*H*N*N*D) * float64(b.N)
	b.ReportMetric(flop/times[0].Seconds()/1e9, "fused-GFLOP/s")
	b.ReportMetric(flop/times[1].Seconds()/1e9, "unfused-GFLOP/s")
	b.ReportMetric(float64(times[0].Microseconds())/float64(b.N)/1e3, "fused-ms")
	b.ReportMetric(float64(times[1].Microseconds())/float64(b.N)/1e3, "unfused-ms")
}
