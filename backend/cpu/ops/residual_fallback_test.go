package ops

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// runKernel calls the registered kernel of domain:op on a node of its own
// and returns clones of its outputs.
func runKernel(t *testing.T, domain, op string, outs int, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup(domain, op, 17)
	require.True(t, ok, "no kernel for %s:%s", domain, op)
	n := &graph.Node{Name: op, OpType: op, Domain: domain}
	for i := 0; i < outs; i++ {
		n.Outputs = append(n.Outputs, string(rune('a'+i)))
	}
	n.SetAttr(graph.IntAttr("training_mode", 1))
	res, err := spec.Fn(&kern.Context{Opset: 17}, n, in)
	if err != nil {
		return nil, err
	}
	var cp []*graph.Tensor
	for _, r := range res {
		if r != nil {
			r = r.Clone()
		}
		cp = append(cp, r)
	}
	return cp, nil
}

func normal(rng *rand.Rand, shape ...int) *graph.Tensor {
	x := graph.Zeros(graph.Float32, shape...)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestResidualFusedKernelsFallBack: BatchNormAddRelu, AddReluGrad and
// BatchNormAddReluGrad on operands their fused loops do not take (a
// residual or gradient that broadcasts, bfloat16) give their chains'
// results bit for bit, and malformed calls are errors naming the node.
func TestResidualFusedKernelsFallBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	x, bcast := normal(rng, 2, 3, 4, 5), normal(rng, 1, 3, 1, 1)
	params := []*graph.Tensor{normal(rng, 3), normal(rng, 3), graph.Zeros(graph.Float32, 3), graph.FromFloat32([]float32{1, 2, 3}, 3)}
	same := func(name string, want, got []*graph.Tensor) {
		t.Helper()
		require.Len(t, got, len(want), name)
		for i := range want {
			assert.Equal(t, want[i].Shape, got[i].Shape, "%s output %d", name, i)
			assert.Equal(t, want[i].Data, got[i].Data, "%s output %d", name, i)
		}
	}

	// BatchNormAddRelu with a broadcast residual, and in bfloat16.
	chainFwd := func(x, r *graph.Tensor, params []*graph.Tensor) []*graph.Tensor {
		bn, err := runKernel(t, "", "BatchNormalization", 3, append([]*graph.Tensor{x}, params...)...)
		require.NoError(t, err)
		s, err := runKernel(t, "", "Add", 1, bn[0], r)
		require.NoError(t, err)
		y, err := runKernel(t, "", "Relu", 1, s[0])
		require.NoError(t, err)
		return append(y, bn[1:]...)
	}
	got, err := runKernel(t, graph.FusedDomain, graph.BatchNormAddRelu, 3, append(append([]*graph.Tensor{x}, params...), bcast)...)
	require.NoError(t, err)
	same("BatchNormAddRelu, broadcast R", chainFwd(x, bcast, params), got)
	xb, rb := x.Clone(), normal(rng, 2, 3, 4, 5)
	var err2 error
	xb, err2 = kern.Float32ToHalf(nil, xb, graph.BFloat16)
	require.NoError(t, err2)
	rb, err2 = kern.Float32ToHalf(nil, rb, graph.BFloat16)
	require.NoError(t, err2)
	got, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddRelu, 3, append(append([]*graph.Tensor{xb}, params...), rb)...)
	require.NoError(t, err)
	same("BatchNormAddRelu, bfloat16", chainFwd(xb, rb, params), got)

	// AddReluGrad with a broadcast operand.
	g, y := normal(rng, 2, 3, 4, 5), normal(rng, 2, 3, 4, 5)
	sum, err := runKernel(t, "", "Add", 1, g, bcast)
	require.NoError(t, err)
	want, err := runKernel(t, graph.FusedDomain, graph.ReluGrad, 1, sum[0], y)
	require.NoError(t, err)
	got, err = runKernel(t, graph.FusedDomain, graph.AddReluGrad, 1, g, bcast, y)
	require.NoError(t, err)
	same("AddReluGrad, broadcast B", want, got)

	// BatchNormAddReluGrad with a broadcast operand: dS, then the gradient.
	grads, err := runKernel(t, graph.InternalDomain, "BatchNormalizationGrad", 3, want[0], x, params[0], params[2], params[3])
	require.NoError(t, err)
	got, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddReluGrad, 4, g, bcast, y, x, params[0], params[2], params[3])
	require.NoError(t, err)
	same("BatchNormAddReluGrad, broadcast B", append(want, grads...), got)
	// ... and on the fused path, against the same chain.
	g2 := normal(rng, 2, 3, 4, 5)
	sum, err = runKernel(t, "", "Add", 1, g, g2)
	require.NoError(t, err)
	want, err = runKernel(t, graph.FusedDomain, graph.ReluGrad, 1, sum[0], y)
	require.NoError(t, err)
	grads, err = runKernel(t, graph.InternalDomain, "BatchNormalizationGrad", 3, want[0], x, params[0], params[2], params[3])
	require.NoError(t, err)
	got, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddReluGrad, 4, g, g2, y, x, params[0], params[2], params[3])
	require.NoError(t, err)
	same("BatchNormAddReluGrad", append(want, grads...), got)

	// Malformed calls.
	_, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddRelu, 3, append([]*graph.Tensor{x}, params...)...)
	assert.ErrorContains(t, err, graph.BatchNormAddRelu)
	_, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddRelu, 3, append(append([]*graph.Tensor{x}, params...), normal(rng, 2, 3, 4, 6))...)
	assert.ErrorContains(t, err, graph.BatchNormAddRelu, "a residual that does not broadcast")
	_, err = runKernel(t, graph.FusedDomain, graph.AddReluGrad, 1, g, normal(rng, 7), y)
	assert.ErrorContains(t, err, graph.AddReluGrad)
	_, err = runKernel(t, graph.FusedDomain, graph.BatchNormAddReluGrad, 4, g, g2, y, x, params[0])
	assert.ErrorContains(t, err, graph.BatchNormAddReluGrad)
}
