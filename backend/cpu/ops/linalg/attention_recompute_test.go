package linalg_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
)

var noRecomputeOnce sync.Once

// TestRecomputedProbsStep: training steps of two fixtures whose attention
// is not causal — models/vit_tv (torchvision's nn.MultiheadAttention: q,
// k and v read packed, the gradients written side by side,
// AttentionSoftmaxGradConcat) and models/transformer_loss
// (AttentionSoftmaxGrad), both under graph.RecomputeMinRatio — built with
// train's Recompute, which makes every attention gradient recompute P
// (backend.Tuning.RecomputeAttention), give the same losses and gradients
// bit for bit as with the backend that keeps P (without
// graph.AttnRecomputePMode), in the recording run and the planned one; the
// forward then writes no P and the step's memory plan is smaller. Without
// Recompute no gradient recomputes P at these sizes. The causal fixtures
// (the GPT's TestCausalGPTStep, TestCausalAttentionFused at T ≥ 64)
// recompute P at the default ratio.
func TestRecomputedProbsStep(t *testing.T) {
	noRecomputeOnce.Do(func() {
		backend.Register("cpu-keeps-attention-probs", func() (backend.Backend, error) { return backendWithout(graph.AttnRecomputePMode), nil })
	})
	rng := rand.New(rand.NewPCG(31, 32))
	const B = 4
	image := graph.Zeros(graph.Float32, B, 3, 32, 32)
	for i := range image.Float32s() {
		image.Float32s()[i] = float32(rng.NormFloat64())
	}
	tokens, next := make([]int64, B*8), make([]int64, B*8)
	for i := range tokens {
		tokens[i], next[i] = rng.Int64N(16), rng.Int64N(16)
	}
	for _, c := range []struct {
		model, loss string
		inputs      map[string]*graph.Tensor
		labels      *graph.Tensor
		grad        string
	}{
		{"vit_tv", "cross_entropy", map[string]*graph.Tensor{"input": image}, graph.FromInt64([]int64{1, 7, 3, 9}, B), graph.AttentionSoftmaxGradConcat},
		{"transformer_loss", "output:loss", map[string]*graph.Tensor{"x": graph.FromInt64(tokens, B, 8), "labels": graph.FromInt64(next, B, 8)}, nil, graph.AttentionSoftmaxGrad},
	} {
		t.Run(c.model, func(t *testing.T) {
			m, err := importer.Load("../../../../models/" + c.model + "/" + c.model + "_train.onnx")
			require.NoError(t, err)
			loss, err := train.ParseLoss(c.loss)
			require.NoError(t, err)
			type run struct {
				losses    []float64
				grads     [][]float32
				recompute int // gradient nodes run that recompute P
				ops       map[string]int
				keptP     int // forward nodes run that write P
				planned   int64
			}
			steps := func(be string, recompute bool) run {
				prog, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: be, Seed: 5, Recompute: recompute})
				require.NoError(t, err)
				var r run
				for range 2 {
					r.recompute, r.keptP, r.ops = 0, 0, map[string]int{}
					ctx := backend.WithNodeTimer(context.Background(), func(n *graph.Node, _ time.Duration) {
						switch {
						case (n.OpType == graph.AttentionSoftmaxGrad || n.OpType == graph.AttentionSoftmaxGradConcat) && n.AttrInt(graph.AttnRecomputeP, 0) == 1:
							r.recompute++
							r.ops[n.OpType]++
						case n.OpType == graph.AttentionSoftmax && len(n.Outputs) > 1 && n.Outputs[1] != "":
							r.keptP++
						}
					})
					res, err := prog.ForwardBackward(ctx, c.inputs, c.labels, 1)
					require.NoError(t, err)
					r.losses = append(r.losses, res.Loss)
					r.grads = r.grads[:0]
					for _, g := range res.Grads {
						r.grads = append(r.grads, append([]float32(nil), g.Float32s()...))
					}
				}
				r.planned = prog.PlannedBytes()
				return r
			}
			again, kept := steps("cpu", true), steps("cpu-keeps-attention-probs", true)
			plain := steps("cpu", false)
			assert.Zero(t, plain.recompute, "without Recompute, under the ratio")
			assert.Positive(t, plain.keptP)
			assert.Positive(t, again.ops[c.grad], "%s nodes that recompute P: %v", c.grad, again.ops)
			assert.Zero(t, again.keptP, "forwards that write P")
			assert.Zero(t, kept.recompute)
			assert.Equal(t, again.recompute, kept.keptP, "one forward keeping P for each gradient")
			require.Len(t, again.losses, 2)
			for i := range kept.losses {
				assert.Equal(t, math.Float64bits(kept.losses[i]), math.Float64bits(again.losses[i]), "step %d: loss %v against %v", i, again.losses[i], kept.losses[i])
			}
			require.Len(t, again.grads, len(kept.grads))
			for i := range kept.grads {
				assert.Equal(t, kept.grads[i], again.grads[i], "gradient %d", i)
			}
			assert.Less(t, again.planned, kept.planned, "the plan without P")
		})
	}
}

