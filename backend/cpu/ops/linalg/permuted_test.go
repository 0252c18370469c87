package linalg

import (
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/elementwise" // Add
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/gradient"    // MatMulGradA/B for the fallback
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/shape"       // Transpose, Gather
	"github.com/onnxtrain/onnxtrain/graph"
)

// unfused runs the chain a PermutedMatMul stands for with the registered
// kernels: each input's Transpose(perm) then Gather(index) steps, the
// product (MatMul or MatMulGradA/B), then Transpose(permY).
type viewSteps struct {
	perm   []int64 // nil: none
	gather []int64 // scalar indices on axis 0, applied after perm
	swap   bool    // then swap the last two axes
}

func lookup(t *testing.T, domain, op string) kern.Kernel {
	t.Helper()
	s, ok := kern.Lookup(domain, op, 17)
	require.True(t, ok, op)
	return s.Fn
}

func applySteps(t *testing.T, x *graph.Tensor, s viewSteps) *graph.Tensor {
	t.Helper()
	if s.perm != nil {
		x = run(t, lookup(t, "", "Transpose"), node("Transpose", graph.IntsAttr("perm", s.perm...)), x)[0]
	}
	for _, i := range s.gather {
		idx := graph.FromInt64([]int64{i})
		idx.Shape = []int{}
		x = run(t, lookup(t, "", "Gather"), node("Gather", &graph.Attr{Name: "axis", Type: graph.AttrInt, I: 0}), x, idx)[0]
		x = x.Clone()
	}
	if s.swap {
		r := x.Rank()
		perm := make([]int64, r)
		for i := range perm {
			perm[i] = int64(i)
		}
		perm[r-2], perm[r-1] = perm[r-1], perm[r-2]
		x = run(t, lookup(t, "", "Transpose"), node("Transpose", graph.IntsAttr("perm", perm...)), x)[0]
	}
	return x
}

// viewAttrsOf is what FuseAttentionViews writes for the steps (computed
// here by hand from the same rule: view axis j is base axis axes[j]).
func viewAttrsOf(rank int, s viewSteps) (axes, fixed []int64) {
	axes = make([]int64, rank)
	for i := range axes {
		axes[i] = int64(i)
	}
	if s.perm != nil {
		next := make([]int64, rank)
		for j, p := range s.perm {
			next[j] = axes[p]
		}
		axes = next
	}
	for _, i := range s.gather {
		fixed = append(fixed, axes[0], i)
		axes = axes[1:]
	}
	if s.swap {
		r := len(axes)
		axes = append([]int64{}, axes...)
		axes[r-2], axes[r-1] = axes[r-1], axes[r-2]
	}
	return axes, fixed
}

func permutedNode(grad int64, permY []int64, bases []*graph.Tensor, steps []viewSteps) *graph.Node {
	n := node("PermutedMatMul")
	n.Domain = graph.FusedDomain
	if grad != 0 {
		n.SetAttr(&graph.Attr{Name: "grad", Type: graph.AttrInt, I: grad})
	}
	if permY != nil {
		n.SetAttr(graph.IntsAttr("permY", permY...))
	}
	for i, s := range steps {
		if s.perm == nil && s.gather == nil && !s.swap {
			continue
		}
		axes, fixed := viewAttrsOf(bases[i].Rank(), s)
		a, f := viewAttrs(i)
		n.SetAttr(graph.IntsAttr(a, axes...))
		if fixed != nil {
			n.SetAttr(graph.IntsAttr(f, fixed...))
		}
	}
	return n
}

func unfusedProduct(t *testing.T, grad int64, permY []int64, bases []*graph.Tensor, steps []viewSteps) *graph.Tensor {
	t.Helper()
	args := make([]*graph.Tensor, len(bases))
	for i := range bases {
		args[i] = applySteps(t, bases[i], steps[i])
	}
	var y *graph.Tensor
	switch grad {
	case 0:
		y = run(t, lookup(t, "", "MatMul"), node("MatMul"), args...)[0]
	case 1:
		y = run(t, lookup(t, graph.InternalDomain, "MatMulGradA"), node("MatMulGradA"), args...)[0]
	case 2:
		y = run(t, lookup(t, graph.InternalDomain, "MatMulGradB"), node("MatMulGradB"), args...)[0]
	}
	if permY != nil {
		y = run(t, lookup(t, "", "Transpose"), node("Transpose", graph.IntsAttr("perm", permY...)), y)[0]
	}
	return y
}

