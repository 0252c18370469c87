package ops_test

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops"
	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The memory-bound ops of the three real-size training steps of issue 14
// (ResNet-50 at batch 8 and 224 px, ViT-B/16 at batch 4, the GPT-2-sized
// decoder at batch 4 × 128 tokens), at their exact shapes, beside STREAM's
// triad in the same package: one `go test -bench` run gives each op's MB/s
// and the machine's bandwidth under the same load, so their ratio means
// something even on a busy host:
//
//	go test ./backend/cpu/ops -run XXX -bench 'Membound|Triad' -benchtime 10x
//
// Each benchmark calls the registered kernel through kern.Lookup with an
// Allocator bound to the node that hands the same storage back on every
// call (zeroed for kern.New, as it comes for kern.NewUninit), as the
// executor's memory plan does, so the figures are the kernel's and not the
// Go allocator's; the caches are flushed (untimed) before each call, so the
// operands come from memory. b.SetBytes counts the bytes the op must move: every
// tensor it reads once and every tensor it writes once (what --op-profile
// credits, less the inputs a kernel consults only for their shape).

// BenchmarkTriad is STREAM's triad a[i] = b[i] + s·c[i] over three float64
// arrays of 128 MiB, split over benchWorkers() goroutines, like `onnxtrain
// bench --stream` (24 bytes per element).
func BenchmarkTriad(b *testing.B) {
	const n = 1 << 24
	a, x, y := make([]float64, n), make([]float64, n), make([]float64, n)
	workers := benchWorkers()
	parts := func(f func(lo, hi int)) { benchlib.ParallelParts(n, workers, f) }
	parts(func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i], x[i], y[i] = 1, 2, 0.5
		}
	})
	b.SetBytes(24 * n)
	for b.Loop() {
		parts(func(lo, hi int) {
			aa, xx, yy := a[lo:hi], x[lo:hi], y[lo:hi]
			for i := range aa {
				aa[i] = xx[i] + 3*yy[i]
			}
		})
	}
	if a[n/2] != 2+3*0.5 {
		b.Fatalf("triad computed %v", a[n/2])
	}
}

// evictBuf is read between calls so that an op's operands come from
// memory, as in a training step (the 32 MiB L3 of the host would otherwise
// hold the smaller ViT and GPT tensors between calls). ONNXTRAIN_BENCH_EVICT_MIB
// sets its size (default 96; 0: no eviction); ONNXTRAIN_BENCH_EVICT_DIRTY=1 writes it
// instead of reading it, so that the caches hold dirty lines when the
// kernel starts, as after the op before it in a step.
var evictBuf = make([]uint64, evictMiB()<<20/8)

var evictDirty = os.Getenv("ONNXTRAIN_BENCH_EVICT_DIRTY") == "1"

func evictMiB() int {
	if v, err := strconv.Atoi(os.Getenv("ONNXTRAIN_BENCH_EVICT_MIB")); err == nil && v >= 0 {
		return v
	}
	return 96
}

var evictSink uint64

func evictCaches() {
	if evictDirty {
		for i := range evictBuf {
			evictBuf[i] += uint64(i)
		}
		return
	}
	var s uint64
	for _, v := range evictBuf {
		s += v
	}
	evictSink += s
}

// benchWorkers is the worker count the kernels use (all cores).
func benchWorkers() int { return runtime.GOMAXPROCS(0) }

// reuseAlloc serves a node's allocations from the same tensors on every
// call (the i-th allocation of a call gets the i-th tensor).
type reuseAlloc struct {
	ts []*graph.Tensor
	i  int
}

func (r *reuseAlloc) get(d graph.DType, shape []int, elems int, zero bool) *graph.Tensor {
	defer func() { r.i++ }()
	if r.i < len(r.ts) {
		t := r.ts[r.i]
		if t.DType == d && t.Size() == elems {
			t.Shape = append(t.Shape[:0], shape...)
			if zero {
				switch v := t.Data.(type) {
				case []float32:
					clear(v)
				case []float64:
					clear(v)
				case []int64:
					clear(v)
				case []bool:
					clear(v)
				default:
					return nil
				}
			}
			return t
		}
		return nil
	}
	t := newT(d, append([]int(nil), shape...))
	r.ts = append(r.ts, t)
	return t
}

