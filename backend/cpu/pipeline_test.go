package cpu_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestDeclaredFusedOpsDecideFusions: the CPU backend declares every fused
// kernel it has; a backend value declaring only ReluGrad (FusedOnly) runs
// that fusion and keeps the Gemm+Relu and transposed-product chains
// decomposed, with the same results; PrimitivesOnly and DisableFused
// declare none.
func TestDeclaredFusedOpsDecideFusions(t *testing.T) {
	g := graph.NewGraph("declared")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: backendtest.F32Type(6, 9)}, {Name: "dy", Type: backendtest.F32Type(6, 5)},
		{Name: "a", Type: backendtest.F32Type(4, 3)}, {Name: "c", Type: backendtest.F32Type(4, 2)},
	}
	rng := rand.New(rand.NewPCG(41, 42))
	g.Initializers = map[string]*graph.Tensor{"z": graph.FromFloat32([]float32{0})}
	for name, shape := range map[string][]int{"w": {5, 9}, "b": {5}} {
		v := graph.Zeros(graph.Float32, shape...)
		for i := range v.Float32s() {
			v.Float32s()[i] = float32(rng.NormFloat64())
		}
		g.Initializers[name] = v
	}
	g.Nodes = []*graph.Node{
		{Name: "gemm", OpType: "Gemm", Inputs: []string{"x", "w", "b"}, Outputs: []string{"h"}, Attrs: map[string]*graph.Attr{"transB": graph.IntAttr("transB", 1)}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"h"}, Outputs: []string{"y"}},
		{Name: "gt", OpType: "Greater", Inputs: []string{"h", "z"}, Outputs: []string{"m"}},
		{Name: "where", OpType: "Where", Inputs: []string{"m", "dy", "z"}, Outputs: []string{"dx"}},
		{Name: "ta", OpType: "Transpose", Inputs: []string{"a"}, Outputs: []string{"at"}, Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 1, 0)}},
		{Name: "mm", OpType: "MatMul", Inputs: []string{"at", "c"}, Outputs: []string{"p"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "dx"}, {Name: "p"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	inputs := backendtest.NormalInputs(&graph.Graph{Inputs: g.Inputs}, rng, 1)
	run := func(b *cpu.Backend) (map[string]int, map[string]*graph.Tensor) {
		exe, err := b.Compile(m, backend.CompileOptions{})
		require.NoError(t, err)
		ops := map[string]int{}
		for _, n := range exe.(backend.PlanInspector).CompiledNodes() {
			ops[n.OpType]++
		}
		out, err := exe.Run(context.Background(), inputs)
		require.NoError(t, err)
		return ops, out
	}
	allOps, all := run(&cpu.Backend{})
	assert.Equal(t, map[string]int{graph.GemmRelu: 1, graph.ReluGrad: 1, graph.TransposedMatMul: 1}, allOps)
	someOps, some := run(&cpu.Backend{FusedOnly: []string{graph.ReluGrad}})
	assert.Equal(t, map[string]int{"Gemm": 1, "Relu": 1, graph.ReluGrad: 1, "Transpose": 1, "MatMul": 1}, someOps)
	noneOps, none := run(&cpu.Backend{FusedOnly: []string{}})
	assert.Equal(t, map[string]int{"Gemm": 1, "Relu": 1, "Greater": 1, "Where": 1, "Transpose": 1, "MatMul": 1}, noneOps)
	for _, name := range []string{"y", "dx"} {
		assert.Equal(t, all[name].Float32s(), some[name].Float32s(), name)
		assert.Equal(t, all[name].Float32s(), none[name].Float32s(), name)
	}
	assert.InDeltaSlice(t, none["p"].Float32s(), all["p"].Float32s(), 1e-6)

	b := &cpu.Backend{}
	assert.Len(t, backend.DeclaredFusedOps(b, backend.CompileOptions{}), len(b.FusedOps()))
	assert.Empty(t, backend.DeclaredFusedOps(b, backend.CompileOptions{PrimitivesOnly: true}))
	assert.Empty(t, backend.DeclaredFusedOps(b, backend.CompileOptions{DisableFused: true}))
}
