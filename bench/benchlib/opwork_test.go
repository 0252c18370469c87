package benchlib

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestOpProfileCountsGPTProducts: the product ops of a training step of the
// small GPT export (batch 8, T=16, width 64, 4 heads, MLP 256, vocabulary
// 256, 2 layers) add up to three times the forward pass's matrix products
// counted by hand from the architecture (every product's two gradients
// cost what it does), whatever the fused forms the step runs them in.
func TestOpProfileCountsGPTProducts(t *testing.T) {
	const B, T, d, h, ff, V, L = 8, 16, 64, 4, 256, 256, 2
	bt := float64(B * T)
	perLayer := 2*bt*d*3*d + // q, k, v projections
		2*float64(B*h*T*T*(d/h))*2 + // scores and scores·v
		2*bt*d*d + // output projection
		2*bt*d*ff*2 // MLP up and down
	forward := L*perLayer + 2*bt*d*V // + head
	res, err := RunModel(context.Background(), ModelOptions{
		Model: "../../models/gpt/gpt_small_train.onnx", Loss: "output:loss", BatchSize: B,
		Steps: 1, Warmup: 1, IntHigh: V, OpProfile: true,
	})
	require.NoError(t, err)
	var gflop, gb float64
	products := map[string]bool{}
	within := map[string]float64{} // the products timed inside fused ops, by op
	for _, op := range res.OpProfile {
		if op.Within != "" {
			// A product inside a fused op (the causal attention's): its
			// work is the op's too.
			within[op.Within] += op.GFLOP
			continue
		}
		gflop += op.GFLOP
		gb += op.GB
		if op.GFLOP > 0 {
			products[op.Op] = true
			assert.Greater(t, op.GFLOPS, 0.0, op.Op)
			assert.Zero(t, op.GBPS, op.Op)
		}
	}
	assert.InEpsilon(t, 3*forward/1e9, gflop, 1e-9, "product GFLOP per step; ops %v", products)
	require.Len(t, within, 2, "the fused attention's products timed: %v", within)
	for _, op := range res.OpProfile {
		if w, ok := within[op.Op]; ok {
			assert.InEpsilon(t, op.GFLOP, w, 1e-9, "%s: its products' work", op.Op)
		}
	}
	assert.Greater(t, gb, 0.0)
}

