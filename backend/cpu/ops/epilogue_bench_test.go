package ops_test

import (
	"math"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The epilogue fusions at ViT-B/16's shapes (batch 4 × 197 tokens, width
// 768, MLP 3072), each as the chain of kernels it replaces ("unfused")
// and as the fused kernel ("fused"), with the storage reused and the
// caches flushed before each call as in membound_bench_test.go:
//
//	go test ./backend/cpu/ops -run XXX -bench 'Epilogue' -benchtime 1x -count 5 -cpu 1,2
//
// (bench/membound_minbench.sh takes the minimum of such single calls;
// CPU=1 bench/epilogue_minbench.sh the minimum of their CPU times, which
// what other processes take from the cores does not inflate.) b.SetBytes
// is the fused kernel's traffic, so MB/s compare the two as times.

// stage is one kernel of a chain: its node and its inputs, given the
// outputs of the stages before it.
type stage struct {
	n  *graph.Node
	in func(prev [][]*graph.Tensor) []*graph.Tensor
}

// benchChain times the stages run one after the other.
func benchChain(b *testing.B, bytes int64, stages ...stage) {
	type bound struct {
		spec kern.Spec
		al   *reuseAlloc
		bind *kern.Binding
	}
	bs := make([]bound, len(stages))
	for i, s := range stages {
		spec, ok := kern.Lookup(s.n.Domain, s.n.OpType, 17)
		if !ok {
			b.Fatalf("no kernel for %s:%s", s.n.Domain, s.n.OpType)
		}
		bs[i] = bound{spec: spec, al: &reuseAlloc{}, bind: &kern.Binding{}}
		bs[i].bind.Allocator = bs[i].al
		kern.Bind(s.n, bs[i].bind)
		defer kern.Unbind(s.n)
	}
	ctx := &kern.Context{Opset: 17}
	outs := make([][]*graph.Tensor, len(stages))
	run := func() {
		for i, s := range stages {
			bs[i].al.i = 0
			bs[i].bind.Begin()
			res, err := bs[i].spec.Fn(ctx, s.n, s.in(outs))
			if err != nil {
				b.Fatal(err)
			}
			outs[i] = append(outs[i][:0], res...)
		}
	}
	run() // sizes the storage
	b.SetBytes(bytes)
	b.ResetTimer()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		evictCaches()
		b.StartTimer()
		c0 := processCPU()
		run()
		cpu += processCPU() - c0
	}
	// CPU time per call (all threads): on a shared host, what another
	// process takes from the cores does not count.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	runtime.KeepAlive(bs)
}

// processCPU is the process's CPU time (every thread).
func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func transB() *graph.Attr { return &graph.Attr{Name: "transB", Type: graph.AttrInt, I: 1} }

// yOnly makes a GeluErf node write Y alone, as after RecomputeGeluErfGrad.
func yOnly(n *graph.Node) *graph.Node {
	n.Outputs[1], n.Outputs[2] = "", ""
	return n
}

var (
	geluC1, geluC2, geluC3 = scalar32(float32(math.Sqrt2)), scalar32(1), scalar32(0.5)
	erfK                   = scalar32(float32(2 / math.Sqrt(math.Pi)))
)

const vitTokens, vitWidth, vitHidden = 4 * 197, 768, 3072

func fixed(ts ...*graph.Tensor) func([][]*graph.Tensor) []*graph.Tensor {
	return func([][]*graph.Tensor) []*graph.Tensor { return ts }
}

// BenchmarkEpilogueViTMLPUp: x·W1ᵀ + b1 then GELU (MatMulAdd, GeluErf
// writing Y) against MatMulAddGeluErf.
func BenchmarkEpilogueViTMLPUp(b *testing.B) {
	x, w, bias := randn(1, 4, 197, vitWidth), randn(2, vitHidden, vitWidth), randn(3, vitHidden)
	bytes := 4 * (size(4, 197, vitWidth) + size(vitHidden, vitWidth) + 2*size(4, 197, vitHidden))
	b.Run("unfused", func(b *testing.B) {
		benchChain(b, bytes,
			stage{mkNode(graph.FusedDomain, graph.MatMulAdd, 1, transB()), fixed(x, w, bias)},
			stage{yOnly(mkNode(graph.FusedDomain, graph.GeluErf, 3)), func(p [][]*graph.Tensor) []*graph.Tensor {
				return []*graph.Tensor{p[0][0], geluC1, geluC2, geluC3}
			}})
	})
	b.Run("fused", func(b *testing.B) {
		benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.MatMulAddGeluErf, 2, transB()), fixed(x, w, bias, geluC1, geluC2, geluC3)})
	})
}