func (r *reuseAlloc) Alloc(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	return r.get(d, shape, elems, true)
}

func (r *reuseAlloc) AllocUninit(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	return r.get(d, shape, elems, false)
}

// benchOp times the kernel of n on in, counting bytes per call.
func benchOp(b *testing.B, n *graph.Node, opset int64, bytes int64, in ...*graph.Tensor) {
	spec, ok := kern.Lookup(n.Domain, n.OpType, opset)
	if !ok {
		b.Fatalf("no kernel for %s:%s", n.Domain, n.OpType)
	}
	al := &reuseAlloc{}
	bind := &kern.Binding{Allocator: al}
	kern.Bind(n, bind)
	defer kern.Unbind(n)
	ctx := &kern.Context{Opset: opset}
	run := func() {
		al.i = 0
		bind.Begin()
		if _, err := spec.Fn(ctx, n, in); err != nil {
			b.Fatal(err)
		}
	}
	run() // sizes the storage
	b.SetBytes(bytes)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		evictCaches()
		b.StartTimer()
		run()
	}
	runtime.KeepAlive(bind)
}

func mkNode(domain, op string, outs int, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: op, OpType: op, Domain: domain}
	for i := range outs {
		n.Outputs = append(n.Outputs, "o"+string(rune('0'+i)))
	}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

// randn is a float32 tensor of standard normal values.
func randn(seed uint64, shape ...int) *graph.Tensor {
	rng := rand.New(rand.NewPCG(seed, 7))
	t := newT(graph.Float32, shape)
	v := t.Data.([]float32)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return t
}

func filled(v float32, shape ...int) *graph.Tensor {
	t := newT(graph.Float32, shape)
	d := t.Data.([]float32)
	for i := range d {
		d[i] = v
	}
	return t
}

func scalar32(v float32) *graph.Tensor { return graph.FromFloat32([]float32{v}) }

func size(shape ...int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// --- ResNet-50, batch 8, 224 px ---

// The stem's pool: 8×64×112×112 → 8×64×56×56, 3×3 windows, stride 2, pad 1.
func BenchmarkMemboundResNet50MaxPool(b *testing.B) {
	n := mkNode("", "MaxPool", 1, graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1))
	benchOp(b, n, 17, 4*(size(8, 64, 112, 112)+size(8, 64, 56, 56)), randn(1, 8, 64, 112, 112))
}

func BenchmarkMemboundResNet50MaxPoolGrad(b *testing.B) {
	n := mkNode(graph.InternalDomain, "MaxPoolGrad", 1, graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1))
	// reads dY and X, writes dX
	benchOp(b, n, 17, 4*(2*size(8, 64, 112, 112)+size(8, 64, 56, 56)), randn(1, 8, 64, 56, 56), randn(2, 8, 64, 112, 112))
}

// resnetBN are the (channels, side) of ResNet-50's batch-normalised
// activations at 56×56 and above.
var resnetBN = []struct {
	name    string
	c, side int
}{{"c64_112", 64, 112}, {"c64_56", 64, 56}, {"c256_56", 256, 56}}

func BenchmarkMemboundResNet50BatchNormRelu(b *testing.B) {
	for _, s := range resnetBN {
		b.Run(s.name, func(b *testing.B) {
			n := mkNode(graph.FusedDomain, graph.BatchNormRelu, 3, graph.IntAttr("training_mode", 1))
			x := randn(1, 8, s.c, s.side, s.side)
			// reads X, writes Y (the statistics are per channel)
			benchOp(b, n, 15, 8*size(8, s.c, s.side, s.side), x, filled(1.5, s.c), filled(0.25, s.c), filled(0, s.c), filled(1, s.c))
		})
	}
}