// attention's shapes: qkv [B, N, 3, H, D] viewed as q, k, v [B, H, N, D].
var qkvPerm = []int64{2, 0, 3, 1, 4}

func TestPermutedMatMulMatchesUnfused(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const B, N, H, D = 3, 17, 2, 8
	qkv := randF32(r, B, N, 3, H, D)
	attn := randF32(r, B, H, N, N)
	dOut := randF32(r, B, N, H, D) // gradient of (attn@v).transpose(1,2)
	dS := randF32(r, B, H, N, N)
	q := viewSteps{perm: qkvPerm, gather: []int64{0}}
	kT := viewSteps{perm: qkvPerm, gather: []int64{1}, swap: true}
	v := viewSteps{perm: qkvPerm, gather: []int64{2}}
	dO := viewSteps{perm: []int64{0, 2, 1, 3}}
	none := viewSteps{}
	cases := []struct {
		name  string
		grad  int64
		permY []int64
		bases []*graph.Tensor
		steps []viewSteps
	}{
		{"q·kᵀ", 0, nil, []*graph.Tensor{qkv, qkv}, []viewSteps{q, kT}},
		{"attn·v transposed", 0, []int64{0, 2, 1, 3}, []*graph.Tensor{attn, qkv}, []viewSteps{none, v}},
		{"dattn = dO·vᵀ", 1, nil, []*graph.Tensor{dOut, attn, qkv}, []viewSteps{dO, none, v}},
		{"dv = attnᵀ·dO", 2, nil, []*graph.Tensor{dOut, attn, qkv}, []viewSteps{dO, none, v}},
		{"dq = dS·k", 1, nil, []*graph.Tensor{dS, qkv, qkv}, []viewSteps{none, q, kT}},
		{"dk = (qᵀ·dS)ᵀ", 2, []int64{0, 1, 3, 2}, []*graph.Tensor{dS, qkv, qkv}, []viewSteps{none, q, kT}},
		{"q·kᵀ, result moved", 0, []int64{2, 0, 1, 3}, []*graph.Tensor{qkv, qkv}, []viewSteps{q, kT}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := unfusedProduct(t, c.grad, c.permY, c.bases, c.steps)
			before := permutedFallbacks.Load()
			n := permutedNode(c.grad, c.permY, c.bases, c.steps)
			got := run(t, permutedMatMulKernel, n, c.bases...)[0]
			// With alpha: the product's stores scaled, as a Mul after it.
			const alpha = float32(0.17677669)
			n.SetAttr(&graph.Attr{Name: "alpha", Type: graph.AttrFloat, F: alpha})
			scaled := run(t, permutedMatMulKernel, n, c.bases...)[0]
			for i, v := range want.Float32s() {
				require.Equal(t, v*alpha, scaled.Float32s()[i], "alpha: element %d", i)
			}
			assert.Equal(t, before, permutedFallbacks.Load(), "the strided path ran")
			require.Equal(t, want.Shape, got.Shape)
			// The same GEMM kernel over the same operands: bit for bit.
			assert.Equal(t, want.Float32s(), got.Float32s())
			// And against float64.
			ref := reference64(t, c.grad, c.permY, c.bases, c.steps)
			for i, w := range ref {
				g := float64(got.Float32s()[i])
				if math.Abs(g-w) > 1e-5*math.Max(1, math.Abs(w)) {
					t.Fatalf("element %d: float64 reference %v, got %v", i, w, g)
				}
			}
		})
	}
}

// reference64 is the unfused chain in float64 (the inputs widened).
func reference64(t *testing.T, grad int64, permY []int64, bases []*graph.Tensor, steps []viewSteps) []float64 {
	t.Helper()
	wide := make([]*graph.Tensor, len(bases))
	for i, b := range bases {
		d := make([]float64, b.Size())
		for j, v := range b.Float32s() {
			d[j] = float64(v)
		}
		wide[i] = graph.FromFloat64(d, b.Shape...)
	}
	return unfusedProduct(t, grad, permY, wide, steps).Float64s()
}

