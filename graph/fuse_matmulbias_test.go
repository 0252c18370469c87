package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFuseMatMulBiasUnknownRows: when shape inference lost the product's
// leading dimensions (a Reshape to a computed shape upstream), a 1-D float32
// bias as long as the weight's columns still fuses (it cannot change the
// product's shape); a bias of another length, a rank-2 bias and a weight of
// unknown shape do not.
func TestFuseMatMulBiasUnknownRows(t *testing.T) {
	unknown := &Type{Kind: KindTensor, DType: Float32}
	g := NewGraph("bias")
	g.Inputs = []*ValueInfo{
		{Name: "x", Type: unknown}, {Name: "w", Type: f32(7, 3)}, {Name: "wt", Type: f32(3, 7)},
		{Name: "b", Type: f32(3)}, {Name: "b4", Type: f32(4)}, {Name: "b13", Type: f32(1, 3)}, {Name: "wu", Type: unknown},
	}
	for _, in := range g.Inputs {
		g.ValueInfo[in.Name] = in
	}
	g.Nodes = []*Node{
		{Name: "m1", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p1"}},
		{Name: "a1", OpType: "Add", Inputs: []string{"p1", "b"}, Outputs: []string{"y1"}},
		{Name: "m2", OpType: TransposedMatMul, Domain: FusedDomain, Inputs: []string{"x", "wt"}, Outputs: []string{"p2"},
			Attrs: map[string]*Attr{"transB": {Name: "transB", Type: AttrInt, I: 1}}},
		{Name: "a2", OpType: "Add", Inputs: []string{"b", "p2"}, Outputs: []string{"y2"}},
		{Name: "m3", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p3"}},
		{Name: "a3", OpType: "Add", Inputs: []string{"p3", "b4"}, Outputs: []string{"y3"}},
		{Name: "m4", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"p4"}},
		{Name: "a4", OpType: "Add", Inputs: []string{"p4", "b13"}, Outputs: []string{"y4"}},
		{Name: "m5", OpType: "MatMul", Inputs: []string{"x", "wu"}, Outputs: []string{"p5"}},
		{Name: "a5", OpType: "Add", Inputs: []string{"p5", "b"}, Outputs: []string{"y5"}},
	}
	g.Outputs = []*ValueInfo{{Name: "y1"}, {Name: "y2"}, {Name: "y3"}, {Name: "y4"}, {Name: "y5"}}
	assert.Equal(t, 2, FuseMatMulBias(g))
	fused := map[string]bool{}
	for _, n := range g.Nodes {
		if n.OpType == MatMulAdd {
			fused[n.Outputs[0]] = true
		}
	}
	assert.Equal(t, map[string]bool{"y1": true, "y2": true}, fused)
	assert.Len(t, g.Nodes, 8)
}