// TestAttentionScratchEstimate: the head buffers the attention kernels
// keep after two runs of a causal attention graph (B = 2, two heads of 16,
// T = 64) are what the plan from shapes counts as scratch (the graph has
// no other kernel scratch), at most: its replay takes a buffer per core
// in every call, which a run whose second core joins late does not. With
// the gradient recomputing P (T = 4·16) the replay holds buffers of 2T×T
// + T floats, without it (the ratio raised) none over T×T + T.
func TestAttentionScratchEstimate(t *testing.T) {
	const B, T, H, D = 2, 64, 2, 16
	defer func(r int) { graph.RecomputeMinRatio = r }(graph.RecomputeMinRatio)
	for _, recompute := range []bool{true, false} {
		t.Run(fmt.Sprintf("recompute=%v", recompute), func(t *testing.T) {
			graph.RecomputeMinRatio = 4
			if !recompute {
				graph.RecomputeMinRatio = 1000
			}
			rng := rand.New(rand.NewPCG(7, 8))
			inputs := attentionInputs(rng, B, T, H, D)
			m := maskedAttentionGraph(t, B, T, H, D, false, causalMask(T, float32(math.Inf(-1))))
			linalg.DropAttentionBuffers()
			exe, err := (&cpu.Backend{}).Compile(m, backend.CompileOptions{})
			require.NoError(t, err)
			for range 2 {
				_, err = exe.Run(context.Background(), inputs)
				require.NoError(t, err)
			}
			kept := linalg.AttentionBufferBytes()
			plan, err := exe.(*cpu.Executable).PlanMemoryFromShapes(map[string][]int{"x": inputs["x"].Shape, "dy": inputs["dy"].Shape})
			require.NoError(t, err)
			require.Positive(t, kept)
			assert.LessOrEqual(t, kept, plan.ScratchBytes)
			one := int64(4 * (T + 1) * T)
			if recompute {
				assert.GreaterOrEqual(t, plan.ScratchBytes, 4*int64(2*T+1)*T+one, "a recomputing buffer beside a forward one")
			} else {
				assert.LessOrEqual(t, plan.ScratchBytes, linalg.AttentionBuffersKept*one)
				assert.Zero(t, plan.ScratchBytes%one, "buffers of T×T + T floats")
			}
		})
	}
}

// TestKeptBuffersPolicy: the head buffers' take and release over sizes
// (what the kernels and estimate-memory's replay both run): the smallest
// kept item that fits is taken whatever the order kept; a release is
// dropped once the workers' count of its size is kept; beyond
// AttentionBuffersKept the smallest goes.
func TestKeptBuffersPolicy(t *testing.T) {
	size := func(c int) int { return c }
	for _, kept := range [][]int{{300, 100, 200}, {100, 200, 300}, {200, 300, 100}} {
		rest, got, ok := linalg.TakeKept(append([]int(nil), kept...), size, 150)
		require.True(t, ok)
		assert.Equal(t, 200, got, "from %v", kept)
		assert.ElementsMatch(t, []int{100, 300}, rest)
	}
	_, _, ok := linalg.TakeKept([]int{100, 120}, size, 150)
	assert.False(t, ok, "none large enough")

	kept := linalg.ReleaseKept([]int{100, 100}, size, 100, 2)
	assert.Equal(t, []int{100, 100}, kept, "a third of one size on two workers is not kept")
	kept = linalg.ReleaseKept(kept, size, 200, 2)
	assert.Equal(t, []int{100, 100, 200}, kept)
	var full []int
	for i := range linalg.AttentionBuffersKept {
		full = linalg.ReleaseKept(full, size, 10+i, 2)
	}
	full = linalg.ReleaseKept(full, size, 5, 2)
	assert.Len(t, full, linalg.AttentionBuffersKept)
	assert.NotContains(t, full, 5, "the smallest goes")
}
