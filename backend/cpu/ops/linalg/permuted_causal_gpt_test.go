package linalg_test

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestCausalGPTStep: a training step of the models/gpt decoder (2 layers,
// 4 heads of 16) lengthened to T = 64, the smallest T whose attention
// products are cut, gives the same loss and gradients bit for bit with the
// causal hints followed as without, and with its attention fused (a causal
// AttentionSoftmax, its head buffers poisoned with NaN) as unfused (T = 16
// of the committed instance, whose PyTorch goldens train/ checks, is below
// that size).
func TestCausalGPTStep(t *testing.T) {
	const T, B, vocab = 64, 3, 256
	m, err := importer.Load("../../../../models/gpt/gpt_small_train.onnx")
	require.NoError(t, err)
	g := m.Graph
	rng := rand.New(rand.NewPCG(3, 4))
	// The position embedding and the causal mask, at T.
	pos := g.Initializers["pos"]
	require.NotNil(t, pos)
	require.Equal(t, []int{1, 16, 64}, pos.Shape)
	wide := graph.Zeros(graph.Float32, 1, T, pos.Shape[2])
	for i := range wide.Float32s() {
		wide.Float32s()[i] = float32(rng.NormFloat64() * 0.02)
	}
	g.Initializers["pos"] = wide
	masks := 0
	for _, n := range g.Nodes {
		if a := n.Attr("value"); n.OpType == "Constant" && a != nil && a.T != nil && graph.IsCausalMask(a.T) {
			a.T = graph.FromFloat32(causalMask(T, float32(math.Inf(-1))).Float32s(), 1, T, T)
			masks++
		}
	}
	require.Equal(t, 2, masks, "the export's masks, one per layer")
	for _, in := range g.Inputs {
		if in.Type != nil && in.Type.HasShape && len(in.Type.Shape) == 2 {
			in.Type.Shape[1] = graph.Dim{Value: T, Known: true}
		}
	}
	loss, err := train.ParseLoss("output:loss")
	require.NoError(t, err)
	prog, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: "cpu", Seed: 7})
	require.NoError(t, err)
	unfusedOnce.Do(func() {
		backend.Register("cpu-unfused-attention", func() (backend.Backend, error) { return withoutAttentionSoftmax(), nil })
	})
	unfused, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: "cpu-unfused-attention", Seed: 7})
	require.NoError(t, err)
	tokens, targets := make([]int64, B*T), make([]int64, B*T)
	for i := range tokens {
		tokens[i], targets[i] = rng.Int64N(vocab), rng.Int64N(vocab)
	}
	inputs := map[string]*graph.Tensor{"tokens": graph.FromInt64(tokens, B, T), "targets": graph.FromInt64(targets, B, T)}
	ops := map[string]int{} // the last step's nodes by op type
	step := func(prog *train.Program) (float64, [][]float32, int64) {
		before := linalg.CausalCuts.Load()
		clear(ops)
		ctx := backend.WithNodeTimer(context.Background(), func(n *graph.Node, _ time.Duration) { ops[n.OpType]++ })
		res, err := prog.ForwardBackward(ctx, inputs, nil, 1)
		require.NoError(t, err)
		grads := make([][]float32, len(res.Grads))
		for i, g := range res.Grads {
			grads[i] = append([]float32(nil), g.Float32s()...)
		}
		return res.Loss, grads, linalg.CausalCuts.Load() - before
	}
	step(prog)
	// The scores' product leaves the tiles above the diagonal as they
	// were (permutedState.unfilled): the causal softmax must not read
	// them, whatever a head's buffer held.
	linalg.PoisonAttentionBuffers(float32(math.NaN()))
	lossCut, gradsCut, cuts := step(prog)
	// T = 4·16: the gradient recomputes P (graph.RecomputeMinRatio), the
	// scores' product a seventh cut product.
	assert.Equal(t, int64(14), cuts, "six products and the recomputed scores in each of the two layers cut")
	assert.Equal(t, 2, ops[graph.AttentionSoftmax], "%v", ops)
	assert.Equal(t, 2, ops[graph.AttentionSoftmaxGradConcat], "%v", ops)
	assert.Zero(t, ops["Softmax"]+ops["Slice"], "%v", ops)
	lossUnfused, gradsUnfused, cuts := step(unfused)
	assert.Equal(t, int64(12), cuts, "six products in each of the two layers cut, unfused")
	assert.Equal(t, 2, ops["Softmax"], "%v", ops)
	*linalg.FollowCausalHints = false
	defer func() { *linalg.FollowCausalHints = true }()
	lossWhole, gradsWhole, cuts := step(prog)
	assert.Zero(t, cuts)
	for name, c := range map[string]struct {
		loss  float64
		grads [][]float32
	}{"whole products": {lossWhole, gradsWhole}, "attention unfused": {lossUnfused, gradsUnfused}} {
		assert.Equal(t, math.Float64bits(c.loss), math.Float64bits(lossCut), "%s: loss %v against %v", name, lossCut, c.loss)
		require.Len(t, gradsCut, len(c.grads))
		for i := range c.grads {
			assert.Equal(t, c.grads[i], gradsCut[i], "%s: gradient %d", name, i)
		}
	}
}

var unfusedOnce sync.Once