// TestOpWorkShapes checks the work of single calls against 2·M·N·K (and
// its convolution analogue) worked out by hand.
func TestOpWorkShapes(t *testing.T) {
	f32 := func(shape ...int) *graph.Tensor { return graph.Zeros(graph.Float32, shape...) }
	node := func(op string, attrs ...*graph.Attr) *graph.Node {
		n := &graph.Node{OpType: op, Attrs: map[string]*graph.Attr{}}
		for _, a := range attrs {
			n.Attrs[a.Name] = a
		}
		return n
	}
	cases := []struct {
		name    string
		n       *graph.Node
		in, out []*graph.Tensor
		flops   float64
	}{
		// [4,16,64]·[64,192]: M=64 rows, N=192, K=64.
		{"MatMul", node("MatMul"), []*graph.Tensor{f32(4, 16, 64), f32(64, 192)}, []*graph.Tensor{f32(4, 16, 192)}, 2 * 64 * 192 * 64},
		// Aᵀ·B with A [32,10] stored K×M: M=10, N=7, K=32.
		{"TransposedMatMul transA", node(graph.TransposedMatMul, graph.IntAttr("transA", 1)),
			[]*graph.Tensor{f32(32, 10), f32(32, 7)}, []*graph.Tensor{f32(10, 7)}, 2 * 10 * 7 * 32},
		// dA = dY[5,7]·B[3,7]ᵀ... shaped like A [5,3]: K=7.
		{"MatMulGradA", node("MatMulGradA"), []*graph.Tensor{f32(5, 7), f32(5, 3), f32(3, 7)}, []*graph.Tensor{f32(5, 3)}, 2 * 5 * 3 * 7},
		// dB = Aᵀ·dY over a batch of 2: A [2,5,3], dY [2,5,7], dB [3,7]: 2·(2·5)·3·7.
		{"MatMulGradB", node("MatMulGradB"), []*graph.Tensor{f32(2, 5, 7), f32(2, 5, 3), f32(3, 7)}, []*graph.Tensor{f32(3, 7)}, 2 * 10 * 3 * 7},
		// Grouped 3x3 convolution: 8→16 channels in 2 groups, 2 images of 5x5
		// outputs: per output element 4·3·3 taps.
		{"Conv groups", node("Conv", graph.IntAttr("group", 2)), []*graph.Tensor{f32(2, 8, 7, 7), f32(16, 4, 3, 3)}, []*graph.Tensor{f32(2, 16, 5, 5)}, 2 * (2 * 16 * 5 * 5) * (4 * 3 * 3)},
		{"ConvBackwardFilter", node("ConvBackwardFilter"), []*graph.Tensor{f32(2, 16, 5, 5), f32(2, 8, 7, 7), nil}, []*graph.Tensor{f32(16, 4, 3, 3)}, 2 * (2 * 16 * 5 * 5) * (4 * 3 * 3)},
		{"ConvBackwardData", node("ConvBackwardData"), []*graph.Tensor{f32(2, 16, 5, 5), f32(16, 4, 3, 3), nil}, []*graph.Tensor{f32(2, 8, 7, 7)}, 2 * (2 * 16 * 5 * 5) * (4 * 3 * 3)},
		// Attention over 6 heads of 5 tokens and 4 features, Q, K, V
		// [5,6,4] read per head: the scores (6·5·5 elements of 4 terms) and
		// P·V (6·5·4 elements of 5 terms); the gradient's four products
		// cost as much each.
		{"AttentionSoftmax", node(graph.AttentionSoftmax, graph.IntsAttr("qk.axes0", 1, 0, 2), graph.IntsAttr("qk.axes1", 1, 2, 0),
			graph.IntsAttr("pv.axes1", 1, 0, 2), graph.IntsAttr("pv.permY", 1, 0, 2)),
			[]*graph.Tensor{f32(5, 6, 4), f32(5, 6, 4), f32(5, 6, 4)}, []*graph.Tensor{f32(5, 6, 4), f32(6, 5, 5)}, 2 * (2 * 6 * 5 * 5 * 4)},
		{"AttentionSoftmaxGrad", node(graph.AttentionSoftmaxGrad, graph.IntsAttr("dp.axes0", 1, 0, 2), graph.IntsAttr("dq.axes1", 1, 0, 2)),
			[]*graph.Tensor{f32(5, 6, 4), f32(6, 5, 5), f32(5, 6, 4), f32(5, 6, 4), f32(5, 6, 4)},
			[]*graph.Tensor{f32(5, 6, 4), f32(5, 6, 4), f32(5, 6, 4)}, 4 * (2 * 6 * 5 * 5 * 4)},
		// P recomputed (no P operand): its 6·5·5 elements from dO and V's
		// views, and the scores' product a fifth product of 4 terms each.
		{"AttentionSoftmaxGrad recompute_p", node(graph.AttentionSoftmaxGrad, graph.IntsAttr("dp.axes0", 1, 0, 2), graph.IntsAttr("dp.axes2", 1, 0, 2),
			graph.IntsAttr("dq.axes1", 1, 0, 2), graph.IntAttr(graph.AttnRecomputeP, 1)),
			[]*graph.Tensor{f32(5, 6, 4), nil, f32(5, 6, 4), f32(5, 6, 4), f32(5, 6, 4)},
			[]*graph.Tensor{f32(5, 6, 4), f32(5, 6, 4), f32(5, 6, 4)}, 5 * (2 * 6 * 5 * 5 * 4)},
		{"Add", node("Add"), []*graph.Tensor{f32(4, 8), f32(8)}, []*graph.Tensor{f32(4, 8)}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flops, bytes := opWork(c.n, c.in, c.out)
			assert.InDelta(t, c.flops, flops, 1e-9)
			want := 0.0
			for _, x := range append(append([]*graph.Tensor{}, c.in...), c.out...) {
				if x != nil {
					want += 4 * float64(x.Size())
				}
			}
			assert.InDelta(t, want, bytes, 1e-9)
		})
	}
	// Inputs read for their shape or type only: GatherGrad of an
	// embedding reads dY and the indices and writes the table's gradient
	// (data gives its shape); CastLike of a scalar reads the scalar.
	ind := graph.Zeros(graph.Int64, 4, 128)
	_, bytes := opWork(node("GatherGrad"), []*graph.Tensor{f32(4, 128, 768), f32(50257, 768), ind}, []*graph.Tensor{f32(50257, 768)})
	assert.InDelta(t, 4*float64(4*128*768+50257*768)+8*4*128, bytes, 1e-9)
	_, bytes = opWork(node("SumToShape"), []*graph.Tensor{f32(4, 197, 768), f32(768)}, []*graph.Tensor{f32(768)})
	assert.InDelta(t, 4*float64(4*197*768+768), bytes, 1e-9)
	_, bytes = opWork(node("CastLike"), []*graph.Tensor{f32(), f32(4, 197, 3072)}, []*graph.Tensor{f32()})
	assert.InDelta(t, 8.0, bytes, 1e-9)
	_, bytes = opWork(node("SplitLike"), []*graph.Tensor{f32(6, 8), f32(2, 8), f32(4, 8)}, []*graph.Tensor{f32(2, 8), f32(4, 8)})
	assert.InDelta(t, 4*float64(2*48), bytes, 1e-9)
	_, bytes = opWork(node("Reshape"), []*graph.Tensor{f32(4, 8)}, []*graph.Tensor{f32(32)})
	assert.Zero(t, bytes, "a reshape moves no data")
	x := f32(4, 8)
	_, bytes = opWork(node("CastLike"), []*graph.Tensor{x, f32(1)}, []*graph.Tensor{x})
	assert.Zero(t, bytes, "an output that is an input moves no data")
	// An output written over a donated input (kern.Spec.Overwrites) is
	// read and written as a fresh one.
	_, bytes = opWork(node("Add"), []*graph.Tensor{x, f32(4, 8)}, []*graph.Tensor{x})
	assert.InDelta(t, 4*float64(3*32), bytes, 1e-9)
}