// BenchmarkEpilogueViTMLPDownGrad: dG = dY·W2, the GELU output recomputed
// for the weight gradient, then the GELU's gradient (TransposedMatMul,
// GeluErf writing Y, GeluErfGradX) against MatMulGeluErfGrad.
func BenchmarkEpilogueViTMLPDownGrad(b *testing.B) {
	dy, w, x := randn(4, 4, 197, vitWidth), randn(5, vitWidth, vitHidden), randn(6, 4, 197, vitHidden)
	bytes := 4 * (size(4, 197, vitWidth) + size(vitWidth, vitHidden) + 3*size(4, 197, vitHidden))
	b.Run("unfused", func(b *testing.B) {
		benchChain(b, bytes,
			stage{mkNode(graph.FusedDomain, graph.TransposedMatMul, 1), fixed(dy, w)},
			stage{yOnly(mkNode(graph.FusedDomain, graph.GeluErf, 3)), fixed(x, geluC1, geluC2, geluC3)},
			stage{mkNode(graph.FusedDomain, graph.GeluErfGradX, 1), func(p [][]*graph.Tensor) []*graph.Tensor {
				return []*graph.Tensor{p[0][0], x, geluC1, geluC2, geluC3, erfK}
			}})
	})
	b.Run("fused", func(b *testing.B) {
		benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.MatMulGeluErfGrad, 2), fixed(dy, w, x, geluC1, geluC2, geluC3, erfK)})
	})
}

// BenchmarkEpilogueViTMLPDownResidual: g·W2ᵀ + b2 then the residual Add
// (MatMulAdd, Add) against MatMulAddAdd.
func BenchmarkEpilogueViTMLPDownResidual(b *testing.B) {
	g, w, bias, r := randn(7, 4, 197, vitHidden), randn(8, vitWidth, vitHidden), randn(9, vitWidth), randn(10, 4, 197, vitWidth)
	bytes := 4 * (size(4, 197, vitHidden) + size(vitWidth, vitHidden) + 2*size(4, 197, vitWidth))
	b.Run("unfused", func(b *testing.B) {
		benchChain(b, bytes,
			stage{mkNode(graph.FusedDomain, graph.MatMulAdd, 1, transB()), fixed(g, w, bias)},
			stage{mkNode("", "Add", 1), func(p [][]*graph.Tensor) []*graph.Tensor { return []*graph.Tensor{r, p[0][0]} }})
	})
	b.Run("fused", func(b *testing.B) {
		benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.MatMulAddAdd, 1, transB()), fixed(g, w, bias, r)})
	})
}

// BenchmarkEpilogueViTLayerNormGradAdd: LayerNormalizationGrad then the
// residual gradient's Add against LayerNormGradAdd.
func BenchmarkEpilogueViTLayerNormGradAdd(b *testing.B) {
	dy, x, scale, r := randn(11, 4, 197, vitWidth), randn(12, 4, 197, vitWidth), randn(13, vitWidth), randn(14, 4, 197, vitWidth)
	attrs := []*graph.Attr{{Name: "axis", Type: graph.AttrInt, I: -1}, {Name: "epsilon", Type: graph.AttrFloat, F: 1e-6}}
	bytes := 4 * 4 * size(4, 197, vitWidth)
	b.Run("unfused", func(b *testing.B) {
		benchChain(b, bytes,
			stage{mkNode(graph.InternalDomain, "LayerNormalizationGrad", 3, attrs...), fixed(dy, x, scale)},
			stage{mkNode("", "Add", 1), func(p [][]*graph.Tensor) []*graph.Tensor { return []*graph.Tensor{r, p[0][0]} }})
	})
	b.Run("fused", func(b *testing.B) {
		benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.LayerNormGradAdd, 3, attrs...), fixed(dy, x, scale, r)})
	})
}
