package graph

import (
	"fmt"
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

// TestFuseGemmReluRewiresCastLike: a CastLike whose type operand is the
// Gemm's output (what a gradient rule's ScalarLike leaves when it is not
// folded) does not stop the fusion; it reads the Relu's output instead.
func TestFuseGemmReluRewiresCastLike(t *testing.T) {
	g := NewGraph("gemmrelu")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(6, 9)}, {Name: "w", Type: f32(9, 5)}, {Name: "dy", Type: f32(6, 5)}}
	g.Initializers = map[string]*Tensor{"z": FromFloat32([]float32{0})}
	g.Nodes = []*Node{
		{Name: "gemm", OpType: "Gemm", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"h"}, Outputs: []string{"y"}},
		{Name: "zc", OpType: "CastLike", Inputs: []string{"z", "h"}, Outputs: []string{"zh"}},
		{Name: "rg", OpType: ReluGrad, Domain: FusedDomain, Inputs: []string{"dy", "h"}, Outputs: []string{"dx"}},
		{Name: "gemm2", OpType: "Gemm", Inputs: []string{"x", "w"}, Outputs: []string{"h2"}},
		{Name: "relu2", OpType: "Relu", Inputs: []string{"h2"}, Outputs: []string{"y2"}},
		{Name: "add", OpType: "Add", Inputs: []string{"h2", "h2"}, Outputs: []string{"s2"}}, // another reader
	}
	g.Outputs = []*ValueInfo{{Name: "y"}, {Name: "zh"}, {Name: "dx"}, {Name: "y2"}, {Name: "s2"}}
	assert.Equal(t, 1, FuseGemmRelu(g))
	ops := map[string][]string{}
	for _, n := range g.Nodes {
		ops[n.OpType] = append(ops[n.OpType], n.Inputs...)
	}
	assert.Equal(t, []string{"x", "w"}, ops[GemmRelu])
	assert.Equal(t, []string{"z", "y"}, ops["CastLike"])
	assert.Equal(t, []string{"dy", "y"}, ops[ReluGrad])
	assert.Equal(t, []string{"h2"}, ops["Relu"], "the Gemm read by Add stays")
}

// TestFuseWeightTransposeKeepsOtherReaders: a transposed weight that
// another op also reads (or that is a graph output) keeps its Transpose
// and its readers; a weight read only by products and their gradients
// loses it.
func TestFuseWeightTransposeKeepsOtherReaders(t *testing.T) {
	perm := map[string]*Attr{"perm": {Name: "perm", Type: AttrInts, Ints: []int64{1, 0}}}
	g := NewGraph("w")
	g.Nodes = []*Node{
		{Name: "t1", OpType: "Transpose", Inputs: []string{"w1"}, Outputs: []string{"w1t"}, Attrs: perm},
		{Name: "m1", OpType: "MatMul", Inputs: []string{"x", "w1t"}, Outputs: []string{"y1"}},
		{Name: "ga", OpType: "MatMulGradA", Domain: InternalDomain, Inputs: []string{"dy", "x", "w1t"}, Outputs: []string{"dx"}},
		{Name: "gb", OpType: "MatMulGradB", Domain: InternalDomain, Inputs: []string{"dy", "x", "w1t"}, Outputs: []string{"dwt"}},
		{Name: "tb", OpType: "Transpose", Inputs: []string{"dwt"}, Outputs: []string{"dw"}, Attrs: perm},
		{Name: "t2", OpType: "Transpose", Inputs: []string{"w2"}, Outputs: []string{"w2t"}, Attrs: perm},
		{Name: "m2", OpType: "MatMul", Inputs: []string{"x", "w2t"}, Outputs: []string{"y2"}},
		{Name: "r2", OpType: "Relu", Inputs: []string{"w2t"}, Outputs: []string{"z2"}},
	}
	g.Outputs = []*ValueInfo{{Name: "y1"}, {Name: "dx"}, {Name: "dw"}, {Name: "y2"}, {Name: "z2"}}
	assert.Equal(t, 1, FuseWeightTranspose(g))
	got := map[string]string{}
	for _, n := range g.Nodes {
		got[n.Name] = n.OpType + " " + fmt.Sprint(n.Inputs) + " -> " + fmt.Sprint(n.Outputs)
		if n.OpType == TransposedMatMul {
			got[n.Name] += fmt.Sprint(" ", n.AttrInt("transA", -1), n.AttrInt("transB", -1))
		}
	}
	assert.Equal(t, map[string]string{
		"m1": "TransposedMatMul [x w1] -> [y1] 0 1",
		"ga": "TransposedMatMul [dy w1] -> [dx] 0 0",
		"gb": "MatMulGradB [x dy w1] -> [dw]",
		"t2": "Transpose [w2] -> [w2t]",
		"m2": "MatMul [x w2t] -> [y2]",
		"r2": "Relu [w2t] -> [z2]",
	}, got)
}