// TestOpProfileAttentionParts: a step of the transformer_loss fixture
// (one block of self-attention without a mask) runs attention as
// AttentionSoftmax and AttentionSoftmaxGrad, and models/vit_tv's
// (torchvision's nn.MultiheadAttention: q, k and v read packed, the
// gradients written into the in-projection's layout) as AttentionSoftmax
// and AttentionSoftmaxGradConcat; --op-profile lists the products inside
// them as rows of their own, within the fused op: two in the forward,
// four in the gradient, one call per head each, whose flops (as the
// kernel reports them) add up to the fused op's (as opWork counts them
// from its operands, the packed ones at their parts' shape), and which
// the shares' sum leaves out. With the gradient recomputing P (--recompute,
// which recomputes it at the fixtures' sizes too) it lists the scores'
// product as a fifth part of the gradient, counted in its flops.
func TestOpProfileAttentionParts(t *testing.T) {
	for _, c := range []struct {
		model, loss string
		grad        string
	}{
		{"../../models/transformer_loss/transformer_loss_train.onnx", "output:loss", graph.AttentionSoftmaxGrad},
		{"../../models/vit_tv/vit_tv_train.onnx", "", graph.AttentionSoftmaxGradConcat},
	} {
		t.Run(c.grad, func(t *testing.T) { opProfileAttentionParts(t, c.model, c.loss, c.grad, false) })
		t.Run(c.grad+"/recompute_p", func(t *testing.T) { opProfileAttentionParts(t, c.model, c.loss, c.grad, true) })
	}
}

func opProfileAttentionParts(t *testing.T, model, loss, grad string, recompute bool) {
	res, err := RunModel(context.Background(), ModelOptions{
		Model: model, Loss: loss, BatchSize: 4,
		Steps: 2, Warmup: 1, IntHigh: 16, OpProfile: true, Recompute: recompute,
	})
	require.NoError(t, err)
	rows := map[string]OpTime{}
	share := 0.0
	for _, op := range res.OpProfile {
		rows[op.Op] = op
		if op.Within == "" {
			share += op.Share
		}
	}
	assert.InDelta(t, 1, share, 1e-9)
	gradParts := []string{"dp", "dv", "dq", "dk"}
	if recompute {
		gradParts = append(gradParts, "qk")
	} else {
		assert.NotContains(t, rows, grad+"/qk")
	}
	for op, parts := range map[string][]string{
		graph.AttentionSoftmax: {"qk", "pv"},
		grad:                   gradParts,
	} {
		fused, ok := rows[op]
		require.True(t, ok, "%s in the profile: %v", op, rows)
		var gflop float64
		for _, p := range parts {
			r, ok := rows[op+"/"+p]
			require.True(t, ok, "%s/%s in the profile", op, p)
			assert.Equal(t, op, r.Within)
			assert.Greater(t, r.GFLOPS, 0.0)
			heads := r.Calls / fused.Calls // batch 4 × the heads, each product once a head
			assert.Equal(t, heads, math.Round(heads), "%s/%s: %v calls a step, the op %v", op, p, r.Calls, fused.Calls)
			assert.GreaterOrEqual(t, heads, 4.0)
			assert.Equal(t, rows[op+"/"+parts[0]].Calls, r.Calls)
			gflop += r.GFLOP
		}
		assert.InEpsilon(t, fused.GFLOP, gflop, 1e-9, op)
	}
}

