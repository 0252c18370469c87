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
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
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

// TestWinogradOptionReachesKernels: the compile option Tuning.Winograd
// (which replaced the process-wide nn.SetWinograd) reaches the
// convolution kernels through kern.Context: forced, a 3×3 stride-1 Conv
// and its input and filter gradients go through the transform; off, none
// does; the two agree to float32 rounding. Two executables with different
// policies run side by side.
func TestWinogradOptionReachesKernels(t *testing.T) {
	g := graph.NewGraph("conv")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: backendtest.F32Type(2, 8, 8, 8)}, {Name: "w", Type: backendtest.F32Type(8, 8, 3, 3)},
		{Name: "dy", Type: backendtest.F32Type(2, 8, 8, 8)}}
	g.Nodes = []*graph.Node{{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
		Attrs: map[string]*graph.Attr{"pads": graph.IntsAttr("pads", 1, 1, 1, 1)}}}
	grads, err := graph.Gradients(g, "y", []string{"x", "w"}, "dy", 17)
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: grads[0]}, {Name: grads[1]}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	inputs := backendtest.NormalInputs(g, rand.New(rand.NewPCG(43, 44)), 1)
	compile := func(p backend.WinogradPolicy) backend.Executable {
		exe, err := (&cpu.Backend{}).Compile(m, backend.CompileOptions{Tuning: backend.Tuning{Winograd: p}})
		require.NoError(t, err)
		return exe
	}
	force, off := compile(backend.WinogradForce), compile(backend.WinogradOff)
	run := func(exe backend.Executable) (map[string]*graph.Tensor, int64, int64) {
		calls, filter := nn.WinogradCalls(), nn.WinogradFilterGradCalls()
		out, err := exe.Run(context.Background(), inputs)
		require.NoError(t, err)
		kept := map[string]*graph.Tensor{}
		for k, v := range out {
			kept[k] = v.Clone()
		}
		return kept, nn.WinogradCalls() - calls, nn.WinogradFilterGradCalls() - filter
	}
	want, calls, filter := run(off)
	assert.Zero(t, calls, "off: no forward or input gradient through the transform")
	assert.Zero(t, filter, "off: no filter gradient through the transform")
	got, calls, filter := run(force)
	assert.Equal(t, int64(2), calls, "forced: the forward product and the input gradient")
	assert.Equal(t, int64(1), filter, "forced: the filter gradient")
	for name, w := range want {
		assert.InDeltaSlice(t, w.Float32s(), got[name].Float32s(), 1e-4, name)
	}
}
