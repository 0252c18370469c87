package cpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// An output computed early in the graph is reported before the nodes after
// it run, with the value Run returns; every output is reported once per run.
func TestOutputFuncReportsOutputsAsComputed(t *testing.T) {
	g := graph.NewGraph("early")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tensorType(graph.Float32, 3)}}
	g.Outputs = []*graph.ValueInfo{
		{Name: "S", Type: tensorType(graph.Float32, 3)},
		{Name: "Y", Type: tensorType(graph.Float32, 3)},
	}
	g.Nodes = []*graph.Node{
		{Name: "neg", OpType: "Neg", Inputs: []string{"X"}, Outputs: []string{"S"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"S"}, Outputs: []string{"Y"}},
	}
	exe := compile(t, &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	for run := 0; run < 3; run++ { // the first run records the memory plan; later ones use the arena
		var order []string
		got := map[string][]float32{}
		ctx := backend.WithOutputFunc(context.Background(), func(name string, t *graph.Tensor) {
			order = append(order, name)
			got[name] = append([]float32(nil), t.Float32s()...)
		})
		out, err := exe.Run(ctx, map[string]*graph.Tensor{"X": graph.FromFloat32([]float32{1, -2, 3}, 3)})
		require.NoError(t, err)
		require.Equal(t, []string{"S", "Y"}, order)
		require.Equal(t, []float32{-1, 2, -3}, got["S"])
		require.Equal(t, out["Y"].Float32s(), got["Y"])
	}
}

type fakeCollective struct{}

func (fakeCollective) AllReduceSum(context.Context, []float32) error { return nil }
func (fakeCollective) WorldSize() int                                { return 2 }

// Kernels see the collective the caller put in the Run context.
func TestKernelsSeeTheRunContext(t *testing.T) {
	var seen backend.Collective
	kern.RegisterSpec("onnxtrain.test", "ProbeCollective", kern.Spec{Fn: func(k *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		seen = backend.CollectiveFrom(k.Ctx)
		return []*graph.Tensor{in[0]}, nil
	}})
	g := graph.NewGraph("probe")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tensorType(graph.Float32, 3)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: tensorType(graph.Float32, 3)}}
	g.Nodes = []*graph.Node{{Name: "p", Domain: "onnxtrain.test", OpType: "ProbeCollective", Inputs: []string{"X"}, Outputs: []string{"Y"}}}
	exe := compile(t, &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, "onnxtrain.test": 1}, Graph: g})
	ctx := backend.WithCollective(context.Background(), fakeCollective{})
	_, err := exe.Run(ctx, map[string]*graph.Tensor{"X": graph.FromFloat32([]float32{1, 2, 3}, 3)})
	require.NoError(t, err)
	require.NotNil(t, seen)
	require.Equal(t, 2, seen.WorldSize())
}