// TestOpProfileShapeTable: a profile by op type also keeps the rows by
// shape that the bars are judged on. Two MatMul nodes of different shapes
// (one fast, one slow) make one type row whose rate is between theirs and
// two shape rows with each node's own rate; two nodes of the same shape
// share a row; the products timed inside a fused op are kept; a profile
// by shape has no second table.
func TestOpProfileShapeTable(t *testing.T) {
	mat := func(r, c int) *graph.Tensor { return graph.FromFloat32(make([]float32, r*c), r, c) }
	big := &graph.Node{Name: "big", OpType: "MatMul"}
	small := &graph.Node{Name: "small", OpType: "MatMul"}
	small2 := &graph.Node{Name: "small2", OpType: "MatMul"}
	p := &opProfiler{on: true, byOp: map[string]*OpTime{}}
	// big: 2·64·64·64 flops in 1 µs; small: 2·8·8·8 flops in 1 µs each.
	p.record(big, []*graph.Tensor{mat(64, 64), mat(64, 64)}, []*graph.Tensor{mat(64, 64)}, time.Microsecond)
	p.record(small, []*graph.Tensor{mat(8, 8), mat(8, 8)}, []*graph.Tensor{mat(8, 8)}, time.Microsecond)
	p.record(small2, []*graph.Tensor{mat(8, 8), mat(8, 8)}, []*graph.Tensor{mat(8, 8)}, time.Microsecond)
	p.part("AttentionSoftmax/qk", 1000, time.Microsecond)

	byType := p.table(1)
	shapes := p.shapeTable(1)
	rate := func(rows []OpTime, prefix string) []float64 {
		var v []float64
		for _, r := range rows {
			if strings.HasPrefix(r.Op, prefix) {
				v = append(v, r.GFLOPS)
			}
		}
		return v
	}
	require.Len(t, rate(byType, "MatMul"), 1)
	require.Len(t, rate(shapes, "MatMul"), 2)
	bigRate, smallRate := 2*64*64*64/1e3, 2*8*8*8/1e3 // GFLOP/s at 1 µs a call
	assert.InDelta(t, (2*64*64*64+2*2*8*8*8)/3e3, rate(byType, "MatMul")[0], 1e-9)
	assert.InDelta(t, bigRate, rate(shapes, "MatMul in=[64 64]")[0], 1e-9)
	assert.InDelta(t, smallRate, rate(shapes, "MatMul in=[8 8]")[0], 1e-9)
	for _, r := range shapes {
		if strings.HasPrefix(r.Op, "MatMul in=[8 8]") {
			assert.Equal(t, 2.0, r.Calls, "both small nodes in one row")
		}
	}
	assert.Len(t, rate(shapes, "AttentionSoftmax/qk"), 1)

	byShape := &opProfiler{on: true, byShape: true, byOp: map[string]*OpTime{}}
	byShape.record(big, []*graph.Tensor{mat(64, 64), mat(64, 64)}, []*graph.Tensor{mat(64, 64)}, time.Microsecond)
	assert.Nil(t, byShape.shapeTable(1))
}