func TestPermutedMatMulFallbacks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	// Broadcast gradient (A's batch dim 1): the fallback, same result.
	dy := randF32(r, 2, 5, 3)
	b := randF32(r, 2, 4, 3)
	steps := []viewSteps{{}, {perm: []int64{0, 2, 1}}, {}}
	aT := randF32(r, 1, 4, 5) // A (1×5×4) stored transposed
	want := unfusedProduct(t, 1, nil, []*graph.Tensor{dy, aT, b}, steps)
	before := permutedFallbacks.Load()
	got := run(t, permutedMatMulKernel, permutedNode(1, nil, []*graph.Tensor{dy, aT, b}, steps), dy, aT, b)[0]
	assert.Greater(t, permutedFallbacks.Load(), before, "broadcast gradients take the fallback")
	assert.Equal(t, want.Shape, got.Shape)
	assertClose(t, want.Float32s(), got.Float32s(), 1e-6)

	// float64: the fallback.
	x := graph.FromFloat64([]float64{1, 2, 3, 4, 5, 6}, 1, 2, 3)
	y := graph.FromFloat64([]float64{1, 0, 0, 1, 1, 1}, 3, 2)
	s2 := []viewSteps{{perm: []int64{1, 0, 2}, gather: []int64{0}}, {}}
	want = unfusedProduct(t, 0, nil, []*graph.Tensor{x, y}, s2)
	got = run(t, permutedMatMulKernel, permutedNode(0, nil, []*graph.Tensor{x, y}, s2), x, y)[0]
	assert.Equal(t, want.Shape, got.Shape)
	assert.Equal(t, want.Float64s(), got.Float64s())
}

func TestPermutedMatMulBadInput(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := randF32(r, 2, 3, 4)
	y := randF32(r, 2, 5, 6)
	ctx := &kern.Context{Opset: 17}
	n := permutedNode(0, nil, nil, []viewSteps{})
	_, err := permutedMatMulKernel(ctx, n, []*graph.Tensor{x, y})
	assert.Error(t, err, "inner dimensions differ")

	for _, attrs := range [][]*graph.Attr{
		{graph.IntsAttr("axes0", 0, 1)},                                 // does not cover rank 3
		{graph.IntsAttr("axes0", 0, 1, 1)},                              // axis twice
		{graph.IntsAttr("axes0", 1, 2), graph.IntsAttr("fixed0", 0, 7)}, // index out of range
		{graph.IntsAttr("axes0", 1, 2), graph.IntsAttr("fixed0", 0)},    // odd pairs
		{graph.IntsAttr("permY", 0, 0, 1)},                              // not a perm
		{graph.IntsAttr("permY", 0, 1)},                                 // wrong rank
		{{Name: "grad", Type: graph.AttrInt, I: 3}},
	} {
		n := node("PermutedMatMul", attrs...)
		n.Domain = graph.FusedDomain
		z := randF32(r, 2, 4, 3)
		_, err := permutedMatMulKernel(ctx, n, []*graph.Tensor{x, z})
		assert.Error(t, err, "%v", attrs)
	}
	_, err = permutedMatMulKernel(ctx, n, []*graph.Tensor{x})
	assert.Error(t, err, "missing input")
}

func TestGatherGradSumMatchesUnfused(t *testing.T) {
	t.Run("small", func(t *testing.T) { testGatherGradSum(t, 2, 5, 3, 4) })
	t.Run("parallel", func(t *testing.T) { testGatherGradSum(t, 4, 65, 4, 32) })
	// 1-D data: scalar gradients.
	r := rand.New(rand.NewPCG(9, 9))
	g0, g1 := randF32(r), randF32(r)
	n := node("GatherGradSum", graph.IntsAttr("indices", 1, 0))
	got := run(t, gatherGradSumKernel, n, g0, g1, randF32(r, 2))[0]
	assert.Equal(t, []float32{g1.Float32s()[0], g0.Float32s()[0]}, got.Float32s())
}

