package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFoldConstantsSharesEqualResults: FoldConstants keeps one tensor for
// folded results of shareMinBytes or more that are equal bit for bit (the
// same dtype, shape and bytes), under every name that holds one; results
// that differ in one element, in their shape or in their dtype, and small
// results, keep tensors of their own. The values are the evaluator's.
func TestFoldConstantsSharesEqualResults(t *testing.T) {
	const n = shareMinBytes / 4 // float32 elements of a shared result
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	b := append([]float32(nil), a...)
	b[n/2] = -b[n/2] + 1
	g := NewGraph("fold")
	g.Initializers = map[string]*Tensor{
		"a": FromFloat32(a, n), "a2": FromFloat32(append([]float32(nil), a...), n), "b": FromFloat32(b, n),
		"s": FromFloat32(a[:n/2], n/2), "d": Zeros(Int32, n),
		"z": FromFloat32(make([]float32, n), n),
	}
	node := func(op, in, out string) *Node {
		return &Node{Name: out, OpType: op, Inputs: []string{in}, Outputs: []string{out}}
	}
	g.Nodes = []*Node{
		node("Neg", "a", "x1"), node("Neg", "a2", "x2"), node("Neg", "b", "x3"),
		node("Neg", "s", "s1"), node("Neg", "s", "s2"),
		node("Square", "a", "m1"),                        // [n/2, 2]: x1's bytes, another shape
		node("Copy", "d", "f1"), node("Copy", "z", "f2"), // zeros as int32 and float32, the same shape and bytes: another dtype
		node("Copy", "z", "f3"),
	}
	for _, nd := range g.Nodes {
		g.Outputs = append(g.Outputs, &ValueInfo{Name: nd.Outputs[0]})
	}
	eval := func(nd *Node, in []*Tensor) ([]*Tensor, error) {
		x := in[0]
		if nd.OpType == "Copy" {
			return []*Tensor{x.Clone()}, nil
		}
		out := make([]float32, x.Size())
		for i, v := range x.Float32s() {
			out[i] = -v
		}
		if nd.OpType == "Square" { // a stand-in: the negation, as a matrix
			return []*Tensor{FromFloat32(out, x.Size()/2, 2)}, nil
		}
		return []*Tensor{FromFloat32(out, x.Shape...)}, nil
	}
	require.Equal(t, len(g.Nodes), FoldConstants(g, eval))
	init := g.Initializers
	assert.Same(t, init["x1"], init["x2"], "equal results: one tensor")
	assert.NotSame(t, init["x1"], init["x3"], "one element differs")
	assert.NotSame(t, init["s1"], init["s2"], "under shareMinBytes")
	assert.NotSame(t, init["x1"], init["m1"], "another shape")
	assert.Equal(t, []int{n / 2, 2}, init["m1"].Shape)
	assert.NotSame(t, init["f1"], init["f2"], "another dtype")
	assert.Equal(t, Int32, init["f1"].DType)
	assert.Same(t, init["f2"], init["f3"], "equal float32 zeros")
	for i, v := range a {
		require.Equal(t, -v, init["x2"].Float32s()[i])
		require.Equal(t, -b[i], init["x3"].Float32s()[i])
	}
}