// TestOptimizerBytesLeaveOutGatheredGradients: in the GPT fixture's fused
// SGD step the token table (256 × 64) is updated from the gathered rows of
// its gradient, so the optimizer's bytes count every parameter's five
// streams (momentum) but that table's gradient read: 5·4·P − 4·16384. The
// MLP, with no embedding, keeps all five (TestBenchOptimizerBytes).
func TestOptimizerBytesLeaveOutGatheredGradients(t *testing.T) {
	res, err := RunModel(context.Background(), ModelOptions{
		Model: "../../models/gpt/gpt_small_train.onnx", Loss: "output:loss", BatchSize: 4,
		Steps: 1, Warmup: 1, IntHigh: 256, Optimizer: "sgd", LR: 0.01, Momentum: 0.9,
	})
	require.NoError(t, err)
	require.True(t, res.FusedUpdate)
	assert.EqualValues(t, 5*4*int64(res.Parameters)-4*256*64, res.OptimizerBytes)
	assert.Positive(t, res.OptimizerGBps)
}

// TestOpProfileProductUpdateParts: with the GPT fixture's weights updated
// from their product (graph.UpdateProductMinBytes 0), the profile lists
// each product update and, within it, its gradient's blocks as
// SGDUpdateProduct/dW, whose flops are the op's own (opWork counts the
// fused node's product once).
func TestOpProfileProductUpdateParts(t *testing.T) {
	old := graph.UpdateProductMinBytes
	graph.UpdateProductMinBytes = 0
	defer func() { graph.UpdateProductMinBytes = old }()
	res, err := RunModel(context.Background(), ModelOptions{
		Model: "../../models/gpt/gpt_small_train.onnx", Loss: "output:loss", BatchSize: 4,
		Steps: 2, Warmup: 1, IntHigh: 16, OpProfile: true, Optimizer: "sgd", Momentum: 0.9, LR: 0.01,
	})
	require.NoError(t, err)
	rows := map[string]OpTime{}
	for _, op := range res.OpProfile {
		rows[op.Op] = op
	}
	op, ok := rows[graph.SGDUpdateProductOp]
	require.True(t, ok, "product updates in the profile: %v", rows)
	part, ok := rows[graph.SGDUpdateProductOp+"/dW"]
	require.True(t, ok, "their products as a part")
	assert.Equal(t, graph.SGDUpdateProductOp, part.Within)
	assert.Greater(t, part.GFLOP, 0.0)
	assert.InEpsilon(t, op.GFLOP, part.GFLOP, 1e-9)
	assert.Greater(t, res.MedianOptimizerMS, 0.0)
}

// A product's roofline is its time at the GEMM's rate over the longer of
// that and its bytes' time at the triad's: ViT-B/16's class token through
// its MLP (4 rows against a 3072×768 weight: 18.9 MFLOP, 9.56 MB) is held
// to a fifth of a 300 GFLOP/s GEMM by a 28.5 GB/s triad, and gets its rate
// of the triad; a square product keeps a roofline of 1 and no triad rate;
// other ops are unchanged.
func TestApplyRefsRoofline(t *testing.T) {
	refs := &ProfileRefs{GemmGFLOPS: 300, TriadGBps: 28.5}
	rows := []OpTime{
		{Op: "MatMulAddGeluErf", GFLOP: 2 * 4 * 768 * 3072 / 1e9, GFLOPS: 24, GB: 4 * (4*768 + 3072*768 + 3072 + 2*4*3072) / 1e9},
		{Op: "MatMul", GFLOP: 2 * 788 * 768 * 768 / 1e9, GFLOPS: 270, GB: 4 * (788*768*2 + 768*768) / 1e9},
		{Op: "Add", GB: 0.1, GBPS: 20},
	}
	applyRefs(rows, refs)
	// (0.018874 GFLOP / 300) / (0.009560 GB / 28.5) = 6.291e-5 / 3.354e-4
	assert.InDelta(t, 0.1876, rows[0].Roofline, 0.0005)
	assert.InDelta(t, 0.08, rows[0].OfGemm, 1e-9)
	// its 9.56 MB in 18.874 MFLOP / 24 GFLOP/s = 0.7864 ms: 12.16 GB/s
	assert.InDelta(t, 12.157/28.5, rows[0].OfTriad, 0.0005)
	assert.Equal(t, 1.0, rows[1].Roofline)
	assert.Zero(t, rows[1].OfTriad)
	assert.InDelta(t, 0.9, rows[1].OfGemm, 1e-9)
	assert.Zero(t, rows[2].Roofline)
	assert.InDelta(t, 20/28.5, rows[2].OfTriad, 1e-9)
}