func BenchmarkMemboundResNet50BatchNorm(b *testing.B) {
	n := mkNode("", "BatchNormalization", 3, graph.IntAttr("training_mode", 1))
	c, side := 256, 56
	benchOp(b, n, 15, 8*size(8, c, side, side), randn(1, 8, c, side, side), filled(1.5, c), filled(0.25, c), filled(0, c), filled(1, c))
}

func BenchmarkMemboundResNet50BatchNormReluGrad(b *testing.B) {
	for _, s := range resnetBN {
		b.Run(s.name, func(b *testing.B) {
			n := mkNode(graph.FusedDomain, graph.BatchNormReluGrad, 3, graph.IntAttr("training_mode", 1))
			sh := []int{8, s.c, s.side, s.side}
			// reads dR, R and X, writes dX
			benchOp(b, n, 15, 16*size(sh...), randn(1, sh...), randn(2, sh...), randn(3, sh...), filled(1.5, s.c), filled(0, s.c), filled(1, s.c))
		})
	}
}

func BenchmarkMemboundResNet50BatchNormGrad(b *testing.B) {
	sh := []int{8, 256, 56, 56}
	n := mkNode(graph.InternalDomain, "BatchNormalizationGrad", 3, graph.IntAttr("training_mode", 1))
	// reads dY and X, writes dX (the kernel reads a channel's dY and X a
	// second time for dX, from L2: a channel is 8·56·56 elements)
	benchOp(b, n, 15, 12*size(sh...), randn(1, sh...), randn(2, sh...), filled(1.5, 256), filled(0, 256), filled(1, 256))
}

func BenchmarkMemboundResNet50Add(b *testing.B) {
	sh := []int{8, 256, 56, 56}
	benchOp(b, mkNode("", "Add", 1), 14, 12*size(sh...), randn(1, sh...), randn(2, sh...))
}

func BenchmarkMemboundResNet50Relu(b *testing.B) {
	sh := []int{8, 256, 56, 56}
	benchOp(b, mkNode("", "Relu", 1), 14, 8*size(sh...), randn(1, sh...))
}

func BenchmarkMemboundResNet50ReluGrad(b *testing.B) {
	sh := []int{8, 256, 56, 56}
	benchOp(b, mkNode(graph.FusedDomain, graph.ReluGrad, 1), 14, 12*size(sh...), randn(1, sh...), randn(2, sh...))
}

// The global pool's gradient: dY [8, 2048, 1, 1] broadcast over the 7×7
// planes (then divided by 49).
func BenchmarkMemboundResNet50ExpandPool(b *testing.B) {
	// writes the 7×7 planes (the input is 64 KiB)
	benchOp(b, mkNode("", "Expand", 1), 17, 4*size(8, 2048, 7, 7), randn(1, 8, 2048, 1, 1), graph.FromInt64([]int64{8, 2048, 7, 7}, 4))
}

// --- ViT-B/16, batch 4: 197 tokens of width 768, MLP 3072, 12 heads ---

func BenchmarkMemboundViTLayerNorm(b *testing.B) {
	n := mkNode("", "LayerNormalization", 3, graph.IntAttr("axis", -1), graph.FloatAttr("epsilon", 1e-6))
	// reads X, writes Y (mean and 1/σ are per row)
	benchOp(b, n, 17, 8*size(4, 197, 768), randn(1, 4, 197, 768), filled(1.5, 768), filled(0.25, 768))
}

func BenchmarkMemboundViTLayerNormGrad(b *testing.B) {
	n := mkNode(graph.InternalDomain, "LayerNormalizationGrad", 3, graph.IntAttr("axis", -1), graph.FloatAttr("epsilon", 1e-6))
	// reads dY and X, writes dX
	benchOp(b, n, 17, 12*size(4, 197, 768), randn(1, 4, 197, 768), randn(2, 4, 197, 768), filled(1.5, 768))
}

