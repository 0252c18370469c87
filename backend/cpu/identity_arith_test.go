package cpu_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestDropIdentityArithmeticKeepsGPTBits: the small GPT's attention scores
// come out of PyTorch's baddbmm export as Mul(scores, 1), and autodiff
// adds Mul(dScores, 1). fuse-attention-views already takes the forward Mul
// into the scores' PermutedMatMul as its alpha; the gradient's, after the
// SoftmaxGrad, stayed (one pass over B·heads·T² floats per layer) until
// drop-identity-arithmetic. Three steps, each followed by the same SGD
// update, give the same loss and gradients, bit for bit, as the
// executable compiled without the pass.
func TestDropIdentityArithmeticKeepsGPTBits(t *testing.T) {
	m, err := importer.Load("../../models/gpt/gpt_small_train.onnx")
	require.NoError(t, err)
	loss, err := train.ParseLoss("output:loss")
	require.NoError(t, err)
	arrays, err := tensorio.ReadNPZ("../../models/gpt/train_case.npz")
	require.NoError(t, err)
	build := func(on bool) (*train.Program, *cpu.Executable) {
		cpu.SetDropIdentityArithmetic(on)
		defer cpu.SetDropIdentityArithmetic(true)
		recorder.take()
		prog, err := train.Build(m, train.ProgramConfig{Loss: loss, Backend: "cpu-recording", Seed: 7})
		require.NoError(t, err)
		exes := recorder.take()
		require.Len(t, exes, 2)
		return prog, exes[0]
	}
	progOn, exeOn := build(true)
	progOff, exeOff := build(false)
	ctx := context.Background()
	for step := 0; step < 3; step++ {
		a, err := progOn.ForwardBackward(ctx, arrays, nil, 1)
		require.NoError(t, err)
		b, err := progOff.ForwardBackward(ctx, arrays, nil, 1)
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(b.Loss), math.Float64bits(a.Loss), "step %d: loss %v with the pass, %v without", step, a.Loss, b.Loss)
		require.Len(t, a.Grads, len(progOn.Params))
		for i, p := range progOn.Params {
			ga, gb := a.Grads[i].Float32s(), b.Grads[i].Float32s()
			require.Len(t, ga, len(gb))
			for j := range ga {
				if math.Float32bits(ga[j]) != math.Float32bits(gb[j]) {
					t.Fatalf("step %d: gradient of %s element %d is %v with the pass, %v without", step, p.Name, j, ga[j], gb[j])
				}
			}
			for _, prog := range []*train.Program{progOn, progOff} {
				w := prog.Params[i].Value.Float32s()
				for j := range w {
					w[j] -= 0.05 * ga[j]
				}
			}
		}
	}
	// muls: the Mul nodes, and the scales of dS that the fused attention
	// gradient took in (fuse-attention-softmax reads a Mul by a scalar
	// constant after the SoftmaxGrad as one); lowerY: the causal marks on
	// products, their own or under a fused attention node's prefix.
	count := func(exe *cpu.Executable) (muls, lowerY int) {
		for _, n := range exe.LastRunNodes() {
			if n.OpType == "Mul" || n.Attr(graph.AttnDSScale) != nil {
				muls++
			}
			for _, prefix := range []string{"", graph.AttnQK, graph.AttnDP} {
				if n.Attr(prefix+graph.CausalLowerYAttr) != nil {
					lowerY++
				}
			}
		}
		return muls, lowerY
	}
	mulsOn, lowerYOn := count(exeOn)
	mulsOff, lowerYOff := count(exeOff)
	t.Logf("Mul nodes: %d with the pass, %d without; products with lowerY: %d, %d", mulsOn, mulsOff, lowerYOn, lowerYOff)
	assert.Equal(t, 2, mulsOff, "without the pass: each layer's Mul(dScores, 1), as a node or as the fused gradient's scale")
	assert.Zero(t, mulsOn, "with the pass: none")
	assert.Equal(t, 4, lowerYOn, "each layer's scores and dP marked")
	assert.Equal(t, lowerYOff, lowerYOn, "the causal marks are the same")
}
