package graph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func tensorType(dt DType, shape ...int64) *Type {
	t := &Type{Kind: KindTensor, DType: dt, HasShape: true, Shape: []Dim{}}
	for _, d := range shape {
		t.Shape = append(t.Shape, Dim{Value: d, Known: true})
	}
	return t
}

// TestUpdatedInput: each optimizer op's outputs name the inputs they
// replace, by the layouts of optimizer_ops.go; other ops and malformed
// nodes give nil.
func TestUpdatedInput(t *testing.T) {
	node := func(op string, ins, outs int, attrs ...*Attr) *Node {
		n := &Node{OpType: op, Domain: InternalDomain, Attrs: map[string]*Attr{}}
		for i := range ins {
			n.Inputs = append(n.Inputs, string(rune('a'+i)))
		}
		for i := range outs {
			n.Outputs = append(n.Outputs, string(rune('A'+i)))
		}
		for _, a := range attrs {
			n.Attrs[a.Name] = a
		}
		return n
	}
	// SGD with momentum over 2 tensors: consts, hyper, X1 X2, G1 G2, B1 B2.
	assert.Equal(t, []int{2, 3, 6, 7}, UpdatedInput(node(SGDUpdateOp, 8, 4, IntAttr("momentum", 1))))
	assert.Equal(t, []int{2, 3}, UpdatedInput(node(SGDUpdateOp, 6, 2)))
	// Adam over 1 tensor: consts, hyper, X, G, M, V -> X', M', V'.
	assert.Equal(t, []int{2, 4, 5}, UpdatedInput(node(AdamUpdateOp, 6, 3)))
	assert.Equal(t, []int{2, 4, 5, 6}, UpdatedInput(node(AdamUpdateOp, 7, 4, IntAttr("amsgrad", 1))))
	// The norm is a new value; the gradients are replaced.
	assert.Equal(t, []int{-1, 1, 2}, UpdatedInput(node(ClipGradNormOp, 3, 3)))
	assert.Equal(t, []int{-1, 1}, UpdatedInput(node(UnscaleGradsOp, 2, 2)))
	assert.Equal(t, []int{1, 2}, UpdatedInput(node(ClipGradValueOp, 3, 2)))
	assert.Equal(t, []int{1, 2}, UpdatedInput(node(AccumulateGradOp, 5, 2)))

	assert.Nil(t, UpdatedInput(node(SGDUpdateOp, 7, 2)), "operands that do not split into groups")
	assert.Nil(t, UpdatedInput(node(SGDUpdateOp, 6, 2, IntAttr("tensors", 3))), "tensors attribute disagrees")
	assert.Nil(t, UpdatedInput(node(AccumulateGradOp, 5, 3)), "one output too many")
	other := node("Add", 2, 1)
	other.Domain = ""
	assert.Nil(t, UpdatedInput(other))
	assert.True(t, IsOptimizerOp(node(AdamUpdateOp, 6, 3)))
	assert.False(t, IsOptimizerOp(other))
}

// TestInferOptimizerOps: the updated outputs take the types and shapes of
// the inputs they replace; ClipGradNorm's norm is a float32 scalar and
// UnscaleGrads' flag a bool scalar; a malformed node is a shape error
// naming it.
func TestInferOptimizerOps(t *testing.T) {
	g := &Graph{Name: "opt", Initializers: map[string]*Tensor{}, ValueInfo: map[string]*ValueInfo{}}
	g.Inputs = []*ValueInfo{
		{Name: "consts", Type: tensorType(Float32, 5)}, {Name: "hyper", Type: tensorType(Float32, 1, 5)},
		{Name: "x", Type: tensorType(Float32, 3, 4)}, {Name: "g", Type: tensorType(Float32, 3, 4)},
		{Name: "m", Type: tensorType(Float32, 3, 4)}, {Name: "v", Type: tensorType(Float32, 3, 4)},
		{Name: "max", Type: tensorType(Float32)}, {Name: "inv", Type: tensorType(Float32)},
	}
	g.Nodes = []*Node{
		{Name: "unscale", OpType: UnscaleGradsOp, Domain: InternalDomain, Inputs: []string{"inv", "g"}, Outputs: []string{"inf", "g1"}},
		{Name: "clip", OpType: ClipGradNormOp, Domain: InternalDomain, Inputs: []string{"max", "g1"}, Outputs: []string{"norm", "g2"}},
		{Name: "adam", OpType: AdamUpdateOp, Domain: InternalDomain, Inputs: []string{"consts", "hyper", "x", "g2", "m", "v"}, Outputs: []string{"x1", "m1", "v1"}},
	}
	g.Outputs = []*ValueInfo{{Name: "x1"}, {Name: "m1"}, {Name: "v1"}, {Name: "norm"}, {Name: "inf"}}
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for _, name := range []string{"g1", "g2", "x1", "m1", "v1"} {
		require.NotNil(t, types[name], name)
		assert.Equal(t, "float32[3,4]", types[name].String(), name)
	}
	assert.Equal(t, Float32, types["norm"].DType)
	assert.Empty(t, types["norm"].Shape)
	assert.Equal(t, Bool, types["inf"].DType)

	g.Nodes[2].Inputs = g.Nodes[2].Inputs[:5]
	_, err = InferShapes(g, 17, nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrShapeMismatch), "%v", err)
	assert.ErrorContains(t, err, "adam")
}