func testGatherGradSum(t *testing.T, B, N, H, D int) {
	r := rand.New(rand.NewPCG(7, 8))
	qkv := randF32(r, B, N, 3, H, D)
	grads := []*graph.Tensor{randF32(r, B, H, N, D), randF32(r, B, H, N, D), randF32(r, B, H, N, D)}
	data := applySteps(t, qkv, viewSteps{perm: qkvPerm})
	gg := lookup(t, graph.InternalDomain, "GatherGrad")
	add := lookup(t, "", "Add")
	for _, tc := range []struct {
		name    string
		indices []int64
	}{
		{"all three once", []int64{2, 1, 0}},
		{"repeated index", []int64{1, 1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sum *graph.Tensor
			for j, i := range tc.indices {
				idx := graph.FromInt64([]int64{i})
				idx.Shape = []int{}
				g := run(t, gg, node("GatherGrad", &graph.Attr{Name: "axis", Type: graph.AttrInt, I: 0}), grads[j], data, idx)[0]
				if sum == nil {
					sum = g
				} else {
					sum = run(t, add, node("Add"), sum, g)[0]
				}
			}
			permY := []int64{1, 3, 0, 2, 4}
			want := run(t, lookup(t, "", "Transpose"), node("Transpose", graph.IntsAttr("perm", permY...)), sum)[0]
			n := node("GatherGradSum", graph.IntsAttr("indices", tc.indices...), graph.IntsAttr("axes", qkvPerm...),
				graph.IntsAttr("permY", permY...), &graph.Attr{Name: "axis", Type: graph.AttrInt, I: 0})
			n.Domain = graph.FusedDomain
			got := run(t, gatherGradSumKernel, n, grads[0], grads[1], grads[2], qkv)[0]
			require.Equal(t, want.Shape, got.Shape)
			assert.Equal(t, want.Float32s(), got.Float32s())
		})
	}
	// Bad input: an index out of range, a gradient of the wrong shape.
	ctx := &kern.Context{Opset: 17}
	n := node("GatherGradSum", graph.IntsAttr("indices", 0, 3), graph.IntsAttr("axes", qkvPerm...))
	_, err := gatherGradSumKernel(ctx, n, []*graph.Tensor{grads[0], grads[1], qkv})
	assert.Error(t, err)
	n = node("GatherGradSum", graph.IntsAttr("indices", 0, 1), graph.IntsAttr("axes", qkvPerm...))
	_, err = gatherGradSumKernel(ctx, n, []*graph.Tensor{grads[0], randF32(r, 2, 2), qkv})
	assert.Error(t, err)
	_, err = gatherGradSumKernel(ctx, n, []*graph.Tensor{qkv})
	assert.Error(t, err)
}