func BenchmarkMemboundViTSoftmax(b *testing.B) {
	sh := []int{4, 12, 197, 197}
	benchOp(b, mkNode("", "Softmax", 1, graph.IntAttr("axis", -1)), 13, 8*size(sh...), randn(1, sh...))
}

func BenchmarkMemboundViTSoftmaxGrad(b *testing.B) {
	sh := []int{4, 12, 197, 197}
	n := mkNode(graph.InternalDomain, "SoftmaxGrad", 1, graph.IntAttr("axis", -1))
	benchOp(b, n, 13, 12*size(sh...), randn(1, sh...), softmaxOf(randn(2, sh...)))
}

func BenchmarkMemboundViTGeluErf(b *testing.B) {
	sh := []int{4, 197, 3072}
	n := mkNode(graph.FusedDomain, graph.GeluErf, 3)
	// reads X, writes Y, D and A
	benchOp(b, n, 17, 16*size(sh...), randn(1, sh...), scalar32(1.4142135), scalar32(1), scalar32(0.5))
}

func BenchmarkMemboundViTGeluErfGrad(b *testing.B) {
	sh := []int{4, 197, 3072}
	x := randn(1, sh...)
	d := newT(graph.Float32, sh)
	a := newT(graph.Float32, sh)
	for i, v := range x.Data.([]float32) {
		d.Data.([]float32)[i] = v / 1.4142135
		a.Data.([]float32)[i] = 1
	}
	n := mkNode(graph.FusedDomain, graph.GeluErfGrad, 1)
	// reads dY, X, D and A, writes dX
	benchOp(b, n, 17, 20*size(sh...), randn(2, sh...), x, d, a, scalar32(1.4142135), scalar32(0.5), scalar32(1.1283792))
}

func BenchmarkMemboundViTAdd(b *testing.B) {
	sh := []int{4, 197, 768}
	benchOp(b, mkNode("", "Add", 1), 14, 12*size(sh...), randn(1, sh...), randn(2, sh...))
}

// Attention's scaling of q by √64 (and its gradient): [197, 4·12, 64]
// divided by a scalar.
func BenchmarkMemboundViTDivScalar(b *testing.B) {
	sh := []int{197, 48, 64}
	benchOp(b, mkNode("", "Div", 1), 14, 8*size(sh...), randn(1, sh...), scalar32(8))
}

// A bias's gradient: the MLP's [4, 197, 3072] summed to [3072].
func BenchmarkMemboundViTSumToShape(b *testing.B) {
	n := mkNode(graph.InternalDomain, "SumToShape", 1)
	// reads dY, writes the sums (the second input gives the shape only)
	benchOp(b, n, 17, 4*(size(4, 197, 3072)+3072), randn(1, 4, 197, 3072), newT(graph.Float32, []int{3072}))
}

// --- GPT, batch 4 × 128 tokens, width 768, vocabulary 50257 ---

// The position embedding's gradient: [4, 128, 768] summed to
// [1, 128, 768] (four rows of 98,304 columns).
func BenchmarkMemboundGPTSumToShapePosEmbed(b *testing.B) {
	n := mkNode(graph.InternalDomain, "SumToShape", 1)
	// reads dY, writes the sums
	benchOp(b, n, 17, 4*(size(4, 128, 768)+size(128, 768)), randn(1, 4, 128, 768), newT(graph.Float32, []int{1, 128, 768}))
}

func BenchmarkMemboundGPTSoftmax(b *testing.B) {
	sh := []int{4, 12, 128, 128}
	benchOp(b, mkNode("", "Softmax", 1, graph.IntAttr("axis", -1)), 13, 8*size(sh...), randn(1, sh...))
}

func BenchmarkMemboundGPTLayerNorm(b *testing.B) {
	n := mkNode("", "LayerNormalization", 3, graph.IntAttr("axis", -1), graph.FloatAttr("epsilon", 1e-5))
	benchOp(b, n, 17, 8*size(4, 128, 768), randn(1, 4, 128, 768), filled(1.5, 768), filled(0.25, 768))
}

