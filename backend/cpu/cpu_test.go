package cpu_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
)

func tensorType(d graph.DType, dims ...any) *graph.Type {
	t := &graph.Type{Kind: graph.KindTensor, DType: d, HasShape: true, Shape: []graph.Dim{}}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			t.Shape = append(t.Shape, graph.Dim{Value: int64(v), Known: true})
		case string:
			t.Shape = append(t.Shape, graph.Dim{Param: v})
		}
	}
	return t
}

// addModel: Y = Relu(X + W), X: float32[batch, 3].
func addModel() *graph.Model {
	g := graph.NewGraph("add")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tensorType(graph.Float32, "batch", 3)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: tensorType(graph.Float32, "batch", 3)}}
	g.Initializers["W"] = graph.FromFloat32([]float32{1, -2, 3}, 3)
	g.Nodes = []*graph.Node{
		{Name: "add", OpType: "Add", Inputs: []string{"X", "W"}, Outputs: []string{"S"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"S"}, Outputs: []string{"Y"}},
	}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

func compile(t *testing.T, m *graph.Model) backend.Executable {
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	exe, err := b.Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	return exe
}

func TestRunWithDynamicBatch(t *testing.T) {
	exe := compile(t, addModel())
	for _, batch := range []int{1, 4} {
		x := make([]float32, 3*batch)
		for i := range x {
			x[i] = float32(i)
		}
		out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"X": graph.FromFloat32(x, batch, 3)})
		require.NoError(t, err)
		y := out["Y"]
		require.Equal(t, []int{batch, 3}, y.Shape)
		assert.Equal(t, []float32{1, 0, 5}, y.Float32s()[:3])
	}
}

func TestBadInputsAreClearErrors(t *testing.T) {
	exe := compile(t, addModel())
	cases := map[string]struct {
		in   map[string]*graph.Tensor
		want string
	}{
		"missing":    {map[string]*graph.Tensor{}, `missing input "X"`},
		"unknown":    {map[string]*graph.Tensor{"X": graph.FromFloat32(make([]float32, 3), 1, 3), "Z": graph.FromFloat32(nil, 0)}, `"Z" is not an input`},
		"dtype":      {map[string]*graph.Tensor{"X": graph.FromFloat64(make([]float64, 3), 1, 3)}, `input "X" has dtype float64, the graph expects float32`},
		"rank":       {map[string]*graph.Tensor{"X": graph.FromFloat32(make([]float32, 3), 3)}, `input "X" has shape [3]`},
		"fixed dim":  {map[string]*graph.Tensor{"X": graph.FromFloat32(make([]float32, 4), 1, 4)}, `(dim 1)`},
		"short data": {map[string]*graph.Tensor{"X": graph.FromFloat32(make([]float32, 2), 1, 3)}, `holds 2 elements, want 3`},
	}
	for name, c := range cases {
		_, err := exe.Run(context.Background(), c.in)
		require.Error(t, err, name)
		assert.ErrorIs(t, err, cpu.ErrInput, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

func TestSymbolicDimMustAgreeAcrossInputs(t *testing.T) {
	m := addModel()
	g := m.Graph
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: "X2", Type: tensorType(graph.Float32, "batch", 3)})
	g.Nodes[0].Inputs = []string{"X", "X2"}
	exe := compile(t, m)
	_, err := exe.Run(context.Background(), map[string]*graph.Tensor{
		"X":  graph.FromFloat32(make([]float32, 3), 1, 3),
		"X2": graph.FromFloat32(make([]float32, 6), 2, 3),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "batch")
}

func TestUnknownOpNamesTheNode(t *testing.T) {
	m := addModel()
	m.Graph.Nodes[1].OpType = "FancyNewOp"
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	_, err = b.Compile(m, backend.CompileOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, graph.ErrUnsupportedOp))
	assert.Contains(t, err.Error(), `node "relu" (FancyNewOp)`)
	assert.False(t, b.Supports("", "FancyNewOp", 17))
	assert.True(t, b.Supports("", "Relu", 17))
}

func TestHugeShapeIsAnErrorNotACrash(t *testing.T) {
	g := graph.NewGraph("huge")
	g.Inputs = []*graph.ValueInfo{{Name: "shape", Type: tensorType(graph.Int64, 3)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}}
	g.Nodes = []*graph.Node{{Name: "fill", OpType: "ConstantOfShape", Inputs: []string{"shape"}, Outputs: []string{"Y"}}}
	exe := compile(t, &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	_, err := exe.Run(context.Background(), map[string]*graph.Tensor{"shape": graph.FromInt64([]int64{1 << 30, 1 << 30, 1 << 30}, 3)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "fill"`)
}

func TestCycleIsReported(t *testing.T) {
	m := addModel()
	m.Graph.Nodes[0].Inputs = []string{"X", "Y"}
	b, _ := backend.Open("cpu")
	_, err := b.Compile(m, backend.CompileOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cycle")
}