// BenchmarkAttentionProducts times attention's q·kᵀ at the ViT's shapes
// (batch 64, 65 tokens, 4 heads of 32) as the strided PermutedMatMul and
// as the unfused Transpose + Gathers + swap + MatMul.
func BenchmarkAttentionProducts(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const B, N, H, D = 64, 65, 4, 32
	qkv := randF32(r, B, N, 3, H, D)
	ctx := &kern.Context{Opset: 17}
	q := viewSteps{perm: qkvPerm, gather: []int64{0}}
	kT := viewSteps{perm: qkvPerm, gather: []int64{1}, swap: true}
	b.Run("permuted", func(b *testing.B) {
		n := permutedNode(0, nil, []*graph.Tensor{qkv, qkv}, []viewSteps{q, kT})
		for i := 0; i < b.N; i++ {
			if _, err := permutedMatMulKernel(ctx, n, []*graph.Tensor{qkv, qkv}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unfused", func(b *testing.B) {
		tr, _ := kern.Lookup("", "Transpose", 17)
		ga, _ := kern.Lookup("", "Gather", 17)
		mm, _ := kern.Lookup("", "MatMul", 17)
		tn := node("Transpose", graph.IntsAttr("perm", qkvPerm...))
		sw := node("Transpose", graph.IntsAttr("perm", 0, 1, 3, 2))
		gn := node("Gather")
		i0, i1 := graph.FromInt64([]int64{0}), graph.FromInt64([]int64{1})
		i0.Shape, i1.Shape = []int{}, []int{}
		for i := 0; i < b.N; i++ {
			t, _ := tr.Fn(ctx, tn, []*graph.Tensor{qkv})
			qq, _ := ga.Fn(ctx, gn, []*graph.Tensor{t[0], i0})
			kk, _ := ga.Fn(ctx, gn, []*graph.Tensor{t[0], i1})
			kt, _ := tr.Fn(ctx, sw, []*graph.Tensor{kk[0]})
			if _, err := mm.Fn(ctx, node("MatMul"), []*graph.Tensor{qq[0], kt[0]}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAttentionBatched compares the strided batched path with the
// contiguous one MatMul takes (gemm.SgemmStrided) on the same products.
func BenchmarkAttentionBatched(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const B, N, H, D = 64, 65, 4, 32
	qkv := randF32(r, B, N, 3, H, D)
	ctx := &kern.Context{Opset: 17}
	q := viewSteps{perm: qkvPerm, gather: []int64{0}}
	kT := viewSteps{perm: qkvPerm, gather: []int64{1}, swap: true}
	b.Run("permuted", func(b *testing.B) {
		n := permutedNode(0, nil, []*graph.Tensor{qkv, qkv}, []viewSteps{q, kT})
		defer reportCPU(b)()
		for i := 0; i < b.N; i++ {
			if _, err := permutedMatMulKernel(ctx, n, []*graph.Tensor{qkv, qkv}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("contiguous", func(b *testing.B) {
		defer reportCPU(b)()
		a, k := randF32(r, B*H, N, D), randF32(r, B*H, N, D)
		for i := 0; i < b.N; i++ {
			c := make([]float32, B*H*N*N) // as the kernel's output outside an executor
			gemm.SgemmStrided(false, true, N, N, D, 1, a.Float32s(), D, N*D, k.Float32s(), D, N*D, 0, c, N, N*N, B*H)
		}
	})
}

// reportCPU reports the process's CPU time per op (user + system, all
// threads), which other processes on the machine disturb less than the
// wall time.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}

// TestPermutedMatMulSharedWeight: nn.MultiheadAttention's in-projection,
// x·Wᵀ with x [B, T, E] viewed as [T, B, E] and W [F, E] shared by the
// batch, and both its gradients (dX back in x's layout, dW summed over
// the batch), run as one product over the batch's rows: the unfused
// chain's values (bit for bit where the rows are independent, within
// float32 rounding for dW, whose sum over the batch is ordered
// differently), no fallback.
func TestPermutedMatMulSharedWeight(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const B, T, E, F = 3, 5, 8, 24
	x := randF32(r, B, T, E)
	w := randF32(r, F, E)
	dy := randF32(r, T, B, F)
	xT := viewSteps{perm: []int64{1, 0, 2}}
	wT := viewSteps{perm: []int64{1, 0}}
	cases := []struct {
		name  string
		grad  int64
		permY []int64
		bases []*graph.Tensor
		steps []viewSteps
		exact bool
	}{
		{"y = xᵀ·Wᵀ", 0, nil, []*graph.Tensor{x, w}, []viewSteps{xT, wT}, true},
		{"y = xᵀ·Wᵀ, result moved", 0, []int64{1, 0, 2}, []*graph.Tensor{x, w}, []viewSteps{xT, wT}, true},
		{"dx = dy·W", 1, []int64{1, 0, 2}, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}, true},
		{"dW = Σ xᵀ·dy", 2, []int64{1, 0}, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}, false},
		{"dWᵀ = Σ xᵀ·dy", 2, nil, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := unfusedProduct(t, c.grad, c.permY, c.bases, c.steps)
			before := permutedFallbacks.Load()
			got := run(t, permutedMatMulKernel, permutedNode(c.grad, c.permY, c.bases, c.steps), c.bases...)[0]
			assert.Equal(t, before, permutedFallbacks.Load(), "no fallback")
			require.Equal(t, want.Shape, got.Shape)
			if c.exact {
				assert.Equal(t, want.Float32s(), got.Float32s())
			}
			ref := reference64(t, c.grad, c.permY, c.bases, c.steps)
			for i, w := range ref {
				g := float64(got.Float32s()[i])
				require.InDelta(t, w, g, 1e-5*math.Max(1, math.Abs(w)), "element %d", i)
			}
		})
	}
}

// batchWorkers spreads a batch over the cores when each core gets at
// least two products, or when the products are too small to split; a few
// products big enough to split themselves (or that would leave a core
// idle at the end) run one at a time.
func TestBatchWorkers(t *testing.T) {
	const attention = 128 * 128 * 64 // GPT-2-small: 48 of them per call
	assert.Equal(t, 16, batchWorkers(48, attention, 2), "three heads a chunk")
	assert.Equal(t, 1, batchWorkers(48, attention, 1), "one core")
	assert.Equal(t, 1, batchWorkers(3, attention, 2), "fewer than two per core, each splits itself")
	assert.Equal(t, 3, batchWorkers(3, 64*64*32, 2), "small products: by batch")
	assert.Equal(t, 1, batchWorkers(4, 8, 2), "tiny: in sequence")
	assert.Equal(t, 4, batchWorkers(4, 1024*1024*1024, 2), "large, even: one per core")
	assert.Equal(t, 1, batchWorkers(5, 1024*1024*1024, 2), "large, uneven: each splits itself")
	assert.Equal(t, 16, batchWorkers(17, 1024*1024*1024, 2), "many: the uneven tail is small")
	assert.Equal(t, 12, batchWorkers(12, attention, 2), "one product a chunk")
}