func BenchmarkMemboundGPTGeluErf(b *testing.B) {
	sh := []int{4, 128, 3072}
	n := mkNode(graph.FusedDomain, graph.GeluErf, 3)
	benchOp(b, n, 17, 16*size(sh...), randn(1, sh...), scalar32(1.4142135), scalar32(1), scalar32(0.5))
}

func gptLogits() (*graph.Tensor, *graph.Tensor) {
	const rows, c = 512, 50257
	x := randn(1, rows, c)
	rng := rand.New(rand.NewPCG(3, 4))
	labels := make([]int64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
	}
	return x, graph.FromInt64(labels, rows)
}

func BenchmarkMemboundGPTCrossEntropy(b *testing.B) {
	x, y := gptLogits()
	n := mkNode("", "SoftmaxCrossEntropyLoss", 1, graph.StringAttr("reduction", "mean"))
	// reads the logits
	benchOp(b, n, 17, 4*size(512, 50257), x, y)
}

func BenchmarkMemboundGPTCrossEntropyGrad(b *testing.B) {
	x, y := gptLogits()
	n := mkNode(graph.InternalDomain, "SoftmaxCrossEntropyLossGrad", 1, graph.StringAttr("reduction", "mean"))
	// reads the logits, writes their gradient
	benchOp(b, n, 17, 8*size(512, 50257), scalar32(1), x, y)
}

// The token embedding's gradient: dY 4×128×768 added into zeros of
// 50257×768 at the tokens' rows.
func BenchmarkMemboundGPTEmbeddingGrad(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	tok := make([]int64, 512)
	for i := range tok {
		tok[i] = int64(rng.IntN(50257))
	}
	data := newT(graph.Float32, []int{50257, 768})
	n := mkNode(graph.InternalDomain, "GatherGrad", 1, graph.IntAttr("axis", 0))
	// reads dY, writes the 50257×768 gradient (data gives only the shape)
	benchOp(b, n, 17, 4*(size(512, 768)+size(50257, 768)), randn(1, 4, 128, 768), data, graph.FromInt64(tok, 4, 128))
}

// softmaxOf is softmax along the last axis of t, for SoftmaxGrad's Y.
func softmaxOf(t *graph.Tensor) *graph.Tensor {
	v := t.Data.([]float32)
	w := t.Shape[len(t.Shape)-1]
	for r := 0; r < len(v); r += w {
		row := v[r : r+w]
		var s float32
		for i, e := range row {
			if e > 4 {
				e = 4
			}
			row[i] = float32(1) + e*e // positive
			s += row[i]
		}
		for i := range row {
			row[i] /= s
		}
	}
	return t
}

func newT(d graph.DType, shape []int) *graph.Tensor {
	t, err := graph.NewTensor(d, shape)
	if err != nil {
		panic(err)
	}
	return t
}

// Attention's head split: [4, 197, 768] → [197, 4, 768] (perm 1 0 2), rows
// of 768 contiguous values moved whole.
func BenchmarkMemboundViTTranspose(b *testing.B) {
	sh := []int{4, 197, 768}
	n := mkNode("", "Transpose", 1, graph.IntsAttr("perm", 1, 0, 2))
	benchOp(b, n, 17, 8*size(sh...), randn(1, sh...))
}

// A pre-norm block's LayerNorm gradient with the residual gradient added
// (LayerNormGradAdd): reads dY, X and R, writes dX.
func BenchmarkMemboundGPTLayerNormGradAdd(b *testing.B) {
	sh := []int{4, 128, 768}
	n := mkNode(graph.FusedDomain, graph.LayerNormGradAdd, 3, graph.IntAttr("axis", -1), graph.FloatAttr("epsilon", 1e-5))
	benchOp(b, n, 17, 16*size(sh...), randn(1, sh...), randn(2, sh...), filled(1.5, 768), randn(3, sh...))
}
